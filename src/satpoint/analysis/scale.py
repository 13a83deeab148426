"""``satpoint scale-test``'s figures, from the recorded rows and the replica readings (pure functions, no I/O).

Every latency is from the intended send time.  A request that did not answer OK (an error, a timeout, never
sent, unfinished at the end) counts as over the objective: its latency is taken as infinite, so a server that
crashes, refuses or falls behind is never "fine".  Time is the run clock (seconds from the load's start); the
step is where the base rate ends; the peak lasts from the step to ``down_s`` (ramp and hold); then the load is
back at the base rate until ``end_s``.

A second (of due times) is over the objective when its percentile (``--slo p99<200ms``: the 99th, taken as the
higher of the two neighbouring ranks, never interpolated) is above the limit.  The time to recover is from the
step to the end of the last second over the objective in the peak; when the peak's last second is still over,
the server did not recover (``None``).  Replica times are from the step to the first reading at or past each
count, placed in the middle between the reading that first shows it and the one before (readings once a second:
within half a second, plus the source's own lag, e.g. Prometheus' scrape interval).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ScalePhases:
    """Where the load shape's phases sit on the run clock, and its rates."""

    step_s: float
    down_s: float
    end_s: float
    from_rps: float
    to_rps: float
    ramp_s: float


@dataclass(frozen=True)
class ReplicaPoint:
    """One replica reading on the run clock (None: the source gave none, ``error`` says why)."""

    t_s: float
    ready: float | None
    desired: float | None
    error: str | None = None


def _quantile_of(metric: str) -> float:
    return float(metric.removeprefix("p")) / 100.0


def request_latency(intended: F64, done: F64, ok: npt.NDArray[np.bool_]) -> F64:
    """Latency from the intended send time; infinite for every request that did not answer OK."""
    lat = np.where(ok, done - intended, np.inf)
    return np.where(np.isnan(lat), np.inf, lat)


def timeline(
    intended: F64, latency_s: F64, metric: str, limit_s: float, end_s: float, points: Sequence[ReplicaPoint]
) -> list[dict[str, Any]]:
    """One row per second of due times: offered, answered OK, failed, p50 and the objective's percentile (ms;
    None when every request of the second failed), over the objective or not, and the last replica reading."""
    q = _quantile_of(metric)
    bins = np.floor(intended).astype(np.int64)
    n_bins = max(math.ceil(end_s), int(bins.max()) + 1 if len(bins) else 0)
    order = np.argsort(bins, kind="stable")
    edges = np.searchsorted(bins[order], np.arange(n_bins + 1))
    rows: list[dict[str, Any]] = []
    k = 0
    last: ReplicaPoint | None = None
    for i in range(n_bins):
        lat = latency_s[order[edges[i] : edges[i + 1]]]
        while k < len(points) and points[k].t_s < i + 1:
            if points[k].ready is not None:
                last = points[k]
            k += 1
        failed = int(np.count_nonzero(np.isinf(lat)))
        pq = float(np.quantile(lat, q, method="higher")) if len(lat) else math.inf
        p50 = float(np.quantile(lat, 0.5, method="higher")) if len(lat) else math.inf
        rows.append(
            {
                "t_s": i,
                "offered": len(lat),
                "ok": len(lat) - failed,
                "failed": failed,
                "p50_ms": round(p50 * 1e3, 3) if math.isfinite(p50) else None,
                f"{metric}_ms": round(pq * 1e3, 3) if math.isfinite(pq) else None,
                "over": bool(pq > limit_s),
                "ready": None if last is None else last.ready,
                "desired": None if last is None else last.desired,
            }
        )
    return rows


#: readings further apart than this (failed reads between them) place a change at the later one, not mid-way
_GAP_S = 2.5


def _seen(points: Sequence[ReplicaPoint], i: int) -> float:
    """When the change first seen by reading ``i`` happened: the middle between the reading before it and it (the
    later one when they are more than ``_GAP_S`` apart: an upper bound rather than a guess)."""
    if i == 0 or points[i].t_s - points[i - 1].t_s > _GAP_S:
        return points[i].t_s
    return (points[i - 1].t_s + points[i].t_s) / 2


def _first_at(points: Sequence[ReplicaPoint], since_s: float, key: str, at_least: float) -> float | None:
    for i, p in enumerate(points):
        v = getattr(p, key)
        if p.t_s >= since_s and v is not None and v >= at_least:
            return max(since_s, _seen(points, i))
    return None


def _before(points: Sequence[ReplicaPoint], t_s: float, key: str) -> float | None:
    vals = [getattr(p, key) for p in points if p.t_s < t_s and getattr(p, key) is not None]
    return vals[-1] if vals else None


def replica_events(points: Sequence[ReplicaPoint], step_s: float) -> list[dict[str, Any]]:
    """Every change of the ready or desired count, with its time on the run clock and since the step."""
    out: list[dict[str, Any]] = []
    prev: dict[str, float | None] = {"ready": None, "desired": None}
    for i, p in enumerate(points):
        for key in ("desired", "ready"):
            v = getattr(p, key)
            if v is None:
                continue
            if prev[key] is not None and v != prev[key]:
                t = _seen(points, i)
                out.append(
                    {"kind": key, "t_s": round(t, 3), "since_step_s": round(t - step_s, 3), "from": prev[key],
                     "to": v, "seen_s": round(p.t_s, 3)}
                )  # fmt: skip
            prev[key] = v
    return out


def _direction_changes(points: Sequence[ReplicaPoint]) -> int:
    """How often the ready count turned (up then down, or down then up): flapping."""
    values = [p.ready for p in points if p.ready is not None]
    signs = [np.sign(b - a) for a, b in itertools.pairwise(values) if b != a]
    return sum(1 for a, b in itertools.pairwise(signs) if a != b)


def scale_block(
    intended: F64,
    latency_s: F64,
    phases: ScalePhases,
    metric: str,
    limit_ms: float,
    points: Sequence[ReplicaPoint],
    *,
    source: str,
    capacity_rps: float | None = None,
) -> dict[str, Any]:
    """``summary.json``'s ``scale`` block (see the module's doc for every rule)."""
    limit_s = limit_ms / 1e3
    rows = timeline(intended, latency_s, metric, limit_s, phases.end_s, points)
    step, down = phases.step_s, phases.down_s
    peak_rows = [r for r in rows if step <= r["t_s"] and r["t_s"] + 1 <= down + 1e-9]
    down_rows = [r for r in rows if r["t_s"] >= down]
    over_peak = [r for r in peak_rows if r["over"]]
    notes: list[str] = []
    recovered: bool | None
    if not peak_rows or sum(r["offered"] for r in peak_rows) == 0:
        ttr, recovered = None, None
        notes.append("the peak was not measured (the run ended before it)")
    elif not over_peak:
        ttr, recovered = 0.0, True
    elif over_peak[-1] is peak_rows[-1]:
        ttr, recovered = None, False
        notes.append("still over the objective at the end of the peak: not recovered")
    else:
        ttr, recovered = round(over_peak[-1]["t_s"] + 1 - step, 3), True
    if peak_rows and all(r["ok"] == 0 for r in peak_rows):
        recovered = False
        notes.append("no request of the peak was answered OK")
    good = [p for p in points if p.ready is not None]
    ready_before = _before(good, step, "ready")
    desired_before = _before(good, step, "desired")
    peak_ready = max((p.ready for p in good if step <= p.t_s <= down and p.ready is not None), default=None)
    scaled = ready_before is not None and peak_ready is not None and peak_ready > ready_before
    replica_ready_s: list[float] = []
    if scaled and ready_before is not None and peak_ready is not None:
        for k in range(math.floor(ready_before) + 1, math.floor(peak_ready) + 1):
            t = _first_at(good, step, "ready", k)
            if t is not None:
                replica_ready_s.append(round(t - step, 3))
    else:
        notes.append("the replica count never rose during the peak: the server did not scale")
    t_desired = None
    if desired_before is not None:
        t_desired = _first_at(good, step, "desired", desired_before + 1)
    t_down = next(
        (max(down, _seen(good, i)) for i, p in enumerate(good)
         if p.t_s >= down and p.ready is not None and p.ready <= (ready_before or 0)),
        None,
    )  # fmt: skip
    over_base = sum(1 for r in rows if r["over"] and r["t_s"] + 1 <= step + 1e-9)
    if over_base:
        notes.append(f"{over_base} s over the objective already at the base rate, before the step")
    base_changes = [e for e in replica_events(good, step) if e["t_s"] < step]
    if base_changes:
        notes.append(f"the replica count changed {len(base_changes)} times before the step: not stable at the base")
    read_errors = [p for p in points if p.ready is None]
    block: dict[str, Any] = {
        "source": source,
        "slo": {"metric": metric, "limit_ms": limit_ms},
        "from_rps": phases.from_rps,
        "to_rps": phases.to_rps,
        "ramp_s": phases.ramp_s,
        "step_s": round(step, 3),
        "down_s": round(down, 3),
        "end_s": round(phases.end_s, 3),
        "replicas_before": ready_before,
        "replicas_peak": peak_ready,
        "scaled": scaled,
        "time_to_desired_s": None if t_desired is None else round(t_desired - step, 3),
        "time_to_replicas_s": replica_ready_s[-1] if replica_ready_s else None,
        "replica_ready_s": replica_ready_s,
        "time_to_recover_s": ttr,
        "recovered": recovered,
        "seconds_over_slo": sum(1 for r in rows if r["over"]),
        "seconds_over_slo_peak": len(over_peak),
        "requests_over_slo": int(np.count_nonzero(latency_s > limit_s)),
        "requests_failed": int(np.count_nonzero(np.isinf(latency_s))),
        "requests": len(latency_s),
        "scale_down": {
            "time_to_scale_down_s": None if t_down is None else round(t_down - down, 3),
            "seconds_over_slo": sum(1 for r in down_rows if r["over"]),
            "requests_failed": sum(r["failed"] for r in down_rows),
        },
        "direction_changes": _direction_changes(good),
        "replica_read_errors": len(read_errors),
        "events": replica_events(good, step),
        "timeline": rows,
        "notes": notes,
    }
    if read_errors:
        block["notes"].append(f"{len(read_errors)} replica readings failed: {read_errors[0].error}")
    if capacity_rps is not None:
        block["margin"] = margin_check(phases, capacity_rps, block["time_to_replicas_s"], ready_before)
    return block


def margin_check(
    phases: ScalePhases, capacity_rps: float, delay_s: float | None, replicas_before: float | None
) -> dict[str, Any]:
    """The margin under saturation the policy needs, ``m >= r x d / S`` (ramp ``r`` rps/s, delay ``d``, one
    replica's saturation ``S``; a step counts as the whole rise within the delay), against the one in use at the
    base: ``1 - from_rps / (replicas x S)``.  Without a measured delay (the server never scaled) no verdict."""
    rise = phases.to_rps - phases.from_rps
    out: dict[str, Any] = {"capacity_rps": capacity_rps, "delay_s": delay_s, "enough": None}
    if delay_s is None or not replicas_before:
        out["why"] = "no measured delay: the replica count never rose"
        return out
    rate = rise / phases.ramp_s if phases.ramp_s > 0 else math.inf
    grown = min(rise, rate * delay_s)  # what the load rose by before the replicas served
    needed = grown / (replicas_before * capacity_rps)
    in_use = 1.0 - phases.from_rps / (replicas_before * capacity_rps)
    out.update(
        {"ramp_rps_per_s": None if math.isinf(rate) else round(rate, 3), "needed": round(needed, 4),
         "in_use": round(in_use, 4), "enough": bool(in_use >= needed)}
    )  # fmt: skip
    return out
