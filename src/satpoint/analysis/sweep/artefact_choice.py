"""Speed beside quality: which model artefact a sweep recommends (pure functions of ``sweep.json``).

Each point of an embedded-MLServer sweep over demo-model artefacts carries a ``quality`` object
(``servers.artefacts.quality``: accuracy, agreement with the reference artefact, largest probability
difference, accuracy loss in percentage points, on the held-out split). The recommendation names the
fastest point, by the sweep's objective and with its noise rule (``analysis.sweep.conclusions.best``: a winner only
when clear of the runner-up), among the points whose accuracy loss is within ``--max-quality-loss``
(percentage points of held-out accuracy, default 1); a faster artefact over the bound is named as such.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from satpoint.analysis.sweep.conclusions import OBJECTIVE_TEXT, Objective, best

__all__ = ["DEFAULT_MAX_QUALITY_LOSS_PP", "MAX_QUALITY_LOSS_HELP", "artefact_choice", "attach_quality", "quality_text"]

#: the default of ``--max-quality-loss``: percentage points of held-out accuracy an artefact may lose
DEFAULT_MAX_QUALITY_LOSS_PP = 1.0
MAX_QUALITY_LOSS_HELP = (
    "artefact sweeps (runtime/demo_model knobs; model_dir with --eval-data): the accuracy an artefact may lose "
    "against the reference (sklearn; the reference model folder), in percentage points, and still be recommended "
    f"(default {DEFAULT_MAX_QUALITY_LOSS_PP:g})"
)
_EPS = 1e-9


def _within(row: Mapping[str, Any], max_loss_pp: float) -> bool | None:
    q = row.get("quality") or {}
    loss = q.get("accuracy_loss_pp")
    return None if loss is None else float(loss) <= max_loss_pp + _EPS


def quality_text(q: Mapping[str, Any] | None) -> str:
    """One artefact's quality in a few words (``-`` when there is none)."""
    if not q:
        return "-"
    if q.get("error"):
        return f"quality not measured ({q['error']})"
    dp = q.get("max_abs_proba_diff")
    return (
        f"accuracy {100 * q['accuracy']:.1f} % (loss {q['accuracy_loss_pp']:.1f} pp), "
        f"agreement {100 * q['agreement']:.1f} %, max |Δp| {'-' if dp is None else format(dp, '.3g')}"
    )


def artefact_choice(
    rows: Sequence[Mapping[str, Any]], objective: Objective, max_loss_pp: float
) -> dict[str, Any] | None:
    """The fastest point (by ``objective``) whose artefact loses at most ``max_loss_pp`` percentage
    points of held-out accuracy; None when the points are not of two or more artefacts with quality."""
    judged = [r for r in rows if _within(r, max_loss_pp) is not None]
    artefacts = {
        (r["quality"].get("demo_model"), r["quality"].get("runtime"), r["quality"].get("model_dir")) for r in judged
    }
    if len(artefacts) < 2:
        return None
    ok = [r for r in judged if _within(r, max_loss_pp)]
    over = [r for r in judged if not _within(r, max_loss_pp)]
    chosen = best(ok, objective) if ok else None
    fastest = best(judged, objective)
    split = "--eval-data" if any(r["quality"].get("model_dir") for r in judged) else "the held-out split"
    bound = f"accuracy loss at most {max_loss_pp:g} pp on {split}, --max-quality-loss"
    if chosen is None:
        text = f"no artefact within the quality bound ({bound}) has a figure for the {OBJECTIVE_TEXT[objective]}"
    else:
        row = next(r for r in ok if r["id"] == chosen["point"])
        text = (
            f"fastest artefact within the quality bound ({bound}): {chosen['text']}; "
            f"its quality: {quality_text(row['quality'])}"
        )
    if fastest is not None and (chosen is None or fastest["point"] != chosen["point"]):
        top = next(r for r in judged if r["id"] == fastest["point"])
        if not _within(top, max_loss_pp):
            text += (
                f"; the fastest point overall, {top['label']}, is left out: it loses "
                f"{top['quality']['accuracy_loss_pp']:.1f} pp of accuracy"
            )
    if over:
        text += "; over the bound: " + ", ".join(
            f"{r['label']} ({r['quality']['accuracy_loss_pp']:.1f} pp)" for r in over
        )
    return {
        "objective": objective,
        "max_quality_loss_pp": max_loss_pp,
        "point": chosen["point"] if chosen else None,
        "label": chosen["label"] if chosen else None,
        "value": chosen["value"] if chosen else None,
        "separated": chosen["separated"] if chosen else None,
        "tied_with": chosen["tied_with"] if chosen else [],
        "within_bound": [r["id"] for r in ok],
        "over_bound": [r["id"] for r in over],
        "text": text,
    }


def attach_quality(doc: MutableMapping[str, Any], quality_by_point: Mapping[str, Any], max_loss_pp: float) -> None:
    """Give every point row of ``doc`` its ``quality`` (None when not measured), and add the artefact
    recommendation (``artefact_choice``) and its line to the recommendation when there is one."""
    rows = doc.get("points") or []
    for r in rows:
        r["quality"] = quality_by_point.get(r["id"])
    choice = artefact_choice(rows, doc["objective"], max_loss_pp) if rows else None
    doc["artefact_choice"] = choice
    if choice is not None:
        lines = list(doc.get("recommendation") or [])
        lines.insert(1 if lines else 0, choice["text"])
        doc["recommendation"] = lines
