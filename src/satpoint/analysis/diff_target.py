"""``find --baseline DIR``: does the new version still hold the baseline's per-replica autoscaling target?

The baseline's ``summary.json`` says at what rate the deployment is scaled today
(``recommendation.target_rps_per_replica``).  After its search, ``find --baseline`` holds that rate alone,
from idle (a cool-down until the server answers at low-load speed, a ramp from zero, a hold as long as the
search's confirmation), as one more segment of its folder (purpose ``TARGET_HOLD_PURPOSE``; the search
ignores it).  Its stage verdict is the answer: ``stable`` (within the ``--slo``, when one is given: a stage
over it is ``slo_violated``) holds the target; anything else does not.  One measurement, and a crisp one:
the question is not "by how much did capacity move" but "does today's scaling still work".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

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


def baseline_target(summary: Mapping[str, Any]) -> tuple[float | None, str]:
    """The per-replica target in a baseline's ``summary.json`` and, when there is none, why (an older
    layout without ``recommendation.target_rps_per_replica``, a ``run`` folder, a search without answer)."""
    rec = summary.get("recommendation")
    target = rec.get("target_rps_per_replica") if isinstance(rec, Mapping) else None
    if isinstance(target, int | float) and target > 0:
        return float(target), ""
    if summary.get("kind") not in (None, "find"):
        return None, f"the baseline is a {summary.get('kind')} folder: it has no per-replica target to hold"
    if isinstance(rec, Mapping) or (rec is None and "recommendation" in summary):
        return None, "the baseline's search found no saturation point: it has no per-replica target to hold"
    return None, (
        "the baseline's summary.json has no recommendation.target_rps_per_replica (an older layout): "
        "its per-replica target was not held"
    )


def _fmt(v: float | None, unit: str) -> str:
    return "-" if v is None else f"{v:.2f} {unit}" if unit == "ms" else f"{v:.1f} {unit}"


def judge_target_hold(
    new_summary: Mapping[str, Any], purposes: Mapping[int, str], base_summary: Mapping[str, Any] | None = None
) -> TargetHold | None:
    """The hold at the baseline's target in a ``find`` folder (None: it has none), judged by its stage."""
    stage = next(
        (st for st in new_summary.get("stages") or [] if purposes.get(int(st["segment"])) == TARGET_HOLD_PURPOSE),
        None,
    )
    if stage is None:
        return None
    rate = float(stage["target_rps"])
    verdict = str(stage.get("verdict") or "")
    held = None if verdict in ("incomplete", "") or stage.get("interrupted") else verdict == "stable"
    lat = stage.get("latency_ms") or {}
    slo = new_summary.get("slo") or None
    base_target = baseline_target(base_summary)[0] if base_summary is not None else None
    answer = {True: "yes", False: f"no ({verdict})", None: f"not judged ({verdict or 'no verdict'})"}[held]
    slo_text = ", ".join(f"{k}<{v if isinstance(v, str) else f'{v:g}ms'}" for k, v in (slo or {}).items())
    within = f" (within the SLO {slo_text})" if slo_text and held else f" (SLO {slo_text})" if slo_text else ""
    text = (
        f"holds the baseline's target of {rate:.1f} rps: {answer}, p99 {_fmt(lat.get('p99'), 'ms')}{within}; "
        f"throughput {_fmt(stage.get('throughput_rps'), 'rps')}, p50 {_fmt(lat.get('p50'), 'ms')}, held alone from "
        "idle after the search (one measurement)"
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
    )
