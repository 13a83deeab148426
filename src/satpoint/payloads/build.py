"""OIP inference requests, from model metadata or from the user's own JSON files.

Requests are plain OIP JSON documents here (``{"inputs": [{"name", "datatype", "shape", "data"}]}``);
transports encode them once, before the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from satpoint.errors import PayloadError

_FLOAT = {"FP16", "FP32", "FP64"}
_INT = {"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"}


def _random_data(datatype: str, count: int, rng: np.random.Generator) -> list[Any]:
    if datatype in _FLOAT:
        return [round(float(x), 4) for x in rng.random(count)]
    if datatype in _INT:
        return [int(x) for x in rng.integers(0, 10, size=count)]
    if datatype == "BOOL":
        return [bool(x) for x in rng.integers(0, 2, size=count)]
    if datatype == "BYTES":
        return [f"satpoint-{int(x)}" for x in rng.integers(0, 1000, size=count)]
    raise PayloadError(f"unsupported datatype {datatype!r} in model metadata")


def from_metadata(meta: dict[str, Any], batch_size: int = 1, count: int = 8, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` requests with random tensors of each declared input's datatype and shape."""
    inputs = meta.get("inputs") or []
    if not inputs:
        name = meta.get("name", "the model")
        raise PayloadError(
            f"the metadata of {name} declares no inputs, so satpoint cannot build a request; "
            "pass --payload FILE with an OIP request JSON (MLServer lists inputs only when "
            "model-settings.json declares them)"
        )
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(count):
        tensors = []
        for spec in inputs:
            try:
                name, datatype = str(spec["name"]), str(spec["datatype"]).upper()
                shape = [batch_size if int(d) < 0 else int(d) for d in spec["shape"]]
            except (KeyError, TypeError, ValueError):
                raise PayloadError(f"malformed input in model metadata: {spec!r}") from None
            n = int(np.prod(shape)) if shape else 1
            tensors.append({"name": name, "datatype": datatype, "shape": shape, "data": _random_data(datatype, n, rng)})
        docs.append({"inputs": tensors})
    return docs


def _check_doc(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list) or not doc["inputs"]:
        raise PayloadError(f"{where}: not an OIP inference request (an object with a non-empty 'inputs' list)")
    for t in doc["inputs"]:
        if not isinstance(t, dict) or not {"name", "datatype", "shape", "data"} <= t.keys():
            raise PayloadError(f"{where}: each input needs name, datatype, shape and data")
    return doc


def from_file(path: Path) -> list[dict[str, Any]]:
    """One OIP request JSON, a JSON list of them, or JSONL (one request per line, rotated)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise PayloadError(f"cannot read payload file {path}: {e.strerror or e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        pass
    else:
        docs = doc if isinstance(doc, list) else [doc]
        if not docs:
            raise PayloadError(f"payload file {path} holds an empty list: give at least one OIP inference request")
        return [_check_doc(d, f"{path} item {i + 1}") for i, d in enumerate(docs)]
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(_check_doc(json.loads(line), f"{path}:{lineno}"))
        except json.JSONDecodeError as e:
            raise PayloadError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
    if not out:
        raise PayloadError(f"payload file {path} holds no requests")
    return out
