"""What ``satpoint diff`` judges besides the figures at equal load: a new target that stopped answering under a
load the base survived, and a rate a ``run`` baseline held that the new run never judged.

Both would otherwise pass in silence: the rates compared at equal load are those *both* sides judged, so a
new version that crashed at its second stage (``target_lost``) is compared at its first stage only, and a
``find`` that lost its target after its answer (in its latency profile) keeps a closed bracket.  So:

- **target lost** (``lost_target_diff``): the new side lost its target (a crash, an OOM kill under load) and
  the base did not, or did at a rate higher by more than the tolerance (then only the stages it ran before
  its own loss count as survived).  A ``regression`` when the base ran a stage at that rate or above without losing its
  own (the new version dies where the old one lived), else ``inconclusive`` (the base never ran so high).
- **a rate not judged** (``missing_rate_diffs``, run against run): a rate the base held stably at which
  the new run has no judged stage (interrupted, lost, or planned differently) is ``inconclusive``, never a
  silent pass (``regression`` when the new target was lost: covered by the rule above).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from satpoint.analysis.diff.saturation import lost_at_rps
from satpoint.analysis.diff.verdict import MetricDiff, Outcome, Side
from satpoint.analysis.search.rates import same_load


def _metric(metric: str, point: str, base: Side, new: Side, verdict: Outcome, method: str, text: str,
            tolerance: float) -> MetricDiff:  # fmt: skip
    return MetricDiff(metric=metric, point=point, verdict=verdict, unit="rps", better="higher", base=base, new=new,
                      change=None, gap=None, tolerance=tolerance, absolute=False, strict=True, single=True,
                      method=method, text=text, rule="ranges")  # fmt: skip


def lost_target_diff(
    base: Mapping[str, Any], new: Mapping[str, Any], base_stages: Sequence[Mapping[str, Any]], tolerance: float
) -> MetricDiff | None:
    """``target_answering``: the new side lost its target and the base did not (None: nothing to judge).
    ``base_stages``: the base's judged stages of every purpose (a stage survived is survived whatever it was
    for)."""
    lost = new.get("target_lost")
    if not isinstance(lost, Mapping):
        return None
    rate = lost_at_rps(new)
    base_lost = base.get("target_lost")
    if base_lost is not None:
        # the base lost its own too: judged only when the new side was lost at a lower rate than the base
        # (beyond the tolerance), against the stages the base ran before it was lost
        base_rate = lost_at_rps(base)
        if rate is None or base_rate is None or rate >= base_rate * (1 - tolerance):
            return None
        k = int(base_lost.get("stage") or 0) - 1 if isinstance(base_lost, Mapping) else -1
        base_stages = [s for i, s in enumerate(base_stages) if k < 0 or i < k]
    ran = [float(s["target_rps"]) for s in base_stages if s.get("verdict") not in (None, "", "incomplete")]
    message = str(lost.get("message") or "the target stopped answering")
    if rate is None:  # before the first stage, or between stages with none judged: any load the base ran
        survived = bool(ran)
        where = "before any stage was judged"
    else:
        survived = any(r >= rate or same_load(r, rate) for r in ran)
        where = f"at {rate:.4g} rps"
    top = max(ran, default=None)
    base_side = Side(value=top, low=top, high=top, n=len(ran),
                     detail=f"answered through every stage ({len(ran)}), up to {top or 0:.4g} rps")  # fmt: skip
    new_side = Side(value=rate, low=rate, high=rate, n=1, detail=message)
    if survived:
        verdict: Outcome = "regression"
        why = f"the new target stopped answering {where}, a load the base ran without losing its own"
    else:
        verdict = "inconclusive"
        why = f"the new target stopped answering {where}, above every rate the base ran (up to {top or 0:.4g} rps)"
    text = f"target_answering @ under load: {message}; {verdict}: {why}"
    method = "whether the target kept answering (summary.json's target_lost) at a rate the base ran"
    return _metric("target_answering", "under load", base_side, new_side, verdict, method, text, tolerance)


def missing_rate_diffs(
    base_stable: Sequence[float], new_judged: Sequence[float], new: Mapping[str, Any], tolerance: float
) -> list[MetricDiff]:
    """``stage_judged`` per rate the base (a run) held stably that the new run has no judged stage at."""
    out: list[MetricDiff] = []
    seen: list[float] = []
    why_new = (
        "the new target stopped answering"
        if new.get("target_lost") is not None
        else "the new run was interrupted"
        if new.get("interrupted")
        else "the new run has no judged stage at this rate (its stages differ, or it ended early)"
    )
    for r in sorted(base_stable):
        if any(same_load(r, s) for s in seen) or any(same_load(r, n) for n in new_judged):
            continue
        seen.append(r)
        point = f"{r:.4g} rps"
        text = (
            f"stage_judged @ {point}: the base held {point} stably, the new side was not judged there ({why_new}); "
            "inconclusive: what the new version does at this rate is unknown, so no pass can be given"
        )
        out.append(_metric("stage_judged", point, Side(value=r, low=r, high=r, n=1, detail="held stably"),
                           Side(value=None, low=None, high=None, n=0, detail=why_new), "inconclusive",
                           "a rate the base run held stably, judged on the new side too", text, tolerance))  # fmt: skip
    return out
