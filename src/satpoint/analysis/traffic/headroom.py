"""``find --trace``: the headroom factor, as pure functions of the replays measured so far.

The rate search (``analysis.search.steps``) is reused as it is, over the speed factor X instead of a rate:
each "stage" of the search is a whole replay of the trace (or its ``--trace-window``/``--trace-peak``
slice) at speed X, and a replay counts as stable when every one of its stages (a minute of trace each,
judged against the trace's own rate in that minute) is stable (``replay_verdict``).  Staircase from the
start speed by ``growth``, geometric bisection between the highest stable and the lowest unstable speed
to ``precision``, retest of a contradicted replay, and a confirmation: the answer is replayed once more
(``confirm_margin`` 0: at X itself) and, if that replay is not stable, it becomes the lowest unstable
speed and the bisection goes on below it.  Every replay starts from idle (``fresh``).

The headroom X says: one replica sustains this traffic played X times as fast.  Its busiest minute then
arrives at ``X x peak_rps_per_minute``: that is the per-replica capacity *for this traffic's shape*
(``capacity_rps``); at the autoscaling margin a replica is given ``capacity x (1 - margin)``, so the
trace's own peak (played as recorded) needs ``ceil(1 / (X x (1 - margin)))`` replicas
(``replicas_for_peak``): 1 when X is comfortably above 1, more when the recorded traffic is a fleet's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from satpoint.analysis.search.steps import LIMITED, Measured, SearchParams, Step, bracket, held_at, next_step
from satpoint.analysis.search.verdicts import Verdict
from satpoint.plan import FloatArray

#: the search's phase for the replays at 50 and 80 % of the answer (after the search, not part of it)
PROFILE_FRACTIONS = (0.5, 0.8)
#: more replays than this and the search stops (a guard: the bracket converges long before)
MAX_REPLAYS = 40


def search_params(
    precision: float = 0.05,
    growth: float = 2.0,
    start_speed: float = 1.0,
    max_speed: float = 1000.0,
    confirm: bool = True,
) -> SearchParams:
    """The rate search's parameters read as speeds (X): the confirmation replays the answer itself."""
    if not 0 < precision < 1:
        raise ValueError(f"--precision must be in (0, 1), got {precision}")
    if growth <= 1:
        raise ValueError(f"--growth must be > 1, got {growth}")
    if not 0 < start_speed <= max_speed:
        raise ValueError(f"--start-speed must be in (0, {max_speed:g}], got {start_speed}")
    return SearchParams(
        start_rps=start_speed,
        growth=growth,
        precision=precision,
        max_rps=max_speed,
        min_rps=min(0.01, start_speed),
        confirm_margin=0.0 if confirm else None,
    )


def replay_verdict(stage_verdicts: Sequence[str]) -> str:
    """One replay's verdict from its stages': stable when all are; else the first stage the server did not
    sustain (saturated, failing...: the replay failed whatever a later stage says); else, when a stage was
    generator/client-limited, that (the replay said nothing about the server); else the first other one."""
    if not stage_verdicts:
        return Verdict.INCOMPLETE.value
    failed = [v for v in stage_verdicts if v != Verdict.STABLE and v not in LIMITED and v != Verdict.INCOMPLETE]
    if failed:
        return failed[0]
    limited = [v for v in stage_verdicts if v in LIMITED]
    if limited:
        return limited[0]
    return next((v for v in stage_verdicts if v != Verdict.STABLE), Verdict.STABLE.value)


class TargetLost(Exception):
    """Raised by a search's ``measure``: the replay lost its target (the server stopped answering, crashed
    or was killed); ``measured`` is that replay (not stable).  The search ends there: every later replay
    would measure a dead server, and what held before the crash sizes nothing."""

    def __init__(self, measured: Measured, message: str = "") -> None:
        super().__init__(message or "the target stopped answering")
        self.measured = measured


@dataclass(frozen=True)
class SearchOutcome:
    history: list[Measured]
    #: "converged" (bracketed to the precision), "budget", "stopped", "limit" (the last speed was generator-
    #: or client-limited twice: the replays said nothing about the server), "max_speed" (stable up to
    #: ``max_speed``), "min_speed" (not stable even at the lowest speed), "max_replays", "target_lost" (a
    #: replay lost its target: the server crashed under it; a lower bound, and the command fails)
    ended: str
    speed: float | None  # the highest speed sustained (None: not even the lowest tried)
    bracket: tuple[float | None, float | None]
    #: a confirmation replay at ``speed`` ran and held
    confirmed: bool = False
    #: ``speed`` is a lower bound only (no faster replay failed, or the search ended on a limited one):
    #: nothing may take it for the headroom (no replicas, no per-replica target)
    lower_bound: bool = False


def search_speed(
    measure: Callable[[Step], Measured | None],
    params: SearchParams,
    fits: Callable[[Step], bool] = lambda _s: True,
) -> SearchOutcome:
    """Run the rate search over speeds: ``measure(step)`` replays at ``step.rate_rps`` (= X) and returns
    its ``Measured`` (None: interrupted); ``fits(step)`` says whether the budget still holds that replay."""
    history: list[Measured] = []
    ended = "converged"
    while True:
        step = next_step(history, params)
        if step is None:
            ended = _why_done(history, params)
            break
        if len(history) >= MAX_REPLAYS:
            ended = "max_replays"
            break
        if not fits(step):
            ended = "budget"
            break
        try:
            m = measure(step)
        except TargetLost as lost:
            history.append(lost.measured)
            ended = "target_lost"
            break
        if m is None:
            ended = "stopped"
            break
        history.append(m)
    b = bracket(history, params.majority)
    x = b.stable_rps
    held = held_at(history, x, params.majority) if x is not None else None
    confirmed = held is not None and held.verdict == Verdict.STABLE
    lower = x is not None and (b.unstable_rps is None or ended in ("limit", "target_lost"))
    return SearchOutcome(history, ended, x, (x, b.unstable_rps), confirmed, lower)


def _why_done(history: list[Measured], params: SearchParams) -> str:
    """Why ``next_step`` ended the search: a speed limited twice, the highest or lowest speed allowed, or
    the bracket converged (and confirmed, when asked)."""
    if history and history[-1].verdict in LIMITED:
        return "limit"
    b = bracket(history, params.majority)
    if b.unstable_rps is None:
        return "max_speed"
    if b.stable_rps is None:
        return "min_speed"
    return "converged"


def trace_peaks(offsets_s: FloatArray) -> tuple[float, float]:
    """The busiest whole minute's mean rate and the busiest whole second's count of a slice's arrivals
    (seconds from its start, as recorded: speed 1).  A slice shorter than a minute: its mean rate."""
    if len(offsets_s) == 0:
        return 0.0, 0.0
    sec = np.floor(np.asarray(offsets_s, dtype=np.float64)).astype(np.int64)
    sec -= int(sec.min())
    per_s = np.bincount(sec)
    span = float(np.max(offsets_s) - np.min(offsets_s))
    if len(per_s) < 60:
        per_min = len(offsets_s) / max(span, 1.0)
    else:
        c = np.concatenate(([0], np.cumsum(per_s)))
        per_min = float((c[60:] - c[:-60]).max()) / 60.0
    return float(per_min), float(per_s.max())


def replicas_for_peak(speed: float, margin: float) -> int:
    """Replicas the trace's own peak needs when each replica is given ``speed x (1 - margin)`` of it."""
    if speed <= 0 or not 0 <= margin < 1:
        raise ValueError(f"speed must be > 0 and margin in [0, 1), got {speed}, {margin}")
    return max(1, math.ceil(1.0 / (speed * (1.0 - margin)) - 1e-9))


def latency_at(fraction: float, speed: float, stages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A replay's latency, for the profile at ``fraction`` of the headroom: the worst stage's (minute's)
    p50/p99/p99.9, its verdict, the trace rate offered per second in that stage."""
    verdict = replay_verdict([s["verdict"] for s in stages])
    worst = max(stages, key=lambda s: s["latency_ms"].get("p99") or 0.0) if stages else None
    lat = worst["latency_ms"] if worst else {}
    return {
        "fraction": fraction,
        "speed": round(speed, 4),
        "verdict": verdict,
        "worst_stage": worst["index"] if worst else None,
        "offered_rps": worst["offered_rps"] if worst else None,
        "p50_ms": lat.get("p50"),
        "p99_ms": lat.get("p99"),
        "p999_ms": lat.get("p999"),
    }


def profile_failure(latency: Sequence[dict[str, Any]], margin: float) -> str | None:
    """Why no replica may be sized from X: a profile replay at or below the per-replica target (a fraction of
    X at most ``1 - margin``) that was not stable (an interrupted one, ``incomplete``, says nothing); None:
    none failed."""
    for row in latency:
        frac, verdict = row.get("fraction"), row.get("verdict")
        if frac is None or frac > 1 - margin + 1e-9 or verdict in (Verdict.STABLE, Verdict.INCOMPLETE):
            continue
        return (
            f"the replay at {frac:.0%} of X (speed {row.get('speed')}, at or below the per-replica target) was "
            f"{verdict}: a replica was not shown to sustain the traffic it would be given"
        )
    return None


def headroom_block(
    outcome: SearchOutcome,
    params: SearchParams,
    peak_min: float,
    peak_s: float,
    margin: float,
    replays: list[dict[str, Any]],
    latency: list[dict[str, Any]],
) -> dict[str, Any]:
    """``summary.json``'s ``trace_headroom`` block.  Nothing is sized (no capacity, per-replica target or
    replica count: ``sizing_withheld`` says why) from a lower bound, nor when a profile replay at or below
    the per-replica target (``1 - margin`` of X) was not sustained: the trace played slower than a replica
    is to be given failed there."""
    x = outcome.speed
    lo, hi = outcome.bracket
    withheld = profile_failure(latency, margin)
    sized = None if outcome.lower_bound or withheld else x  # a lower bound sizes nothing
    return {
        "speed": None if x is None else round(x, 4),
        "bracket": [None if lo is None else round(lo, 4), None if hi is None else round(hi, 4)],
        "precision": params.precision,
        "ended": outcome.ended,
        "lower_bound": outcome.lower_bound,
        "confirmed": outcome.confirmed,
        "trace_peak_rps_per_minute": round(peak_min, 3),
        "trace_peak_rps_per_second": peak_s,
        "capacity_rps": None if sized is None else round(sized * peak_min, 3),
        "margin": margin,
        "target_rps_per_replica": None if sized is None else round(sized * peak_min * (1 - margin), 3),
        "replicas_for_peak": None if sized is None else replicas_for_peak(sized, margin),
        "sizing_withheld": withheld if x is not None and not outcome.lower_bound else None,
        "replays": replays,
        "latency_at": latency,
    }
