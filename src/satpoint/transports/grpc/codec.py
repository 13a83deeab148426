"""OIP JSON documents <-> gRPC messages, and gRPC's wire constants (pure functions, no I/O).

* :func:`encode_infer_request` turns a REST-style OIP request (``{"inputs": [{"name", "datatype",
  "shape", "data"}]}``) into a serialized ``inference.ModelInferRequest``: typed ``contents`` per
  datatype, or ``raw_input_contents`` (little-endian bytes, one entry per input) with ``raw=True``.
* :func:`metadata_to_dict` turns a ``ModelMetadataResponse`` into the REST metadata JSON shape.
* :func:`grpc_frame` adds gRPC's 5-byte message prefix; :func:`normalize_metadata` checks headers.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from satpoint.errors import ConfigError, PayloadError
from satpoint.transports.grpc.grpc_proto import message

#: gRPC status codes (https://grpc.github.io/grpc/core/md_doc_statuscodes.html)
STATUS_NAMES = {
    0: "OK",
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}

_TYPED_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
_RAW_DTYPE = {
    "BOOL": "<u1",
    "INT8": "<i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "UINT8": "<u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
}


def status_name(code: int) -> str:
    return STATUS_NAMES.get(code, f"code {code}")


def grpc_frame(message_bytes: bytes) -> bytes:
    """A gRPC length-prefixed message (uncompressed): flag byte 0, 4-byte big-endian length."""
    return struct.pack(">BI", 0, len(message_bytes)) + message_bytes


def _flat(data: Any) -> list[Any]:
    """Nested lists (row-major) flattened; a scalar becomes a one-element list."""
    if not isinstance(data, list | tuple):
        return [data]
    out: list[Any] = []
    stack: list[Iterable[Any]] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list | tuple):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def _as_bytes(item: Any, where: str) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    raise PayloadError(f"{where}: BYTES elements must be strings, got {type(item).__name__}")


def _set_params(target: Any, params: Mapping[str, Any] | None, where: str) -> None:
    for key, value in (params or {}).items():
        p = target[str(key)]
        if isinstance(value, bool):
            p.bool_param = value
        elif isinstance(value, int):
            p.int64_param = value
        elif isinstance(value, float):
            p.double_param = value
        elif isinstance(value, str):
            p.string_param = value
        else:
            raise PayloadError(f"{where}: parameter {key!r} must be a bool, number or string")


def _raw_contents(datatype: str, values: list[Any], where: str) -> bytes:
    if datatype == "BYTES":
        parts = []
        for v in values:
            b = _as_bytes(v, where)
            parts.append(struct.pack("<I", len(b)) + b)
        return b"".join(parts)
    try:
        return np.asarray(values, dtype=_RAW_DTYPE[datatype]).tobytes()
    except (ValueError, TypeError, OverflowError) as e:
        raise PayloadError(f"{where}: data does not fit {datatype}: {e}") from None


def _typed_contents(contents: Any, datatype: str, values: list[Any], where: str) -> None:
    field = _TYPED_FIELD.get(datatype)
    if field is None:
        raise PayloadError(f"{where}: {datatype} has no typed contents in the gRPC protocol; send it raw (--grpc-raw)")
    try:
        if datatype == "BYTES":
            contents.bytes_contents.extend(_as_bytes(v, where) for v in values)
        elif datatype == "BOOL":
            contents.bool_contents.extend(bool(v) for v in values)
        elif datatype.startswith("FP"):
            getattr(contents, field).extend(float(v) for v in values)
        else:
            getattr(contents, field).extend(int(v) for v in values)
    except (ValueError, TypeError) as e:
        raise PayloadError(f"{where}: data does not fit {datatype}: {e}") from None


def infer_request_message(
    doc: Mapping[str, Any],
    model: str,
    version: str | None = None,
    *,
    raw: bool = False,
    request_id: str | None = None,
) -> Any:
    """The ``ModelInferRequest`` message for an OIP REST-style request document."""
    req = message("ModelInferRequest")(model_name=model, model_version=version or "")
    rid = request_id if request_id is not None else doc.get("id")
    if rid is not None:
        req.id = str(rid)
    _set_params(req.parameters, doc.get("parameters"), "request")
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise PayloadError("an OIP request needs a non-empty 'inputs' list")
    for i, spec in enumerate(inputs):
        where = f"input {i + 1}"
        try:
            name, datatype = str(spec["name"]), str(spec["datatype"]).upper()
            shape = [int(d) for d in spec["shape"]]
            data = spec["data"]
        except (KeyError, TypeError, ValueError):
            raise PayloadError(f"{where}: needs name, datatype, shape (integers) and data") from None
        where = f"input {name!r}"
        values = _flat(data)
        expected = int(np.prod(shape)) if shape else 1
        if len(values) != expected:
            raise PayloadError(f"{where}: shape {shape} needs {expected} values, data has {len(values)}")
        if datatype not in _RAW_DTYPE and datatype != "BYTES":
            raise PayloadError(f"{where}: unknown datatype {datatype!r}")
        tensor = req.inputs.add(name=name, datatype=datatype, shape=shape)
        _set_params(tensor.parameters, spec.get("parameters"), where)
        if raw:
            req.raw_input_contents.append(_raw_contents(datatype, values, where))
        else:
            _typed_contents(tensor.contents, datatype, values, where)
    for out in doc.get("outputs") or []:
        if not isinstance(out, Mapping) or "name" not in out:
            raise PayloadError("each requested output needs a name")
        o = req.outputs.add(name=str(out["name"]))
        _set_params(o.parameters, out.get("parameters"), f"output {out['name']!r}")
    return req


def encode_infer_request(
    doc: Mapping[str, Any],
    model: str,
    version: str | None = None,
    *,
    raw: bool = False,
    request_id: str | None = None,
) -> bytes:
    """The serialized ``ModelInferRequest`` (no gRPC prefix) for an OIP REST-style request."""
    data: bytes = infer_request_message(doc, model, version, raw=raw, request_id=request_id).SerializeToString()
    return data


def decode_infer_request(data: bytes) -> dict[str, Any]:
    """A serialized ``ModelInferRequest`` back as an OIP JSON-style dict (tests and diagnostics)."""
    req = message("ModelInferRequest").FromString(data)
    inputs = []
    for i, t in enumerate(req.inputs):
        if req.raw_input_contents:
            blob = req.raw_input_contents[i]
            if t.datatype == "BYTES":
                values: list[Any] = []
                pos = 0
                while pos < len(blob):
                    (n,) = struct.unpack_from("<I", blob, pos)
                    values.append(blob[pos + 4 : pos + 4 + n].decode(errors="replace"))
                    pos += 4 + n
            else:
                values = np.frombuffer(blob, dtype=_RAW_DTYPE[t.datatype]).tolist()
                if t.datatype == "BOOL":
                    values = [bool(v) for v in values]
        else:
            field = _TYPED_FIELD[t.datatype]
            values = list(getattr(t.contents, field))
            if t.datatype == "BYTES":
                values = [bytes(v).decode(errors="replace") for v in values]
        inputs.append({"name": t.name, "datatype": t.datatype, "shape": list(t.shape), "data": values})
    doc: dict[str, Any] = {"model_name": req.model_name, "inputs": inputs}
    if req.model_version:
        doc["model_version"] = req.model_version
    if req.id:
        doc["id"] = req.id
    return doc


def _param_value(p: Any) -> Any:
    kind = p.WhichOneof("parameter_choice")
    return getattr(p, kind) if kind else None


def _tensor_meta(t: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": t.name, "datatype": t.datatype, "shape": [int(d) for d in t.shape]}
    if t.parameters:
        out["parameters"] = {k: _param_value(v) for k, v in t.parameters.items()}
    return out


def metadata_to_dict(resp: Any) -> dict[str, Any]:
    """A ``ModelMetadataResponse`` as the REST metadata JSON (``{"name", "versions", "platform",
    "inputs": [{"name", "datatype", "shape"}], "outputs": [...]}``)."""
    doc: dict[str, Any] = {
        "name": resp.name,
        "versions": list(resp.versions),
        "platform": resp.platform,
        "inputs": [_tensor_meta(t) for t in resp.inputs],
        "outputs": [_tensor_meta(t) for t in resp.outputs],
    }
    if resp.parameters:
        doc["parameters"] = {k: _param_value(v) for k, v in resp.parameters.items()}
    return doc


_RESERVED = {"te", "content-type", "user-agent", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"}


def normalize_metadata(headers: Sequence[tuple[str, str]] | Mapping[str, str]) -> list[tuple[str, str]]:
    """gRPC metadata from user headers: keys lower-cased and checked; ``-bin`` values base64-encoded
    when they are not already (gRPC carries binary metadata base64-encoded)."""
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    out = []
    for key, value in items:
        k = key.strip().lower()
        if not k or k.startswith(":") or k.startswith("grpc-") or k in _RESERVED or k == "host":
            raise ConfigError(f"header {key!r} cannot be sent as gRPC metadata (reserved name)")
        if any(not (c.isalnum() or c in "-_.") for c in k) or not k.isascii():
            raise ConfigError(f"header {key!r}: gRPC metadata keys use only a-z 0-9 - _ .")
        v = str(value)
        if k.endswith("-bin"):
            try:
                base64.b64decode(v, validate=True)
            except ValueError:
                v = base64.b64encode(v.encode()).decode().rstrip("=")
        elif not v.isascii() or any(ord(c) < 0x20 for c in v):
            raise ConfigError(f"header {key!r}: gRPC metadata values must be printable ASCII")
        out.append((k, v))
    return out
