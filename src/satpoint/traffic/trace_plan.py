"""From a trace file to a run: one streaming scan, the slice to replay, its due times and stages.

``scan`` reads the file once, chunk by chunk, keeping only its count, span, arrivals per whole second
(an int64 per second of trace: a day is 700 kB) and what its optional columns hold.  The slice is the
whole trace, ``--trace-window START..END`` or the busiest ``--trace-peak`` window inside it (found on
the per-second counts).  Before the second pass collects the slice's timestamps, the caller's ``fits``
refuses a slice whose rows would not fit in memory (``session.check_rows_fit``, the plan's estimate).

Due times are ``(t - window start) / speed``: ``--speed 2`` replays the slice twice as fast.

Stages.  Verdicts judge a stage's steady window against its target rate (offered, kept up, queue
growth, latency trend), so a stage must be short enough that the trace's rate is roughly level inside
it, and long enough to hold a verdict's worth of requests.  A trace is cut into stages of
``stage_s`` seconds *of trace* (default 60: per-minute rates, the granularity capacity planners read;
``stage_s / speed`` seconds of run), each a ``Stage(count / hold, 0, hold)``: its target is the rate the
trace itself offered in it, so "offered" and "kept up" compare the replay with the trace.  A stage with
no request joins the one before it (a target must be > 0), and a last stage shorter than half a stage
joins the one before it too.  Targets go up and down (``descending`` plans).  The rate inside a stage is
not flat (bursts): the queue and trend rules judge the whole stage's drift, not the bursts.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from satpoint.plan import FloatArray, Stage
from satpoint.traffic.trace_read import (
    CHUNK_ROWS,
    FORMATS,
    UNITS,
    TraceChunk,
    TraceError,
    guess_format,
    iter_chunks,
    parse_iso,
)

#: the longest trace the per-second scan accepts (its counts take 8 bytes per second of span)
MAX_SPAN_S = 400 * 86_400.0
#: distinct model names kept by the scan (more are counted as "other")
MAX_MODELS = 64
#: the shortest stage in run seconds (unless ``stage_s`` itself is shorter): see ``stage_run_s``
MIN_STAGE_RUN_S = 5.0


@dataclass(frozen=True)
class TraceOptions:
    """How to replay a trace (``run --trace`` and its ``--trace-*`` / ``--speed`` options)."""

    path: Path
    fmt: str | None = None  # None: from the file's name (.jsonl: jsonl, else csv)
    time_column: str = "timestamp"
    time_unit: str = "auto"
    speed: float = 1.0
    window: str | None = None  # "START..END": offsets from the trace's start (90, 2m, 1h) or absolute times
    peak: str | None = None  # "10m": replay the busiest window of that length
    stage_s: float = 60.0  # seconds of trace per stage
    seed: int = 0  # the Prometheus importer draws its arrivals with it
    chunk_rows: int = CHUNK_ROWS
    stages: int = 0  # --stage options given with --trace (refused: the trace is the plan)
    users: int | None = None  # --users given with --trace (refused)
    server_slots: int | None = None  # --server-slots: the server's concurrency (None: estimated)
    #: --trace-model: replay only the requests of this model (rows whose model is known and differs are
    #: dropped and counted; None: every row); Envoy logs name it in their paths, CSV/JSONL in a model column.
    #: A tuple: the models of a mix (a row of any of them is replayed)
    model: str | tuple[str, ...] | None = None
    #: --trace-select label=value: the Prometheus series to replay (none: every series, summed)
    select: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def refuse_without_trace(fmt: str | None, speed: float, window: str | None, peak: str | None) -> None:
        """``--trace-format``, ``--speed``, ``--trace-window``, ``--trace-peak`` without ``--trace``: refused."""
        given = [n for n, v in (("--trace-format", fmt), ("--trace-window", window), ("--trace-peak", peak)) if v]
        if speed != 1.0:
            given.append("--speed")
        if given:
            raise TraceError(f"{', '.join(given)}: only with --trace FILE")

    @property
    def format(self) -> str:
        return self.fmt or guess_format(self.path)

    def validate(self) -> TraceOptions:
        if self.stages or self.users is not None:
            raise TraceError("--trace replays a recorded trace: no --stage, no --users")
        if self.format not in FORMATS:
            raise TraceError(f"--trace-format {self.format!r}: expected one of {', '.join(FORMATS)}")
        if self.time_unit not in UNITS:
            raise TraceError(f"--trace-time-unit {self.time_unit!r}: expected one of {', '.join(UNITS)}")
        if not (math.isfinite(self.speed) and self.speed > 0):
            raise TraceError(f"--speed must be a number > 0, got {self.speed:g}")
        if not (math.isfinite(self.stage_s) and self.stage_s > 0):
            raise TraceError(f"--trace-stage-s must be > 0, got {self.stage_s:g}")
        if self.peak is not None:
            parse_duration(self.peak, "--trace-peak")
        if self.chunk_rows < 1:
            raise TraceError("chunk_rows must be >= 1")
        if self.server_slots is not None and self.server_slots < 1:
            raise TraceError(f"--server-slots must be >= 1, got {self.server_slots}")
        return self

    def describe(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.format,
            "time_column": self.time_column,
            "time_unit": self.time_unit,
            "speed": self.speed,
            "window": self.window,
            "peak": self.peak,
            "stage_s": self.stage_s,
            "seed": self.seed,
            "server_slots": self.server_slots,
            "model_filter": list(self.model) if isinstance(self.model, tuple) else self.model,
            "select": dict(self.select) or None,
        }


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, None: 1.0}


def parse_duration(text: str, what: str = "duration") -> float:
    """``90``, ``90s``, ``10m``, ``1.5h``, ``500ms`` as seconds (> 0)."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise TraceError(f"{what} {text!r}: expected a duration such as 90, 90s, 10m or 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


@dataclass
class TraceScan:
    """What one pass over a trace learned, without keeping its rows."""

    rows: int = 0
    first_s: float = math.inf
    last_s: float = -math.inf
    origin_s: int = 0  # the epoch second of ``per_second[0]``
    per_second: np.ndarray[Any, np.dtype[np.int64]] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    in_order: bool = True  # timestamps never went back (the replay sorts them either way)
    models: Counter[str] = field(default_factory=Counter)
    payload_range: tuple[int, int] | None = None
    batch_range: tuple[int, int] | None = None
    chunks: int = 0
    largest_chunk: int = 0
    #: rows of another model than ``TraceOptions.model``, dropped (by model)
    dropped_models: Counter[str] = field(default_factory=Counter)
    #: Envoy: access-log lines that are no inference request (probes, metadata...), dropped
    non_inference: int = 0
    #: Prometheus: the series replayed (summed)
    series: int | None = None

    def add(self, times: FloatArray) -> None:
        if not len(times):
            return
        self.chunks += 1
        self.largest_chunk = max(self.largest_chunk, len(times))
        last = self.last_s
        if times[0] < last or (len(times) > 1 and bool(np.any(np.diff(times) < 0))):
            self.in_order = False
        lo, hi = float(times.min()), float(times.max())
        self.rows += len(times)
        self.first_s, self.last_s = min(self.first_s, lo), max(last, hi)
        if self.last_s - self.first_s > MAX_SPAN_S:
            raise TraceError(
                f"the trace spans {(self.last_s - self.first_s) / 86_400:.0f} days (more than "
                f"{MAX_SPAN_S / 86_400:.0f}): check the timestamp unit (--trace-time-unit)"
            )
        secs = np.floor(times).astype(np.int64)
        s_lo, s_hi = int(secs.min()), int(secs.max())
        if not len(self.per_second):
            self.origin_s = s_lo
        start = min(self.origin_s, s_lo)
        end = max(self.origin_s + len(self.per_second), s_hi + 1)
        if start != self.origin_s or end != self.origin_s + len(self.per_second):
            grown = np.zeros(end - start, dtype=np.int64)
            grown[self.origin_s - start : self.origin_s - start + len(self.per_second)] = self.per_second
            self.per_second, self.origin_s = grown, start
        counts = np.bincount(secs - s_lo)
        self.per_second[s_lo - self.origin_s : s_lo - self.origin_s + len(counts)] += counts

    def rows_between(self, lo_s: float, hi_s: float) -> int:
        """Arrivals in the whole seconds that ``[lo_s, hi_s)`` touches (an upper bound, for memory)."""
        a = max(0, math.floor(lo_s) - self.origin_s)
        b = min(len(self.per_second), math.ceil(hi_s) - self.origin_s)
        return int(self.per_second[a:b].sum()) if b > a else 0

    def peak_rps(self, seconds: int) -> float:
        """The highest mean rate over any ``seconds`` consecutive whole seconds (1: the busiest second)."""
        if not len(self.per_second):
            return 0.0
        n = min(seconds, len(self.per_second))
        cs = np.concatenate(([0], np.cumsum(self.per_second)))
        return float(np.max(cs[n:] - cs[:-n])) / n

    def dropped(self) -> dict[str, Any]:
        """What the trace held that is not replayed: other models' requests, non-inference calls."""
        return {
            "other_models": sum(self.dropped_models.values()),
            "by_model": dict(self.dropped_models.most_common(MAX_MODELS)),
            "non_inference": self.non_inference,
        }

    def columns(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.models:
            out["model"] = dict(self.models.most_common(MAX_MODELS))
        if self.payload_range is not None:
            out["payload"] = {"min": self.payload_range[0], "max": self.payload_range[1]}
        if self.batch_range is not None:
            out["batch"] = {"min": self.batch_range[0], "max": self.batch_range[1]}
        return out


def _chunks(opts: TraceOptions, sc: TraceScan | None = None) -> Iterator[TraceChunk]:
    """The trace's chunks with ``opts.model``'s rows only (rows naming no model are kept); what is dropped
    is counted in ``sc`` when given (the scan's pass)."""
    from satpoint.traffic.envoy_log import EnvoyLogStats

    stats = EnvoyLogStats()
    select = dict(opts.select) or None
    for ch in iter_chunks(
        opts.path, opts.format, opts.time_column, opts.time_unit, opts.seed, opts.chunk_rows, select=select,
        stats=stats,
    ):  # fmt: skip
        if opts.model is not None and ch.model is not None:
            names = np.asarray(ch.model, dtype=object)
            keep = names == None  # noqa: E711 (elementwise)
            for wanted in opts.model if isinstance(opts.model, tuple) else (opts.model,):
                keep |= names == wanted
            if not keep.all():
                if sc is not None:
                    sc.dropped_models.update(str(n) for n in names[~keep])
                ch = TraceChunk(
                    ch.times[keep],
                    model=[m for m, k in zip(ch.model, keep, strict=True) if k],
                    payload=ch.payload[keep] if ch.payload is not None else None,
                    batch=ch.batch[keep] if ch.batch is not None else None,
                )
        yield ch
    if sc is not None:
        sc.non_inference = stats.filtered
        if opts.format == "prom":
            from satpoint.traffic.prom_rates import chosen_series

            sc.series = chosen_series(opts.path, select)


def scan(opts: TraceOptions) -> TraceScan:
    """One streaming pass over the trace (``opts.chunk_rows`` rows at a time)."""
    out = TraceScan()
    for ch in _chunks(opts, out):
        out.add(ch.times)
        if ch.model is not None:
            for name, n in Counter("(none)" if m is None else m for m in ch.model).items():
                if name in out.models or len(out.models) < MAX_MODELS:
                    out.models[name] += n
                else:
                    out.models["(other)"] += n
        for attr, col in (("payload_range", ch.payload), ("batch_range", ch.batch)):
            if col is not None and len(col):
                old = getattr(out, attr)
                lo, hi = int(col.min()), int(col.max())
                setattr(out, attr, (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi)))
    if not out.rows:
        if out.dropped_models:
            seen = ", ".join(f"{m} ({n})" for m, n in out.dropped_models.most_common(5))
            raise TraceError(
                f"--trace {opts.path}: no request of model {opts.model!r} (the trace holds {seen}); "
                "name the trace's model with --trace-model"
            )
        raise TraceError(f"--trace {opts.path}: no request in the file")
    return out


def _bound(text: str, first_s: float, what: str) -> float:
    """A window bound: an offset from the trace's first request (``90``, ``2m``), or an absolute time
    (ISO 8601, or epoch seconds >= 1e9)."""
    t = text.strip()
    m = _DURATION.match(t)
    if m:
        value = float(m.group(1)) * _UNIT_S[m.group(2)]
        return value if m.group(2) is None and value >= 1e9 else first_s + value
    try:
        return parse_iso(t, what)
    except TraceError:
        raise TraceError(
            f"{what} {text!r}: expected an offset from the trace's start (90, 2m, 1h) or a time "
            "(ISO 8601, epoch seconds)"
        ) from None


def parse_window(text: str, sc: TraceScan) -> tuple[float, float]:
    """``START..END`` (either side may be empty: the trace's start or end) as epoch seconds ``[lo, hi)``."""
    start, sep, end = text.partition("..")
    if not sep:
        raise TraceError(f"--trace-window {text!r}: expected START..END (e.g. 2m..12m)")
    lo = _bound(start, sc.first_s, "--trace-window start") if start.strip() else sc.first_s
    hi = _bound(end, sc.first_s, "--trace-window end") if end.strip() else _after_last(sc.last_s)
    if hi <= lo:
        raise TraceError(f"--trace-window {text!r}: the end is not after the start")
    return lo, hi


def _after_last(last_s: float) -> float:
    """A window end that keeps the last request (windows are half-open)."""
    return float(np.nextafter(last_s, math.inf))


def busiest(sc: TraceScan, length_s: float, lo_s: float, hi_s: float) -> tuple[float, float, int]:
    """The busiest ``length_s`` seconds (whole seconds, starting on a whole second) inside ``[lo_s, hi_s)``:
    ``(start, end, arrivals)``; the whole range when it is not longer than ``length_s``."""
    n = max(1, round(length_s))
    a = max(0, math.floor(lo_s) - sc.origin_s)
    b = min(len(sc.per_second), math.ceil(hi_s) - sc.origin_s)
    counts = sc.per_second[a:b]
    if len(counts) <= n:
        return lo_s, hi_s, int(counts.sum())
    cs = np.concatenate(([0], np.cumsum(counts)))
    sums = cs[n:] - cs[:-n]
    k = int(np.argmax(sums))
    start = float(sc.origin_s + a + k)
    return max(start, lo_s), min(start + n, hi_s), int(sums[k])


def stages_for(due_s: FloatArray, duration_s: float, stage_s: float) -> list[Stage]:
    """Stages of ``stage_s`` run seconds over ``[0, duration_s)``, each targeting the rate the trace offered
    in it (empty stages and a short last one join the stage before; see the module's doc)."""
    n = max(1, math.ceil(duration_s / stage_s - 1e-9))
    edges = [min(k * stage_s, duration_s) for k in range(n + 1)]
    if n > 1 and edges[-1] - edges[-2] < 0.5 * stage_s:
        del edges[-2]
    counts = np.diff(np.searchsorted(due_s, edges, side="left"))
    counts[-1] += len(due_s) - int(counts.sum())  # a row exactly at the end (rounding) stays in the last stage
    merged: list[list[float]] = []  # [start, end, count]
    for k, c in enumerate(counts):
        if merged and (c == 0 or merged[-1][2] == 0):
            merged[-1][1] = edges[k + 1]
            merged[-1][2] += float(c)
        else:
            merged.append([edges[k], edges[k + 1], float(c)])
    if not merged or merged[-1][2] == 0:
        raise TraceError("the slice of the trace holds no request")
    return [Stage(c / (e - s), 0.0, e - s) for s, e, c in merged]


@dataclass
class TraceSchedule:
    """The slice of a trace to replay: run-clock due times, stages, and what to record about it."""

    due_s: FloatArray
    stages: list[Stage]
    info: dict[str, Any]
    #: each row's ``payload`` column (an index into ``--payload``), when the trace has one
    payload_index: np.ndarray[Any, np.dtype[np.int64]] | None = None
    #: the slice's length in trace seconds (exact; ``info["window_s"]`` is rounded)
    window_s: float = 0.0


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build(
    opts: TraceOptions,
    fits: Callable[[int], None] | None = None,
    sc: TraceScan | None = None,
) -> TraceSchedule:
    """Scan the trace (unless ``sc`` is given), pick the slice, check it ``fits`` (rows) in memory, read its
    timestamps (a second streaming pass) and turn them into the run's due times and stages."""
    opts = opts.validate()
    sc = sc or scan(opts)
    lo, hi = parse_window(opts.window, sc) if opts.window else (sc.first_s, _after_last(sc.last_s))
    info: dict[str, Any] = {
        **opts.describe(),
        "rows": sc.rows,
        "first": _iso(sc.first_s),
        "last": _iso(sc.last_s),
        "span_s": round(sc.last_s - sc.first_s, 6),
        "in_order": sc.in_order,
        "peak_rps_1s": sc.peak_rps(1),
        "peak_rps_60s": round(sc.peak_rps(60), 3),
        "columns": sc.columns(),
        "dropped": sc.dropped(),
        "series": sc.series,
    }
    if opts.peak is not None:
        length = parse_duration(opts.peak, "--trace-peak")
        lo, hi, n = busiest(sc, length, lo, hi)
        info["peak_window"] = {
            "start": _iso(lo),
            "end": _iso(hi),
            "start_offset_s": round(lo - sc.first_s, 3),
            "end_offset_s": round(hi - sc.first_s, 3),
            "arrivals": n,
            "mean_rps": round(n / (hi - lo), 3) if hi > lo else None,
        }
    if fits is not None:
        fits(sc.rows_between(lo, hi))
    parts: list[FloatArray] = []
    pays: list[np.ndarray[Any, np.dtype[np.int64]]] = []
    for ch in _chunks(opts):
        t = ch.times
        keep = (t >= lo) & (t < hi)
        if keep.any():
            parts.append(t[keep])
            if ch.payload is not None:
                pays.append(ch.payload[keep])
    if not parts:
        raise TraceError(f"the slice {_iso(lo)} .. {_iso(hi)} of the trace holds no request")
    times = np.concatenate(parts)
    payload = np.concatenate(pays) if len(pays) == len(parts) else None
    del parts, pays
    if not sc.in_order:
        order = np.argsort(times, kind="stable")
        times = times[order]
        payload = payload[order] if payload is not None else None
    due: FloatArray = times - lo
    del times
    info.update(
        {
            "window_start": _iso(lo),
            "window_end": _iso(hi),
            "window_start_offset_s": round(lo - sc.first_s, 6),
            "window_s": round(hi - lo, 6),
            "replayed": len(due),
            "speed": 1.0,  # as recorded, until at_speed
        }
    )
    return at_speed(TraceSchedule(due, [], info, payload, hi - lo), opts.speed, opts.stage_s)


def stage_run_s(stage_s: float, speed: float) -> float:
    """A stage's length in run seconds: ``stage_s`` of trace at ``speed``, but at least ``MIN_STAGE_RUN_S``
    (never more than ``stage_s`` itself), so a fast replay's verdicts rest on a few seconds at least."""
    return max(stage_s / speed, min(MIN_STAGE_RUN_S, stage_s))


def at_speed(recorded: TraceSchedule, speed: float, stage_s: float) -> TraceSchedule:
    """The slice as recorded (``build`` at speed 1, or its own result) replayed at ``speed``: due times
    divided, stages cut again (``stage_run_s``); the trace is not read again."""
    base = recorded.info.get("speed", 1.0)
    due: FloatArray = recorded.due_s * (base / speed) if base != speed else recorded.due_s
    window_s = recorded.window_s if recorded.window_s > 0 else float(recorded.info["window_s"])
    duration = window_s / speed
    run_stage = stage_run_s(stage_s, speed)
    stages = stages_for(due, duration, run_stage)
    info = {
        **recorded.info,
        "speed": speed,
        "stage_s": stage_s,
        "stage_run_s": round(run_stage, 6),
        "run_s": round(duration, 6),
        "mean_rps": round(len(due) / duration, 3) if duration > 0 else None,
    }
    return TraceSchedule(due, stages, info, recorded.payload_index, window_s)
