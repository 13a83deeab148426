"""The saturation point in ``satpoint diff``: each search's answer and bracket, read from a ``find``
summary (``find_answers``); the figure ``find`` publishes, the lowest search, with the range where the lowest
capacity lies (``published_side``), the median of the answers beside it; a sweep point's measurements
(``saturation_side``, the median of the brackets' middles, as the sweep reports a point); and a side that held
no rate at all by the server's doing (every stage failed, or the target was lost: ``no_answer_cause``), which
against a side with an answer is a regression (``failed_side_diff``)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from satpoint.analysis.diff.verdict import MetricDiff, Side, metric_diff
from satpoint.analysis.search import brackets
from satpoint.analysis.search.rates import same_rate
from satpoint.analysis.search.steps import Bracket, counted
from satpoint.analysis.search.summary import SEARCH_PURPOSES
from satpoint.analysis.sweep.conclusions import LOWER_BOUND_TEXT, lower_bound_reasons


# saturation ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """One search's answer: the highest stable rate and the next unstable one (None: open, a lower bound)."""

    saturation_rps: float
    unstable_rps: float | None


#: stage verdicts that say the server itself could not hold a rate (not the generator or its connection cap)
SERVER_LIMITS = ("saturated", "failing", "slo_violated")
#: lower-bound reasons that are about the generator: a rate the server itself failed still closes the range
_GENERATOR_REASONS = {"generator_limited", "client_limited"}


def _server_failed_at(summary: Mapping[str, Any], rate: float) -> bool:
    return any(
        same_rate(float(st["target_rps"]), rate) and st.get("verdict") in SERVER_LIMITS
        for st in summary.get("stages") or []
    )


def lost_at_rps(summary: Mapping[str, Any]) -> float | None:
    """The offered rate at which a ``find`` lost its target (``target_lost``: the server stopped answering,
    a crash or an OOM under load): the stage it was lost in, or, lost between two stages, the last stage
    measured before it (None: not lost, or lost before the first stage)."""
    lost = summary.get("target_lost")
    if not isinstance(lost, Mapping) or not lost.get("stage"):
        return None
    stages = list(summary.get("stages") or [])
    k = int(lost["stage"]) - 1
    return float(stages[k]["target_rps"]) if 0 <= k < len(stages) else None


def find_answers(summary: Mapping[str, Any]) -> list[Answer]:
    """A ``find`` summary's searches (each ``--repeats`` search, or the one search) that found an answer.

    A search's range is open upwards when ``find`` calls its answer a lower bound (``lower_bound_reasons``),
    except when the reason is the generator (it fell behind, or its connection cap was the limit, in some
    stage) and the server itself could not hold the search's unstable rate (a stage there judged saturated,
    failing or over the SLO): the capacity is then below that rate whatever the generator did elsewhere.  A
    target lost under load (``target_lost``: the server crashed, or was killed for its memory) is the server
    failing, not the generator: an open range closes at the rate where it was lost."""
    reasons = set(lower_bound_reasons(summary))
    lost = lost_at_rps(summary) if "target_lost" in reasons else None
    reasons.discard("target_lost")

    def upper(s: float, u: Any) -> float | None:
        if u is not None and not reasons - _GENERATOR_REASONS and (not reasons or _server_failed_at(summary, float(u))):
            return float(u)
        # open: unless the target was lost, at a rate above the answer (at or below it: at the answer)
        return None if lost is None else max(lost, s)

    reps = [r for r in (summary.get("search") or {}).get("repeats") or [] if r.get("saturation_rps") is not None]
    if reps:
        return [
            Answer(float(r["saturation_rps"]), upper(float(r["saturation_rps"]), r.get("unstable_rps"))) for r in reps
        ]
    sat = summary.get("saturation_rps")
    if sat is None:
        return []
    return [Answer(float(sat), upper(float(sat), summary.get("unstable_rps")))]


def saturation_side(answers: Sequence[Answer], what: str = "search") -> Side:
    """Each answer with its bracket (a sweep point's measurements).  The range runs from the lowest answer
    to the highest unstable rate (open when any search never found one); the central value is the median of
    the brackets' middles (a search says the capacity lies between its answer and its unstable rate; an open
    one: its answer)."""
    if not answers:
        return Side(value=None, low=None, high=None, n=0, detail=f"no {what} found a saturation point")
    low, high = brackets.capacity_bracket((a.saturation_rps, a.unstable_rps) for a in answers) or (0.0, None)
    n = len(answers)
    mids = [a.saturation_rps if a.unstable_rps is None else (a.saturation_rps + a.unstable_rps) / 2 for a in answers]
    return Side(
        value=round(statistics.median(mids), 3),
        low=low,
        high=high,
        n=n,
        detail=_brackets(answers, what),
    )


def _brackets(answers: Sequence[Answer], what: str) -> str:
    n = len(answers)
    brackets = ", ".join(
        f"{a.saturation_rps:.1f}–{'∞' if a.unstable_rps is None else f'{a.unstable_rps:.1f}'}" for a in answers
    )
    return f"{n} {what}{'es' if what == 'search' and n > 1 else 's' if n > 1 else ''}: {brackets} rps"


def published_side(summary: Mapping[str, Any]) -> Side:
    """A ``find``'s saturation point as ``find`` publishes it (``saturation_rps``, which its recommendation,
    HPA target and manifests scale on): the lowest answer of its searches.  Its range is where the lowest
    capacity lies: at least the lowest answer, at most the lowest rate any search found unstable (each search's
    capacity lies in its bracket, so the lowest of them lies below every bracket's top); open upwards when no
    search closed its bracket.  ``median`` beside it: the median of the answers (reported, not judged).

    A search below the published figure does not count (``find`` did not count it: a lower bound never is the
    answer of several)."""
    answers = counted_answers(summary)
    if not answers:
        return Side(value=None, low=None, high=None, n=0, detail="no search found a saturation point")
    low = min(a.saturation_rps for a in answers)
    tops = [a.unstable_rps for a in answers if a.unstable_rps is not None]
    median = statistics.median(a.saturation_rps for a in answers)
    detail = _brackets(answers, "search")
    if len(answers) > 1:
        detail += f"; the lowest answer {low:.1f} rps is find's (the gate's), the median {median:.1f} rps"
    side = Side(value=round(low, 3), low=round(low, 3), high=round(min(tops), 3) if tops else None, n=len(answers),
                detail=detail)  # fmt: skip
    return side.model_copy(update={"median": round(median, 3), "figure": "lowest"})


def no_answer_cause(summary: Mapping[str, Any], purposes: Mapping[int, str] | None = None) -> str:
    """Why a ``find`` without a saturation point has none, when it is the server's doing: every rate the
    search measured failed (saturated, errors, over the SLO) or the target was lost; "" otherwise (nothing
    measured, the generator's limit, an interruption: nothing to say about the server)."""
    if summary.get("saturation_rps") is not None:
        return ""
    lost = summary.get("target_lost")
    if isinstance(lost, Mapping):
        return str(lost.get("message") or "the target stopped answering")
    purposes = purposes or {}
    failed = [
        st
        for st in summary.get("stages") or []
        if purposes.get(int(st.get("segment", -1)), "staircase") in SEARCH_PURPOSES
        and st.get("verdict") in SERVER_LIMITS
    ]
    if not failed:
        return ""
    rates = ", ".join(f"{float(st['target_rps']):.4g} rps {st['verdict']}" for st in failed[:4])
    return f"no rate held: {rates}{' ...' if len(failed) > 4 else ''}"


def saturation_diff(
    base: Side,
    new: Side,
    point: str,
    tolerance: float,
    reasons: Sequence[str] = (),
    lowest: bool = False,
    allowance: float = 0.0,
) -> MetricDiff:
    """The saturation point's verdict (search brackets); ``lowest``: the sides are ``published_side``s;
    ``allowance``: the between-run spread a change must exceed besides the tolerance (``saturation_allowance``)."""
    caveat = ""
    why = "; ".join(LOWER_BOUND_TEXT.get(r, r) for r in reasons)
    if reasons and (base.high is None or new.high is None):
        caveat = f"lower bound: {why}"
    elif reasons == ["target_lost"]:
        caveat = f"{why}: a server that fails under load failed at that rate, so the range ends there"
    elif reasons:
        caveat = f"{why} in some stage, but the server itself could not hold the rate each range ends at"
    method = (
        "the lowest search's answer (find's published figure), its range from it up to the lowest rate any "
        "search found unstable"
        if lowest
        else "search brackets: from each answer up to the next rate found unstable"
    )
    return metric_diff("saturation_rps", point, "rps", "higher", base, new, tolerance, method, caveat=caveat,
                       strict=False, allowance=allowance)  # fmt: skip


def answers_spread(answers: Sequence[Answer]) -> float:
    """How far a side's searches (or a sweep point's measurements) landed apart: (highest − lowest) / lowest
    of their answers (0 for one)."""
    sats = [a.saturation_rps for a in answers]
    return (max(sats) - min(sats)) / min(sats) if len(sats) > 1 and min(sats) > 0 else 0.0


#: one search on a side: its saturation point moved 0 to 16 % between two finds of the embedded MLServer on a quiet
#: shared machine (12 A/A pairs, up to 30 % in one; benchmarks/RESULTS.md), a standard deviation of 8-12 %, twice
#: the 10 % run spread that holds for the lowest of several searches a side (a change for the worse within it exits 1)
SINGLE_SEARCH_FACTOR = 2.0


def saturation_allowance(base_n: int, new_n: int, base_spread: float, run_spread: float) -> float:
    """The change of the saturation point that two sides cannot tell from the noise between runs.

    ``run_spread`` (0 turns the rule off): a search's bracket is its resolution, not the 5-10 % an unchanged
    server's capacity moves between two runs (benchmarks/RESULTS.md), and searches repeated within one run
    (``find --repeats``) do not see that drift either: three searches landing on one rate say nothing of the
    next run.  With several searches on both sides, a base whose own searches spread further
    (``base_spread``: ``answers_spread`` of the searches ``find`` counted) raises it, up to twice
    ``run_spread`` (a spread beyond that is the base's problem, not a licence to pass any drop); the new
    side's spread is not used (one search of three at 250 rps, not 300, is the change itself).  One search on
    a side: ``SINGLE_SEARCH_FACTOR`` times ``run_spread``."""
    if run_spread <= 0:
        return 0.0
    if min(base_n, new_n) <= 1:
        return SINGLE_SEARCH_FACTOR * run_spread
    return min(2 * run_spread, max(run_spread, base_spread))


def counted_answers(summary: Mapping[str, Any]) -> list[Answer]:
    """The answers ``published_side`` judges: every search's, those below the published figure left out."""
    answers = find_answers(summary)
    published = summary.get("saturation_rps")
    if published is not None:
        answers = [a for a in answers if a.saturation_rps >= float(published) - 1e-6] or answers
    return answers


def failed_side_diff(m: MetricDiff, base_cause: str, new_cause: str) -> MetricDiff:
    """The saturation verdict when one side held no rate at all, by the server's doing (``no_answer_cause``):
    a side without an answer against one with an answer is a regression (the new side failed) or an
    improvement (the base did); both without one is inconclusive."""
    if m.base.value is not None and m.new.value is None and new_cause:
        verdict, text = "regression", f"the new side has no saturation point ({new_cause}), the base has one"
    elif m.base.value is None and m.new.value is not None and base_cause:
        verdict, text = "improvement", f"the base side had no saturation point ({base_cause}), the new has one"
    elif m.base.value is None and m.new.value is None and (base_cause or new_cause):
        verdict, text = "inconclusive", "neither side held any rate"
    else:
        return m
    said = "inconclusive: a side has no figure"
    body = m.text.replace(said, f"{verdict}: {text}") if said in m.text else f"{m.text}; {verdict}: {text}"
    return m.model_copy(update={"verdict": verdict, "text": body})


def counted_spread(summary: Mapping[str, Any]) -> float:
    """``answers_spread`` of the closed brackets ``find`` counted (``search.counted``): a search the budget
    left coarse, or an open lower bound, is not the base's noise."""
    reps = (summary.get("search") or {}).get("repeats") or []
    brackets = {
        i: Bracket(float(r["saturation_rps"]), float(r["unstable_rps"]))
        for i, r in enumerate(reps)
        if r.get("saturation_rps") is not None and r.get("unstable_rps") is not None and r.get("brackets", True)
    }
    keys = counted(brackets, float(summary.get("precision") or 0.05)) if brackets else []
    return answers_spread([Answer(brackets[k].stable_rps or 0.0, brackets[k].unstable_rps) for k in keys])


def searches(summary: Mapping[str, Any]) -> int:
    """How many searches a ``find``'s published figure is the lowest of (1 without ``--repeats``): those that
    bracketed the capacity and that ``find`` counted (``search.counted``: a bracket the budget left coarse
    is not, unless it contradicts the precise ones).  Searches that ran but were not counted do not make the
    lowest of the others any less lucky."""
    reps = (summary.get("search") or {}).get("repeats") or []
    brackets = {
        i: Bracket(float(r["saturation_rps"]), float(r["unstable_rps"]))
        for i, r in enumerate(reps)
        if r.get("saturation_rps") is not None and r.get("unstable_rps") is not None and r.get("brackets", True)
    }
    if not reps or not brackets:
        return max(1, len(reps))
    return max(1, len(counted(brackets, float(summary.get("precision") or 0.05))))


def fewer_searches_diff(m: MetricDiff, base: Mapping[str, Any], new: Mapping[str, Any]) -> MetricDiff:
    """The published figure is the lowest of the searches, and the lowest of more searches is lower by chance
    alone: a new side with fewer searches than the base cannot be called ``no_change`` or an ``improvement``
    (its one lucky search against the base's worst of three); a regression stands (fewer chances to be low,
    and still lower)."""
    nb, nn = searches(base), searches(new)
    if nn >= nb or m.verdict not in ("no_change", "improvement"):
        return m
    said = f"{m.verdict.replace('_', ' ')}:"
    why = (
        f"inconclusive: the new side ran {nn} search{'es' if nn > 1 else ''}, the base {nb}; the lowest of fewer "
        "searches is higher by chance, so it cannot clear the base's (run both with the same --repeats)"
    )
    head = m.text.split(f"; {said}", 1)[0] if f"; {said}" in m.text else m.text
    return m.model_copy(update={"verdict": "inconclusive", "text": f"{head}; {why}"})
