"""``find --hysteresis``: how a server behaves once tipped over, and where it recovers.

After the search (and its profile), one segment (purpose ``hysteresis``) holds ``OVERLOAD_FACTOR`` x the
saturation point S, ramped from idle and held as a search stage (long enough to tip a queue), then
steps the load DOWN with no ramp and no pause between steps (the server's state carries across them: a
drain or cool-down would reset it), each step ``STEP_RATIO`` of the previous one, down to
``FLOOR_FRACTION`` x S.  Geometric steps keep the same 5 % resolution at every rate, so a recovery point
at 40 % of S is located as finely as one at 95 %.

Each step is classified from the recorded rows (and, when the server was watched, its CPU per
request): ``overloaded`` (the queue of outstanding requests grows, or latency stays high without the
queue draining), ``draining`` (requests are answered faster than they come: the offered rate is below
what the server can do in its current state) or ``recovered`` (latency in the step's last half back
near what a stable stage at a similar rate had, and CPU per request too when observed).  A server
without metastability drains from the first step under its capacity (``recovery_rps`` just under S,
``goodput_share`` about 1); a metastable one completes fewer requests while overloaded and drains only
at a lower rate.  When that rate is below the per-replica target, the recommendation is lowered to it
(an autoscaler that lets a replica tip over will not get it back at the margin it was sized with).

Everything here is a pure function of the results folder: ``satpoint analyze`` and ``report`` recompute it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from satpoint.analysis.search.capacity import recommend
from satpoint.analysis.search.holds import stage_hold
from satpoint.config import FindOptions
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import Results, Segment
from satpoint.plan import Stage, StageSpan

HYSTERESIS_PURPOSE = "hysteresis"
#: the overload step holds this multiple of the saturation point (far enough above it to tip a queue
#: even when the search's answer is a few percent under the server's capacity)
OVERLOAD_FACTOR = 1.2
#: each step down offers this fraction of the previous step's rate ...
STEP_RATIO = 0.95
#: ... down to this fraction of the saturation point
FLOOR_FRACTION = 0.30
#: a step holds about this long, or what this many requests need at its rate when longer ...
STEP_MIN_S = 5.0
STEP_REQUESTS = 500
#: ... all the steps together at most this long (the holds shrink to fit, never under ``STEP_FLOOR_S``)
STEPS_MAX_S = 100.0
STEP_FLOOR_S = 3.0
#: a slow server's step holds at least this many of its probe latencies
STEP_LATENCIES = 3.0
#: the queue grows (or drains) when its slope exceeds this fraction of the offered rate (as the search's
#: saturation rule), at least ``MIN_SLOPE_RPS``
SLOPE_FRACTION = 0.01
MIN_SLOPE_RPS = 0.5
#: recovered: p50 within max(LATENCY_FACTOR x reference, reference + LATENCY_SLACK_MS) ...
LATENCY_FACTOR = 2.0
LATENCY_SLACK_MS = 5.0
#: ... and CPU per request within this factor of the reference's, when both were observed
CPU_FACTOR = 1.2
#: below these shares of S, the server is called metastable (a margin's worth of its capacity lost)
METASTABLE_SHARE = 0.85


# -- the plan ---------------------------------------------------------------------------------------


def step_rates(saturation_rps: float) -> list[float]:
    """The step-down rates: S x STEP_RATIO^k, k = 1, 2, ..., while at least FLOOR_FRACTION x S."""
    out, frac = [], STEP_RATIO
    while frac >= FLOOR_FRACTION - 1e-9:
        out.append(saturation_rps * frac)
        frac *= STEP_RATIO
    return out


def hysteresis_stages(opts: FindOptions, saturation_rps: float, latency_s: float | None = None) -> list[Stage]:
    """The sequence: ``OVERLOAD_FACTOR`` x S ramped from idle and held as a search stage, then the steps
    down (``ramp_s`` 0), each held about max(``STEP_MIN_S``, what ``STEP_REQUESTS`` need), together at
    most ``STEPS_MAX_S`` (each at least ``STEP_FLOOR_S`` and ``STEP_LATENCIES`` probe latencies)."""
    over = saturation_rps * OVERLOAD_FACTOR
    rates = step_rates(saturation_rps)
    floor = max(STEP_FLOOR_S, STEP_LATENCIES * (latency_s or 0.0))
    holds = [max(STEP_MIN_S, STEP_REQUESTS / r, floor) for r in rates]
    total = sum(holds)
    if total > STEPS_MAX_S:
        holds = [max(floor, h * STEPS_MAX_S / total) for h in holds]
    first = Stage(over, opts.ramp_s, stage_hold(opts, over, latency_s))
    return [first, *(Stage(r, 0.0, round(h, 2)) for r, h in zip(rates, holds, strict=True))]


# -- the figures ------------------------------------------------------------------------------------


def _answered_times(rec: Records) -> np.ndarray[Any, np.dtype[np.float64]]:
    """When requests got an answer (any outcome but a timeout: the generator giving up is not the server
    answering), sorted."""
    keep = rec.finished_mask() & (rec.outcome != Outcome.TIMEOUT)
    return np.sort(rec.done[keep])


def _queue_slope(rec: Records, answered: np.ndarray[Any, np.dtype[np.float64]], t0: float, t1: float) -> float:
    """Least-squares slope of the outstanding count (due minus answered) over [t0, t1], per second."""
    ts = np.linspace(t0, t1, 24)
    q = (np.searchsorted(rec.intended, ts, side="right") - np.searchsorted(answered, ts, side="right")).astype(float)
    tc = ts - ts.mean()
    return float(np.dot(tc, q - q.mean()) / np.dot(tc, tc)) if t1 > t0 else 0.0


def _ok_rate(rec: Records, t0: float, t1: float) -> float:
    if t1 <= t0:
        return 0.0
    done = rec.done[rec.ok_mask()]
    return float(np.count_nonzero((done >= t0) & (done < t1))) / (t1 - t0)


def _p50_ms(rec: Records, t0: float, t1: float) -> float | None:
    lo, hi = np.searchsorted(rec.intended, [t0, t1], side="left")
    part = rec.select(slice(int(lo), int(hi)))
    lat = part.latency_s()[part.latency_mask()]
    lat = lat[~np.isnan(lat)]
    return round(float(np.median(lat)) * 1000, 4) if len(lat) else None


def _reference(docs: list[dict[str, Any]], rate: float, key: str) -> float | None:
    """The figure ``key`` (``p50`` latency or ``cpu``) of the stable stage (not of the hysteresis
    sequence) whose target is nearest ``rate``: what the server does at that load when not tipped over."""
    best: tuple[float, float] | None = None
    for d in docs:
        if d.get("verdict") != "stable":
            continue
        if key == "p50":
            v = (d.get("latency_ms") or {}).get("p50")
        else:
            v = (d.get("server") or {}).get("cpu_us_per_request")
        if not isinstance(v, (int, float)):
            continue
        dist = abs(math.log(max(float(d["target_rps"]), 1e-9) / max(rate, 1e-9)))
        if best is None or dist < best[0]:
            best = (dist, float(v))
    return best[1] if best else None


def classify(
    offered_rps: float,
    slope_rps: float,
    p50_ms: float | None,
    ref_p50_ms: float | None,
    cpu_us: float | None,
    ref_cpu_us: float | None,
) -> tuple[str, str]:
    """A step's state (``overloaded``, ``draining``, ``recovered``) and why, in words."""
    thr = max(SLOPE_FRACTION * offered_rps, MIN_SLOPE_RPS)
    if slope_rps > thr:
        return "overloaded", f"the queue grows by {slope_rps:.1f} requests/s"
    lat_ok = ref_p50_ms is None or (
        p50_ms is not None and p50_ms <= max(LATENCY_FACTOR * ref_p50_ms, ref_p50_ms + LATENCY_SLACK_MS)
    )
    cpu_ok = cpu_us is None or ref_cpu_us is None or cpu_us <= CPU_FACTOR * ref_cpu_us
    p50 = "-" if p50_ms is None else f"{p50_ms:.1f} ms"
    ref = "" if ref_p50_ms is None else f" (stable at this load: {ref_p50_ms:.1f} ms)"
    if lat_ok and cpu_ok and (ref_p50_ms is not None or abs(slope_rps) <= thr):
        return "recovered", f"p50 {p50}{ref}, the queue steady"
    if slope_rps < -thr:
        return "draining", f"the queue shrinks by {-slope_rps:.1f} requests/s; p50 {p50}{ref}"
    if lat_ok:  # latency back, the queue steady, but the server still spends more CPU per request
        return "draining", f"p50 {p50}{ref}, but CPU per request {cpu_us:.0f} µs against {ref_cpu_us:.0f} µs"
    return "overloaded", f"the queue does not drain and p50 stays at {p50}{ref}"


def _step(
    seg: Segment,
    sp: StageSpan,
    answered: np.ndarray[Any, np.dtype[np.float64]],
    docs: list[dict[str, Any]],
    saturation_rps: float,
) -> dict[str, Any]:
    rec, t0, t1 = seg.records, sp.hold_start_s, sp.end_s
    mid = 0.5 * (t0 + t1)
    lo, hi = np.searchsorted(rec.intended, [t0, t1], side="left")
    offered = float(hi - lo) / (t1 - t0)
    slope = _queue_slope(rec, answered, t0, t1)
    p50 = _p50_ms(rec, mid, t1)
    mine = next((d for d in docs if d.get("segment") == seg.index and d.get("index") == sp.index), {})
    cpu = (mine.get("server") or {}).get("cpu_us_per_request")
    others = [d for d in docs if d.get("segment") != seg.index]
    rate = sp.stage.target_rps
    ref_p50, ref_cpu = _reference(others, rate, "p50"), _reference(others, rate, "cpu")
    state, why = classify(offered, slope, p50, ref_p50, cpu, ref_cpu)
    return {
        "index": sp.index,
        "role": "overload" if sp.index == 0 else "step_down",
        "fraction": round(rate / saturation_rps, 4),
        "rate_rps": round(rate, 3),
        "hold_s": round(t1 - t0, 3),
        "offered_rps": round(offered, 3),
        "throughput_rps": round(_ok_rate(rec, t0, t1), 3),
        "throughput_last_half_rps": round(_ok_rate(rec, mid, t1), 3),
        "latency_p50_ms": p50,
        "reference_p50_ms": ref_p50,
        "queue_slope_rps": round(slope, 3),
        "cpu_us_per_request": cpu,
        "reference_cpu_us_per_request": ref_cpu,
        "state": state,
        "why": why,
    }


def hysteresis_block(
    results: Results, stage_docs: list[dict[str, Any]], saturation_rps: float | None
) -> dict[str, Any] | None:
    """summary.json's ``hysteresis`` block, from the last hysteresis segment (None: none was measured)."""
    seg = next((s for s in reversed(results.segments) if s.purpose == HYSTERESIS_PURPOSE), None)
    if seg is None or not seg.stages:
        return None
    sat = saturation_rps or seg.stages[0].target_rps / OVERLOAD_FACTOR
    last = float(seg.records.intended[-1]) if len(seg.records) else 0.0
    # a step the run was cut short in (or never reached) is left out: its rows do not describe it
    measured = [sp for sp in seg.spans if not (seg.stopped and sp.end_s > last + 1e-6)]
    answered = _answered_times(seg.records)
    steps = [_step(seg, sp, answered, stage_docs, sat) for sp in measured]
    complete = len(measured) == len(seg.stages)
    over = steps[0] if steps else None
    down = [s for s in steps if s["role"] == "step_down"]
    recovery = next((s for s in down if s["state"] != "overloaded"), None)
    recovered = next((s for s in down if s["state"] == "recovered"), None)
    tp = over["throughput_last_half_rps"] if over else None
    overloaded = over is not None and over["state"] == "overloaded"
    block: dict[str, Any] = {
        "segment": seg.index,
        "saturation_rps": round(sat, 3),
        "complete": complete,
        "overloaded": overloaded,
        "collapse_rps": over["rate_rps"] if over else None,
        "overload_throughput_rps": tp,
        "goodput_share": round(tp / sat, 4) if tp is not None else None,
        "recovery_rps": recovery["rate_rps"] if recovery else None,
        "recovery_share": round(recovery["rate_rps"] / sat, 4) if recovery else None,
        "recovered_rps": recovered["rate_rps"] if recovered else None,
        "lowest_step_rps": down[-1]["rate_rps"] if down else None,
        "overload_cpu_us_per_request": over["cpu_us_per_request"] if over else None,
        "reference_cpu_us_per_request": _reference(
            [d for d in stage_docs if d.get("segment") != seg.index], sat, "cpu"
        ),
        "metastable": None,
        "steps": steps,
    }
    if overloaded and (recovery is not None or complete):
        share = block["recovery_share"]
        block["metastable"] = bool(
            (block["goodput_share"] or 0.0) < METASTABLE_SHARE or share is None or share < METASTABLE_SHARE
        )
    block["explanation"] = explain(block)
    return block


def explain(b: dict[str, Any]) -> str:
    """The block in plain words."""
    sat, over = b["saturation_rps"], b["collapse_rps"]
    if over is None:
        return "the hysteresis sequence was not measured (interrupted before its first step)"
    if not b["overloaded"]:
        return (
            f"the overload step at {over:.1f} rps ({over / sat:.0%} of the saturation point {sat:.1f} rps) built no "
            "queue: the server kept up, so how it behaves once tipped over was not seen (its capacity is above "
            "the search's answer)"
        )
    tp, share = b["overload_throughput_rps"], b["goodput_share"]
    out = [f"tipped over at {over:.1f} rps ({over / sat:.0%} of the saturation point {sat:.1f} rps), the server "]
    if share >= METASTABLE_SHARE:
        out.append(f"kept completing {tp:.1f} requests/s ({share:.0%} of the saturation point): no goodput collapse")
    else:
        out.append(f"completed only {tp:.1f} requests/s: its goodput collapsed to {share:.0%} of the saturation point")
    cpu, ref = b.get("overload_cpu_us_per_request"), b.get("reference_cpu_us_per_request")
    if cpu is not None and ref:
        out.append(f", spending {cpu:.0f} µs of CPU per request against {ref:.0f} µs when stable near capacity")
    out.append(". ")
    rec = b["recovery_rps"]
    if rec is None:
        low = b["lowest_step_rps"]
        lowest = f" (the lowest step, {low:.1f} rps, {low / sat:.0%})" if low else ""
        cut = "" if b["complete"] else " measured before the run was cut short"
        out.append(
            f"Stepping the load down, it stayed overloaded at every step{cut}{lowest}: it recovers only below that"
        )
    else:
        out.append(
            f"Stepping the load down, it first drained its queue at {rec:.1f} rps ({rec / sat:.0%} of the saturation "
            "point)"
        )
        if b["metastable"]:
            out.append(
                ": a metastable overload. Once tipped over it stays slow while the load persists, and it needs the "
                "load well below its capacity to recover"
            )
        else:
            out.append(": the first step under its capacity, as a server without metastability does")
    if b["recovered_rps"] is not None:
        out.append(f"; latency was back to its stable level from {b['recovered_rps']:.1f} rps")
    return "".join(out) + "."


# -- the recommendation -----------------------------------------------------------------------------


def lower_recommendation(
    rec: dict[str, Any] | None, block: dict[str, Any] | None, peak_rps: float | None, min_rps: float | None
) -> dict[str, Any] | None:
    """The recommendation, lowered when the server recovers from an overload only below its per-replica
    target: the target becomes recovery_rps x (1 - margin) (the lowest step's rate when it never drained,
    an upper bound), replicas recomputed from it; the original figures stay under ``*_unlowered``."""
    if rec is None:
        return None
    out = {
        **rec,
        "target_rps_per_replica_unlowered": None,
        "replicas_unlowered": None,
        "min_replicas_unlowered": None,
        "lowered_by": None,
        "lowered_note": None,
    }
    if block is None or not block["overloaded"]:
        return out
    limit = block["recovery_rps"]
    if limit is None:
        if not block["complete"] or block["lowest_step_rps"] is None:
            return out  # cut short: where it would have drained is unknown
        limit = block["lowest_step_rps"]
    if limit >= rec["target_rps_per_replica"]:
        return out
    margin = float(rec["margin"])
    low = recommend(limit, margin, peak_rps, min_rps)
    how = "drained its queue" if block["recovery_rps"] is not None else "had not drained its queue even"
    out.update(
        target_rps_per_replica=low.target_rps_per_replica,
        replicas=low.replicas,
        min_replicas=low.min_replicas,
        target_rps_per_replica_unlowered=rec["target_rps_per_replica"],
        replicas_unlowered=rec["replicas"],
        min_replicas_unlowered=rec["min_replicas"],
        lowered_by="hysteresis",
        lowered_note=(
            f"once tipped over, the server {how} at {limit:.1f} rps, below the per-replica target "
            f"{rec['target_rps_per_replica']:.1f} rps: the target is lowered to {low.target_rps_per_replica:.1f} rps "
            f"({margin:.0%} under that rate), since an autoscaler that lets a replica tip over will not get it "
            "back at the margin it was sized with"
        ),
    )
    return out


def hysteresis_fields(results: Results, summary: dict[str, Any]) -> dict[str, Any]:
    """``hysteresis`` (None without the sequence) and the recommendation, lowered when it must be."""
    f = results.header.get("config", {}).get("find", {}) or {}
    block = hysteresis_block(results, summary.get("stages") or [], summary.get("saturation_rps"))
    rec = lower_recommendation(summary.get("recommendation"), block, f.get("peak_rps"), f.get("min_rps"))
    notes = list(summary.get("find_notes") or [])
    if rec is not None and rec.get("lowered_note"):
        notes.append(rec["lowered_note"])
    if f.get("hysteresis") and block is None and summary.get("lower_bound"):
        notes.append("no hysteresis sequence: the saturation point is a lower bound, not a capacity to overload from")
    elif f.get("hysteresis") and block is None and summary.get("saturation_rps") is not None:
        notes.append("the hysteresis sequence was not measured (budget or interruption): raise --budget-s")
    return {"hysteresis": block, "recommendation": rec, "find_notes": notes}
