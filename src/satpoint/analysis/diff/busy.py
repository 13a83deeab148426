"""``satpoint diff`` calls no change from figures measured while the machine was busy with other work
(``analysis.server.machine_busy``), or on a machine whose speed changed between the two runs
(``analysis.server.machine_speed``): such a figure is the machine's as much as the version's, so neither a
regression, an improvement nor a no_change can be told from it (a busy base makes a broken new version look
unchanged).  The diff then exits 1 unless something regressed (``held_by_machine``): a gate never passes on
figures it could not judge."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from satpoint.analysis.diff.verdict import MetricDiff
from satpoint.analysis.search.summary import SEARCH_PURPOSES
from satpoint.analysis.server.machine_busy import busy_segments


def busy_search(summary: Mapping[str, Any], purposes: Mapping[int, str]) -> dict[int, float]:
    """The busy stages of a find's searches (segment -> other work in cores)."""
    return {k: v for k, v in busy_segments(summary).items() if purposes.get(k, SEARCH_PURPOSES[0]) in SEARCH_PURPOSES}


def busy_text(side: str, busy: Mapping[int, float]) -> str:
    n = len(busy)
    return f"the {side} side's machine was busy with other work in {n} stage{'s' if n > 1 else ''} (up to " \
        f"{max(busy.values()):.2f} cores)"  # fmt: skip


def not_from_busy(m: MetricDiff, base: Mapping[int, float], new: Mapping[int, float]) -> MetricDiff:
    """``m`` inconclusive when either side measured it on a busy machine (``base``/``new``: its busy stages);
    not the error rate (a server's errors are its own, however busy its machine)."""
    if (not base and not new) or m.metric == "error_rate":
        return m
    why = "; ".join(busy_text(side, b) for side, b in (("base", base), ("new", new)) if b)
    why += ", so no change can be told from it (measure on a quiet machine)"
    return m.model_copy(update={"verdict": "inconclusive", "text": f"{m.text}; inconclusive: {why}", "busy": why})


def busy_at(stages: Sequence[Any], busy: Mapping[int, float]) -> dict[int, float]:
    """Which of these stages (``diff_rows.StageRows``) were busy, from the folder's busy segments."""
    return {s.segment: busy[s.segment] for s in stages if s.segment in busy}


def not_from_changed_machine(m: MetricDiff, why: str | None) -> MetricDiff:
    """``m`` inconclusive when the machine's speed changed between the runs (``why``, from
    ``machine_speed.speed_changed``); not the error rate, nor a side that held no rate (the server's doing)."""
    if why is None or m.metric == "error_rate" or m.base.value is None or m.new.value is None:
        return m
    why = f"{why}, so no change can be told from it (measure both on one quiet machine, or --repeats)"
    held = m.busy + "; " + why if m.busy else why
    return m.model_copy(update={"verdict": "inconclusive", "text": f"{m.text}; inconclusive: {why}", "busy": held})


def machine_explains(plain: Sequence[MetricDiff], wide: Sequence[MetricDiff]) -> set[tuple[str, str]]:
    """The figures whose verdict a change of the machine's speed explains (``plain``: judged with the run
    spread; ``wide``: with it widened by the speed change; one metric list each, in the same order): a
    no_change or an inconclusive figure (a faster machine can hide a regression, a slower one an improvement),
    and a regression or an improvement the wider spread no longer calls; a larger change keeps its verdict.
    Either direction: the reference workload is timed before the stages, not during them, and A/A pairs
    showed a side timed slower measuring the higher capacity (+29.7 % on a side timed 1.17x slower).  Never
    the error rate, nor a side that held no rate (the server's doing)."""
    out: set[tuple[str, str]] = set()
    for m, w in zip(plain, wide, strict=True):
        if m.metric == "error_rate" or m.base.value is None or m.new.value is None:
            continue
        if m.verdict in ("no_change", "inconclusive") or (
            m.verdict in ("regression", "improvement") and w.verdict != m.verdict
        ):
            out.add((m.metric, m.point))
    return out


def held_by_machine(metrics: Sequence[MetricDiff]) -> list[MetricDiff]:
    """The figures held back because of the machine (busy, or its speed changed)."""
    return [m for m in metrics if m.busy]
