"""Request bodies in Triton's binary tensor extension (REST ``--binary-data``): a JSON header whose inputs
carry ``parameters.binary_data_size`` instead of ``data``, then the tensors' raw bytes; the header's length
goes in the ``Inference-Header-Content-Length`` field."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np


def _json(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


#: Triton's binary tensor extension: the length of the JSON header that starts the body
BINARY_HEADER = "Inference-Header-Content-Length"
_BINARY_DTYPES = {
    "BOOL": "?", "UINT8": "<u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8", "INT8": "<i1",
    "INT16": "<i2", "INT32": "<i4", "INT64": "<i8", "FP16": "<f2", "FP32": "<f4", "FP64": "<f8",
}  # fmt: skip


def encode_binary_body(doc: Mapping[str, Any]) -> tuple[bytes, int]:
    """An OIP request with its tensors in Triton's binary form: a JSON header in which each input has
    ``parameters.binary_data_size`` instead of ``data``, then the inputs' raw little-endian bytes in
    order.  Returns the body and the header's length (the ``Inference-Header-Content-Length`` value)."""
    inputs, blobs = [], []
    for spec in doc.get("inputs") or []:
        datatype = str(spec.get("datatype"))
        if datatype not in _BINARY_DTYPES:
            raise ValueError(f"input {spec.get('name')!r}: {datatype} tensors have no binary form here")
        raw = np.asarray(spec["data"], dtype=_BINARY_DTYPES[datatype]).ravel().tobytes()
        blobs.append(raw)
        head = {k: v for k, v in spec.items() if k != "data"}
        head["parameters"] = {**(spec.get("parameters") or {}), "binary_data_size": len(raw)}
        inputs.append(head)
    header = _json({**{k: v for k, v in doc.items() if k != "inputs"}, "inputs": inputs})
    return header + b"".join(blobs), len(header)
