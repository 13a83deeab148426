"""``satpoint diff --calibrate``: the diff of an A/A pair (one configuration measured twice), where every
``regression`` or ``improvement`` is a false alarm: how many, and the tolerances that would have called none."""

from __future__ import annotations

from satpoint.analysis.diff.tolerances import ALL_TAIL_METRICS, DEFAULT_TAIL_TOLERANCE
from satpoint.analysis.diff.verdict import ALPHA, DiffDoc, MetricDiff


def calibrated(doc: DiffDoc) -> DiffDoc:
    """The diff of an A/A pair (the same configuration measured twice): every ``regression`` or
    ``improvement`` is a false alarm.  Adds the false-alarm rate at the tolerances used, and the smallest
    tolerance that would have called none of them (the widest gap between two ranges): over every relative
    metric, per metric, and separately for the two groups (``--tolerance``: saturation point, p50, service
    p50, throughput; ``--tail-tolerance``: ``TAIL_METRICS`` and ``STREAM_TAIL_METRICS``).  A figure the
    machine held back (busy, or its speed changed: ``busy``) was not judged: it counts in neither the rate nor
    the quiet tolerances (``held_by_machine`` says how many)."""
    judged = [m for m in doc.metrics if not m.busy]
    alarms = [m for m in judged if m.verdict in ("regression", "improvement")]
    relative = [m for m in judged if not m.absolute and m.gap is not None]
    central = [m for m in relative if m.metric not in ALL_TAIL_METRICS]
    tails = [m for m in relative if m.metric in ALL_TAIL_METRICS]
    n = len(judged)
    cal = {
        "metrics": n,
        "held_by_machine": len(doc.metrics) - n,
        "false_alarms": [f"{m.metric} @ {m.point}: {m.verdict}" for m in alarms],
        # changes for the worse left undecided: the gate exits 1 on them, an A/A pair's false "unjudged"
        "undecided_worse": [
            f"{m.metric} @ {m.point}: {(m.change or 0) * 100:+.1f} %" for m in judged if m.worse_undecided
        ],
        "false_alarm_rate": round(len(alarms) / n, 4) if n else None,
        "inconclusive": sum(m.verdict == "inconclusive" for m in judged),
        # a tolerance above the widest gap would have called no false alarm on this pair (relative metrics)
        "quiet_tolerance": round(max((_alarm_at(m) for m in relative), default=0.0), 4),
        # the same per group: what --tolerance and --tail-tolerance would each need on this pair
        "quiet_tolerance_central": round(max((_alarm_at(m) for m in central), default=0.0), 4),
        "quiet_tolerance_tail": round(max((_alarm_at(m) for m in tails), default=0.0), 4),
        "quiet_tolerance_by_metric": {
            name: round(max(_alarm_at(m) for m in relative if m.metric == name), 4)
            for name in dict.fromkeys(m.metric for m in relative)
        },
    }
    tail = DEFAULT_TAIL_TOLERANCE if doc.tail_tolerance is None else doc.tail_tolerance
    note = (
        f"calibration (an A/A pair): {len(alarms)} false alarm(s) in {n} verdicts at a tolerance of "
        f"{doc.tolerance:.1%} (tail latency {tail:.1%}); a --tolerance above {cal['quiet_tolerance_central']:.1%} "
        f"and a --tail-tolerance above {cal['quiet_tolerance_tail']:.1%} would have called none here"
    )
    return doc.model_copy(update={"calibration": cal, "notes": [*doc.notes, note]})


def _alarm_at(m: MetricDiff) -> float:
    """The largest tolerance at which ``m`` would still be called a change, or left undecided for the worse
    (the gate's exit 1: ``worse_undecided``) (0: at none)."""
    if m.worse_undecided:
        return abs(m.change or 0.0)
    if m.rule == "bootstrap":
        return abs(m.change or 0.0) if m.p_adjusted is not None and m.p_adjusted <= ALPHA else 0.0
    return abs(m.change or 0.0) if m.gap else 0.0
