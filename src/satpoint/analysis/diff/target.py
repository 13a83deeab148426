"""``find --baseline DIR``: does the new version still hold the baseline's per-replica autoscaling target?

The baseline's ``summary.json`` says at what rate the deployment is scaled today
(``recommendation.target_rps_per_replica``).  After its search, ``find --baseline`` holds that rate alone,
from idle (a cool-down until the server answers at low-load speed, a ramp from zero, a hold as long as the
search's confirmation), as one more segment of its folder (purpose ``TARGET_HOLD_PURPOSE``; the search
ignores it).  Its stage verdict is the answer: ``stable`` (within the ``--slo``, when one is given: a stage
over it is ``slo_violated``) holds the target; anything else does not.  One measurement, and a crisp one:
the question is not "by how much did capacity move" but "does today's scaling still work".

``run --baseline DIR`` does the same after the run's stages (the hold: the plan's first ramp and its longest
hold), with the target of a ``find`` baseline, or of a ``run`` baseline that held one itself (carried forward).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from satpoint.analysis.server.machine_busy import busy_segments
from satpoint.analysis.server.machine_speed import speed_changed, speed_ratio

#: the segment purpose of the hold at the baseline's target
TARGET_HOLD_PURPOSE = "baseline_target"


class TargetHold(BaseModel):
    """``diff.json`` ``target_hold``: the hold at the baseline's per-replica target and its verdict."""

    model_config = ConfigDict(frozen=True, extra="allow")
    rate_rps: float  # the rate held (the baseline's target_rps_per_replica)
    held: bool | None  # True: stable (and within the SLO); False: not; None: not judged (interrupted)
    verdict: str  # the stage's verdict: stable, saturated, slo_violated, failing, ..., incomplete
    p50_ms: float | None = None
    p99_ms: float | None = None
    throughput_rps: float | None = None
    error_rate: float | None = None
    slo: dict[str, Any] | None = None  # the new find's --slo as its summary.json has it: {"p99": "50ms"}
    base_target_rps: float | None = None  # the base folder's target, when it has one
    text: str
    #: why a hold that failed was not judged: the machine was busy during it, or slower than the base's (its
    #: verdict is then the machine's as much as the version's; the gate does not pass on it: exit 1)
    busy: str | None = None


def baseline_target(summary: Mapping[str, Any], purposes: Mapping[int, str] | None = None) -> tuple[float | None, str]:
    """The per-replica target in a baseline's ``summary.json`` and, when there is none, why (an older
    layout without ``recommendation.target_rps_per_replica``, a ``run`` folder, a search without answer).

    A ``run`` folder has one when it held a target itself (``run --baseline`` against a folder that had one:
    a stage of purpose ``TARGET_HOLD_PURPOSE`` in ``purposes``, its segments' purposes): the target is carried
    forward, so a CI job that keeps its last ``run`` as the baseline keeps holding the same target."""
    rec = summary.get("recommendation")
    target = rec.get("target_rps_per_replica") if isinstance(rec, Mapping) else None
    if isinstance(target, int | float) and target > 0:
        return float(target), ""
    held = held_target(summary, purposes or {})
    if summary.get("kind") == "run" and held is not None:
        return held, ""
    if summary.get("kind") == "run":
        return None, (
            "the baseline is a run folder that held no per-replica target (only a find's recommendation, or a run "
            "--baseline that held one, gives one): no target was held"
        )
    if summary.get("kind") not in (None, "find"):
        return None, f"the baseline is a {summary.get('kind')} folder: it has no per-replica target to hold"
    if isinstance(rec, Mapping) or (rec is None and "recommendation" in summary):
        return None, "the baseline's search found no saturation point: it has no per-replica target to hold"
    return None, (
        "the baseline's summary.json has no recommendation.target_rps_per_replica (an older layout): "
        "its per-replica target was not held"
    )


def held_target(summary: Mapping[str, Any], purposes: Mapping[int, str]) -> float | None:
    """The rate a folder's hold at a baseline's target ran at (None: it has no such hold)."""
    stage = _hold_stage(summary, purposes)
    return None if stage is None else float(stage["target_rps"])


def _hold_stage(summary: Mapping[str, Any], purposes: Mapping[int, str]) -> Mapping[str, Any] | None:
    return next(
        (st for st in summary.get("stages") or [] if purposes.get(int(st["segment"])) == TARGET_HOLD_PURPOSE),
        None,
    )


def _fmt(v: float | None, unit: str) -> str:
    return "-" if v is None else f"{v:.2f} {unit}" if unit == "ms" else f"{v:.1f} {unit}"


def judge_target_hold(
    new_summary: Mapping[str, Any],
    purposes: Mapping[int, str],
    base_summary: Mapping[str, Any] | None = None,
    base_purposes: Mapping[int, str] | None = None,
) -> TargetHold | None:
    """The hold at the baseline's target in a ``find`` or ``run`` folder (None: it has none), judged by its
    stage."""
    stage = _hold_stage(new_summary, purposes)
    if stage is None:
        return None
    rate = float(stage["target_rps"])
    verdict = str(stage.get("verdict") or "")
    held = None if verdict in ("incomplete", "") or stage.get("interrupted") else verdict == "stable"
    machine = _machine_why(stage, new_summary, base_summary, held) if verdict != "failing" else None
    if machine is not None:  # a hold the machine can explain: not judged
        held = None
    lat = stage.get("latency_ms") or {}
    slo = new_summary.get("slo") or None
    base_target = baseline_target(base_summary, base_purposes)[0] if base_summary is not None else None
    after = "the run's stages" if new_summary.get("kind") == "run" else "the search"
    answer = {True: "yes", False: f"no ({verdict})", None: f"not judged ({verdict or 'no verdict'})"}[held]
    answer += f": {machine}" if machine else ""
    slo_text = ", ".join(f"{k}<{v if isinstance(v, str) else f'{v:g}ms'}" for k, v in (slo or {}).items())
    within = f" (within the SLO {slo_text})" if slo_text and held else f" (SLO {slo_text})" if slo_text else ""
    text = (
        f"holds the baseline's target of {rate:.1f} rps: {answer}, p99 {_fmt(lat.get('p99'), 'ms')}{within}; "
        f"throughput {_fmt(stage.get('throughput_rps'), 'rps')}, p50 {_fmt(lat.get('p50'), 'ms')}, held alone from "
        f"idle after {after} (one measurement)"
    )
    if base_target is not None and abs(base_target - rate) > 1e-3 * max(rate, 1.0):
        text += f"; the base folder's own target is {base_target:.1f} rps"
    return TargetHold(
        rate_rps=round(rate, 3),
        held=held,
        verdict=verdict,
        p50_ms=lat.get("p50"),
        p99_ms=lat.get("p99"),
        throughput_rps=stage.get("throughput_rps"),
        error_rate=stage.get("error_rate"),
        slo=dict(slo) if slo else None,
        base_target_rps=base_target,
        text=text,
        busy=machine,
    )


def _machine_why(
    stage: Mapping[str, Any], new_summary: Mapping[str, Any], base_summary: Mapping[str, Any] | None, held: bool | None
) -> str | None:
    """Why the hold's verdict may be the machine's (None: it is the version's).  A hold lost while other work
    took a share of the machine (``machine_busy``) or on a machine slower than the base's; a hold kept on a
    machine faster than the base's (a slower version could hold there what it would not on the base's).  Not
    an error-rate failure: a server's errors are its own."""
    if held is None:
        return None
    other = busy_segments(new_summary).get(int(stage["segment"]))
    if held is False and other is not None:
        return f"the machine was busy with other work during it ({other:.2f} cores)"
    ratio = speed_ratio(base_summary, new_summary) if base_summary is not None else None
    if ratio is not None and (ratio > 1) != held and (why := speed_changed(ratio)) is not None:
        return why
    return None
