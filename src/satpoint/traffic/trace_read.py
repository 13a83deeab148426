"""Reading a recorded trace: one timestamp per request, streamed in chunks, never held whole.

Formats: ``csv`` (a header row naming the columns) and ``jsonl`` (one JSON object per line).  The
timestamp column (``time_column``, default ``timestamp``) holds epoch seconds, epoch milliseconds or
microseconds (told apart by magnitude, ``unit="auto"``, decided once on the first value and kept), or
ISO 8601 (``2024-05-01T12:00:00.250Z``; without an offset, UTC).  Optional columns ``model``, ``payload``
(an index into the ``--payload`` JSONL) and ``batch`` are read when present.

``envoy``, ``envoy-json`` and ``prom`` are read by their importers (``traffic.envoy_log``,
``traffic.prom_rates``), which yield chunks of epoch seconds the same way; ``iter_times`` is the one
entry point for all formats.
"""

from __future__ import annotations

import csv
import importlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from satpoint.config import is_number
from satpoint.plan import FloatArray, PlanError

TraceFormat = Literal["csv", "jsonl", "envoy", "envoy-json", "prom"]
FORMATS: tuple[str, ...] = ("csv", "jsonl", "envoy", "envoy-json", "prom")
TimeUnit = Literal["auto", "s", "ms", "us", "iso"]
UNITS: tuple[str, ...] = ("auto", "s", "ms", "us", "iso")
#: rows per chunk: a few MB of float64 per chunk, whatever the file's length
CHUNK_ROWS = 262_144
#: the optional columns of a CSV/JSONL trace
OPTIONAL_COLUMNS = ("model", "payload", "batch")

_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
#: with ``auto``, a first timestamp below this (epoch seconds of March 1973) is a relative time whose unit
#: cannot be told from its size (ms since the start read as seconds replays an hour over 41 days): refused
RELATIVE_BELOW = 1e8


class TraceError(PlanError):
    """A trace that cannot be read or replayed (missing column, bad timestamp, empty slice...)."""


@dataclass
class TraceChunk:
    """One chunk of a trace: epoch seconds, and the optional columns when the file has them."""

    times: FloatArray
    model: list[str | None] | None = None
    payload: np.ndarray[Any, np.dtype[np.int64]] | None = None
    batch: np.ndarray[Any, np.dtype[np.int64]] | None = None


@dataclass
class _Clock:
    """Turns raw timestamp values into epoch seconds; ``auto`` settles the unit on the first value."""

    unit: str
    where: str
    decided: str | None = field(default=None)

    def _decide(self, value: Any) -> str:
        if self.unit != "auto":
            return self.unit
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        else:
            try:
                number = float(str(value))
            except ValueError:
                return "iso"
        # epoch seconds reach 1e11 in the year 5138; milliseconds passed it in 1973, microseconds in 1970
        if abs(number) < RELATIVE_BELOW:
            raise TraceError(
                f"{self.where}: the first timestamp {value!r} is no epoch time (before 1973 in seconds): relative "
                "times (from the trace's start) have no unit to tell; give --trace-time-unit s, ms or us"
            )
        return "s" if abs(number) < 1e11 else "ms" if abs(number) < 1e14 else "us"

    def convert(self, values: list[Any], first_row: int) -> FloatArray:
        if not values:
            return np.empty(0)
        if self.decided is None:
            self.decided = self._decide(values[0])
        if self.decided == "iso":
            out = np.empty(len(values))
            for k, v in enumerate(values):
                out[k] = parse_iso(v, self.where, first_row + k)
            return out
        try:
            nums = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            bad = next(k for k, v in enumerate(values) if not is_number(v))
            raise TraceError(
                f"{self.where}, row {first_row + bad}: timestamp {values[bad]!r} is not a number "
                f"(the first one was read as epoch {self.decided}; give --trace-time-unit iso for ISO 8601)"
            ) from None
        if not np.all(np.isfinite(nums)):
            bad = int(np.argmin(np.isfinite(nums)))
            raise TraceError(f"{self.where}, row {first_row + bad}: timestamp {values[bad]!r} is not finite")
        scaled: FloatArray = nums * _SCALE[self.decided]
        return scaled


def parse_iso(value: Any, where: str = "trace", row: int = 0) -> float:
    """ISO 8601 text as epoch seconds (no offset: UTC); a ``TraceError`` naming the row otherwise."""
    text = str(value).strip()
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise TraceError(f"{where}, row {row}: timestamp {text!r} is neither a number nor ISO 8601") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _ints(values: list[Any], name: str, where: str, first_row: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    try:
        return np.asarray([int(v) for v in values], dtype=np.int64)
    except (TypeError, ValueError):
        bad = next(k for k, v in enumerate(values) if not str(v).strip().lstrip("-").isdigit())
        raise TraceError(f"{where}, row {first_row + bad}: {name} {values[bad]!r} is not a whole number") from None


class _Columns:
    """Collects one chunk's columns, row by row, and turns them into a ``TraceChunk``."""

    def __init__(self, present: set[str]) -> None:
        self.times: list[Any] = []
        self.extra: dict[str, list[Any]] = {c: [] for c in OPTIONAL_COLUMNS if c in present}

    def __len__(self) -> int:
        return len(self.times)

    def chunk(self, clock: _Clock, first_row: int) -> TraceChunk:
        ex = self.extra
        return TraceChunk(
            clock.convert(self.times, first_row),
            model=[str(v) for v in ex["model"]] if "model" in ex else None,
            payload=_ints(ex["payload"], "payload", clock.where, first_row) if "payload" in ex else None,
            batch=_ints(ex["batch"], "batch", clock.where, first_row) if "batch" in ex else None,
        )


def iter_csv(path: Path, time_column: str, unit: str = "auto", chunk: int = CHUNK_ROWS) -> Iterator[TraceChunk]:
    """Chunks of a CSV trace (a header row, then one request a row; rows are numbered from 1 after it)."""
    clock = _Clock(unit, str(path))
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return
        names = [h.strip() for h in header]
        if time_column not in names:
            raise TraceError(
                f"{path}: no column {time_column!r} (columns: {', '.join(names)}); name it with --trace-time-column"
            )
        ti = names.index(time_column)
        idx = {c: names.index(c) for c in OPTIONAL_COLUMNS if c in names}
        cols = _Columns(set(idx))
        row = 1
        first = 1
        for rec in reader:
            if not rec or (len(rec) == 1 and not rec[0].strip()):
                continue
            try:
                cols.times.append(rec[ti])
                for c, k in idx.items():
                    cols.extra[c].append(rec[k])
            except IndexError:
                raise TraceError(f"{path}, row {row}: {len(rec)} fields, fewer than the header's") from None
            row += 1
            if len(cols) >= chunk:
                yield cols.chunk(clock, first)
                cols, first = _Columns(set(idx)), row
        if len(cols):
            yield cols.chunk(clock, first)


def iter_jsonl(path: Path, time_column: str, unit: str = "auto", chunk: int = CHUNK_ROWS) -> Iterator[TraceChunk]:
    """Chunks of a JSONL trace (one object a line; blank lines skipped; lines numbered from 1)."""
    clock = _Clock(unit, str(path))
    present: set[str] | None = None
    cols = _Columns(set())
    first = 1
    with path.open() as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise TraceError(f"{path}, line {line_no}: not JSON ({e})") from None
            if not isinstance(obj, dict) or time_column not in obj:
                raise TraceError(f"{path}, line {line_no}: no {time_column!r} field (name it with --trace-time-column)")
            if present is None:  # the optional fields the first object has are read on every line
                present = {c for c in OPTIONAL_COLUMNS if c in obj}
                cols = _Columns(present)
            if not len(cols):
                first = line_no
            cols.times.append(obj[time_column])
            for c in cols.extra:
                if c not in obj:
                    raise TraceError(f"{path}, line {line_no}: no {c!r} field (the first line had one)")
                cols.extra[c].append(obj[c])
            if len(cols) >= chunk:
                yield cols.chunk(clock, first)
                cols = _Columns(present)
        if len(cols):
            yield cols.chunk(clock, first)


#: the importers beside this module: format -> (module, function); each function yields float64 chunks
#: of epoch seconds (``prom`` draws them from a seeded non-homogeneous Poisson process)
IMPORTERS: dict[str, tuple[str, str]] = {
    "envoy": ("satpoint.traffic.envoy_log", "iter_envoy_times"),
    "envoy-json": ("satpoint.traffic.envoy_log", "iter_envoy_times"),
    "prom": ("satpoint.traffic.prom_rates", "iter_prom_arrivals"),
    "envoy-records": ("satpoint.traffic.envoy_log", "iter_envoy_records"),
}


def _importer(fmt: str) -> Callable[..., Iterator[Any]]:
    module, name = IMPORTERS[fmt]
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise TraceError(f"--trace-format {fmt}: this build has no importer for it ({module}.{name})") from None
    return fn  # type: ignore[no-any-return]


def iter_chunks(
    path: Path,
    fmt: str = "csv",
    time_column: str = "timestamp",
    unit: str = "auto",
    seed: int = 0,
    chunk: int = CHUNK_ROWS,
    *,
    select: dict[str, str] | None = None,
    stats: Any = None,
) -> Iterator[TraceChunk]:
    """Chunks of any supported trace format, in file order (not necessarily sorted).  Envoy logs give their
    inference requests only, with the model of each (its OIP/KServe path; None where the path names none),
    counting what they drop in ``stats`` (an ``EnvoyLogStats``); ``select`` keeps the ``prom`` series whose
    labels match."""
    if fmt not in FORMATS:
        raise TraceError(f"--trace-format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if unit not in UNITS:
        raise TraceError(f"--trace-time-unit {unit!r}: expected one of {', '.join(UNITS)}")
    if not path.is_file():
        raise TraceError(f"--trace {path}: no such file")
    if fmt == "csv":
        yield from iter_csv(path, time_column, unit, chunk)
    elif fmt == "jsonl":
        yield from iter_jsonl(path, time_column, unit, chunk)
    elif fmt == "prom":
        for times in _importer(fmt)(path, seed, chunk=chunk, select=select or None):
            yield TraceChunk(np.asarray(times, dtype=np.float64))
    else:  # Envoy's default (text) or JSON access-log format: inference requests only, with their models
        records = _importer("envoy-records")
        for part in records(
            path, chunk=chunk, fmt="json" if fmt == "envoy-json" else "text", inference_only=True, stats=stats
        ):
            yield TraceChunk(np.asarray(part.times_s, dtype=np.float64), model=list(part.models))


def guess_format(path: Path) -> str:
    """The format a file's name suggests (``.jsonl``/``.ndjson``: jsonl; otherwise csv)."""
    return "jsonl" if path.suffix.lower() in (".jsonl", ".ndjson", ".json") else "csv"
