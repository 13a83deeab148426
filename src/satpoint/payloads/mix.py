"""Model mixes: several models on one server, each request drawn for its model when the schedule is planned.

A mix is asked for as ``ModelMix`` (the models named, or every READY model of the server's repository
index, and the weights: ``uniform``, ``zipf:S`` or a file of weights) and, once the server has been asked,
becomes a ``ResolvedMix`` (the names in order, their weights, and how many prepared requests each model
has).  The prepared requests are laid out model after model: model ``m``'s requests are the payload
indices ``m * per_model .. (m + 1) * per_model - 1``.

Each row's model is a pure function of ``(seed, row index in the schedule)`` (``models_at``: a
counter-based hash, not a sequential generator), so any slice of the schedule (a ``--procs`` shard, a
``--ray`` host's share) draws the same models as the whole plan: the merged per-model counts equal the
single-process plan's exactly.  The draw happens before the run; the hot path only looks up each row's
payload index (``DispatchOptions.payload_index``) and the model column is recorded with the rows
(``Records.model``).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.config import is_number
from satpoint.errors import ConfigError

#: the results header's key for a run's mix (``ResolvedMix.describe``)
HEADER_KEY = "mix"
#: the largest number of models a mix holds (the rows' model column is an int16)
MAX_MODELS = 32_000

I16 = npt.NDArray[np.int16]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ModelMix:
    """The models a run sends to and how often: ``models`` (in order; the first is the most popular under
    ``zipf``) or ``from_server`` (every READY model of ``POST /v2/repository/index``, in natural name order);
    ``weights``: ``uniform``, ``zipf:S`` (model of rank r gets 1/r^S) or the path of a CSV (``model,weight``
    lines) or JSON (``{"model": weight}`` or ``[{"model": ..., "weight": ...}]``) file."""

    models: tuple[str, ...] = ()
    from_server: bool = False
    weights: str = "uniform"
    #: at most this many models resident (``endpoints.overcommit``: load on demand, LRU eviction); None: all
    resident: int | None = None

    def validate(self) -> ModelMix:
        if self.resident is not None and self.resident < 1:
            raise ConfigError(f"--resident must be >= 1, got {self.resident}")
        if self.from_server and self.models:
            raise ConfigError("give the models (--model, repeated) or --models-from-server, not both")
        if not self.from_server and not self.models:
            raise ConfigError("a model mix needs models: --model NAME (repeated) or --models-from-server")
        if len(set(self.models)) != len(self.models):
            dup = sorted({m for m in self.models if self.models.count(m) > 1})
            raise ConfigError(f"a model is named twice in the mix: {', '.join(dup)}")
        parse_weights_spec(self.weights)  # a malformed spec fails before the server is asked
        return self

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"models": list(self.models), "from_server": self.from_server, "weights": self.weights}
        if self.resident is not None:
            out["resident"] = self.resident
        return out


@dataclass(frozen=True)
class ResolvedMix:
    """A mix once its models are known: names (row model ``i`` is ``names[i]``), normalised weights, and the
    number of prepared requests per model (model ``m``'s payloads are ``m * per_model ...``)."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    spec: str = "uniform"
    per_model: int = 1
    from_server: bool = False

    def __post_init__(self) -> None:
        if not self.names or len(self.names) != len(self.weights):
            raise ValueError("a resolved mix needs one weight per model")
        if len(self.names) > MAX_MODELS:
            raise ConfigError(f"a mix holds at most {MAX_MODELS} models, not {len(self.names)}")

    def describe(self) -> dict[str, Any]:
        """The results header's ``mix`` block: what per-model figures are read back with."""
        return {
            "models": list(self.names),
            "weights": [round(w, 9) for w in self.weights],
            "spec": self.spec,
            "from_server": self.from_server,
            "payloads_per_model": self.per_model,
            "draw": "counter hash of (seed, schedule row)",
        }

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> ResolvedMix | None:
        """The mix a results folder recorded (None: a single-model run, or a folder from before mixes)."""
        block = header.get(HEADER_KEY)
        if not isinstance(block, dict) or not block.get("models"):
            return None
        return cls(
            tuple(str(m) for m in block["models"]),
            tuple(float(w) for w in block["weights"]),
            str(block.get("spec", "uniform")),
            int(block.get("payloads_per_model", 1)),
            bool(block.get("from_server", False)),
        )

    def rows(self, n: int, seed: int, start: int = 0) -> tuple[I64, I16]:
        """Rows ``start .. start + n - 1`` of a schedule: each row's payload index and model index."""
        idx = np.arange(start, start + n, dtype=np.int64)
        models = models_at(idx, self.weights, seed)
        payload = models.astype(np.int64) * self.per_model + idx % self.per_model
        return payload, models


# weights ---------------------------------------------------------------------------------------------------
_ZIPF = re.compile(r"^zipf:([0-9]*\.?[0-9]+)$")


def parse_weights_spec(spec: str) -> tuple[str, float | Path]:
    """``("uniform", 0)``, ``("zipf", S)`` or ``("file", path)``; a clear error for anything else."""
    text = spec.strip()
    if text == "uniform":
        return "uniform", 0.0
    m = _ZIPF.match(text)
    if m:
        s = float(m.group(1))
        if not math.isfinite(s) or s < 0:
            raise ConfigError(f"--mix zipf:S needs S >= 0, got {text!r}")
        return "zipf", s
    if text.startswith("zipf"):
        raise ConfigError(f"--mix {text!r}: write zipf:S with a number S >= 0, e.g. zipf:1.1")
    path = Path(text)
    if not path.is_file():
        raise ConfigError(f"--mix {text!r}: not uniform, zipf:S or a file of weights (CSV or JSON)")
    return "file", path


def read_weights_file(path: Path) -> dict[str, float]:
    """A weights file: JSON ``{"model": weight}`` or ``[{"model": ..., "weight": ...}]``, else CSV lines
    ``model,weight`` (a header line ``model,weight`` and ``#`` comments are skipped)."""
    text = Path(path).read_text()
    out: dict[str, float] = {}
    pairs: list[tuple[Any, Any]] = []
    if text.lstrip().startswith(("{", "[")):
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"--mix {path}: not valid JSON ({e})") from None
        if isinstance(doc, dict):
            pairs = list(doc.items())
        elif isinstance(doc, list) and all(isinstance(d, dict) for d in doc):
            pairs = [(d.get("model", d.get("name")), d.get("weight")) for d in doc]
        else:
            raise ConfigError(f"--mix {path}: JSON must be {{model: weight}} or [{{model, weight}}]")
    else:
        for row in csv.reader(line for line in text.splitlines() if line.strip() and not line.startswith("#")):
            if len(row) != 2:
                raise ConfigError(f"--mix {path}: CSV lines are model,weight; got {','.join(row)!r}")
            if row[0].strip().lower() in ("model", "name") and not is_number(row[1]):
                continue  # a header line
            pairs.append((row[0].strip(), row[1].strip()))
    for name, weight in pairs:
        if not name or not is_number(weight):
            raise ConfigError(f"--mix {path}: {name!r} has no numeric weight ({weight!r})")
        w = float(weight)
        if not math.isfinite(w) or w < 0:
            raise ConfigError(f"--mix {path}: the weight of {name!r} must be >= 0, got {weight!r}")
        if str(name) in out:
            raise ConfigError(f"--mix {path}: {name!r} is listed twice")
        out[str(name)] = w
    if not out:
        raise ConfigError(f"--mix {path}: no weights in the file")
    return out


def mix_weights(spec: str, names: Sequence[str]) -> tuple[float, ...]:
    """Normalised weights for ``names`` (in order) under ``spec``.  A file must give a weight to every model
    of the mix and name no other; weights must not all be 0."""
    kind, arg = parse_weights_spec(spec)
    k = len(names)
    if k == 0:
        raise ConfigError("a model mix needs at least one model")
    if kind == "uniform":
        raw = [1.0] * k
    elif kind == "zipf":
        s = float(arg)  # type: ignore[arg-type]
        raw = [1.0 / (r**s) for r in range(1, k + 1)]
    else:
        given = read_weights_file(Path(arg))  # type: ignore[arg-type]
        missing = [n for n in names if n not in given]
        extra = [n for n in given if n not in names]
        if missing:
            raise ConfigError(f"--mix {arg}: no weight for model(s) {', '.join(missing)}")
        if extra:
            raise ConfigError(f"--mix {arg}: weights for model(s) not in the mix: {', '.join(extra)}")
        raw = [given[n] for n in names]
    total = sum(raw)
    if total <= 0:
        raise ConfigError(f"--mix {spec}: the weights add up to 0")
    return tuple(w / total for w in raw)


def natural_order(names: Sequence[str]) -> list[str]:
    """Names sorted with their digits as numbers (``m-2`` before ``m-10``): a server's index order is not
    stable, and zipf ranks follow this order."""

    def key(name: str) -> list[tuple[int, int | str]]:
        return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p]

    return sorted(names, key=key)


# the draw ------------------------------------------------------------------------------------------------
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def uniform_at(rows: I64, seed: int) -> npt.NDArray[np.float64]:
    """A uniform number in [0, 1) for each schedule row, a pure function of ``(seed, row)``."""
    key = _splitmix64(np.full(1, seed & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64))[0]
    with np.errstate(over="ignore"):
        z = _splitmix64(np.asarray(rows, dtype=np.int64).astype(np.uint64) * _GOLDEN ^ key)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def models_at(rows: I64, weights: Sequence[float], seed: int) -> I16:
    """The model index of each schedule row (``rows``: indices into the whole schedule), drawn with
    probabilities ``weights``; the same for a row whichever shard draws it."""
    cum = np.cumsum(np.asarray(weights, dtype=np.float64))
    cum /= cum[-1]
    picked = np.searchsorted(cum, uniform_at(rows, seed), side="right")
    return np.minimum(picked, len(cum) - 1).astype(np.int16)
