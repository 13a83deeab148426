"""The saturation search's fields in summary.json, recomputed from the recorded stages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from satpoint.analysis.search import brackets
from satpoint.analysis.search.capacity import recommend
from satpoint.analysis.search.rates import same_rate
from satpoint.analysis.search.steps import (
    LIMITED,
    RETEST,
    Bracket,
    Measured,
    SearchParams,
    Step,
    bracket,
    confirm_rate,
    counted,
    held_at,
    published,
    replay,
)
from satpoint.analysis.search.verdicts import Verdict
from satpoint.metrics.results import Results
from satpoint.metrics.stats import StageMetrics

SEARCH_PURPOSES = ("staircase", "refine", "confirm", "retest")
#: a profile stage that was not stable, measured again alone from idle:
#: the search counts this measurement's verdict in place of the profile stage's
RECHECK_PURPOSE = "recheck"
PROFILE_FRACTIONS = (0.5, 0.8, 0.9, 1.0)


def search_params(results: Results) -> SearchParams:
    f = results.header.get("config", {}).get("find", {})
    return SearchParams(
        start_rps=float(f.get("start_rps", 10.0)),
        growth=float(f.get("growth", 2.0)),
        precision=float(f.get("precision", 0.05)),
        max_rps=float(f.get("max_rps", 50_000.0)),
        # folders written before the confirmation existed replay without it
        confirm_margin=float(f.get("margin", 0.15)) if f.get("confirm") else None,
        retest=bool(f.get("retest", False)),  # folders written before the retests replay without them
        # ... and those written before the third measurement, with a retest replacing what it retested
        majority=bool(f.get("retest_majority", False)),
    )


def search_history(
    results: Results, stages: list[tuple[int, StageMetrics]], params: SearchParams | None = None, repeat: int = 0
) -> list[Measured]:
    """The measurements one search (``repeat``) decides on, in order: its own stages, and (when it
    confirms its answer) the stages of the profile of its answer, up to the answer itself; such a stage that
    was not stable counts with the verdict of its recheck (the same rate measured again alone), and not at
    all when it was not measured again."""
    params = params or search_params(results)
    purpose = {s.index: s.purpose for s in results.segments}
    top = {s.index: max(st.target_rps for st in s.stages) for s in results.segments if s.stages}
    mine = {s.index for s in results.segments if s.repeat == repeat}
    rechecks = [(i, m) for i, m in stages if i in mine and purpose.get(i) == RECHECK_PURPOSE and not m.interrupted]
    out = []
    for i, m in stages:
        if i not in mine or m.interrupted:  # cut short by the user: the search never decided on it
            continue
        p = purpose.get(i)
        if p in SEARCH_PURPOSES:
            out.append(Measured(m.target_rps, m.verdict, p or "", m.throughput_rps))
        elif (
            p == "profile"
            and params.confirm_margin is not None
            # the profile's last stage holds 100 % of the saturation point it was run for
            and m.target_rps <= top[i] * (1 + 1e-9)
        ):
            if m.verdict != Verdict.STABLE:
                same = (r for j, r in rechecks if j > i and abs(r.target_rps - m.target_rps) <= 1e-9 * m.target_rps)
                again = next(same, None)
                if again is None:
                    continue  # never measured again: one stage of a sequence does not overturn the answer
                m = again
            out.append(Measured(m.target_rps, m.verdict, "profile", m.throughput_rps))
    return out


def replay_matches(history: list[Measured], decisions: list[Step | None]) -> bool:
    """Did the search ask for exactly the rates that were measured (profile stages are not its asks)?"""
    return all(
        d is not None and abs(d.rate_rps - h.rate_rps) <= 1e-6 * max(1.0, h.rate_rps)
        for d, h in zip(decisions[:-1], history, strict=True)
        if h.phase != "profile"
    )


def _range(values: list[float | None]) -> list[float] | None:
    got = [v for v in values if v is not None]
    return [round(min(got), 3), round(max(got), 3)] if got else None


def _capacity_bracket(answered: list[_Search]) -> list[float | None] | None:
    """Where the capacity lies, as far as the searches can tell: from the lowest answer up to the highest
    rate a search found not stable (the sweep's ``bracket_rps``, so the two compare like for like); the
    top is None (open) when a search never found an unstable rate above its answer."""
    got = brackets.capacity_bracket((x.answer, x.bracket.unstable_rps) for x in answered if x.answer is not None)
    return None if got is None else list(got)


def _repeat_dict(x: _Search, params: SearchParams) -> dict[str, Any]:
    b = x.bracket
    target = confirm_rate(b.stable_rps, params) if b.stable_rps is not None else None
    held = held_at(x.history, target, params.majority) if target else None  # retests of a failed one decide
    return {
        "repeat": x.repeat,
        "saturation_rps": round(b.stable_rps, 3) if b.stable_rps is not None else None,
        "unstable_rps": round(b.unstable_rps, 3) if b.unstable_rps is not None else None,
        "confirmed": None if target is None else (held is not None and held.verdict == Verdict.STABLE),
        "stages": len(x.history),
        "finished": bool(x.decisions) and x.decisions[-1] is None,
        # it found a rate it held and one it did not above it: its answer is a capacity, not a lower bound
        "brackets": x.brackets,
    }


def confirmation_holds(history: list[Measured]) -> tuple[int, int, int]:
    """(per-replica targets confirmed, holds at them, failed holds): every confirmation and every retest
    of one (limited ones say nothing and are not counted)."""
    targets = [m.rate_rps for m in history if m.phase == "confirm"]

    def at_target(m: Measured) -> bool:
        return any(same_rate(m.rate_rps, t) for t in targets)

    holds = [m for m in history if m.phase in ("confirm", RETEST) and m.verdict not in LIMITED and at_target(m)]
    return len(targets), len(holds), sum(1 for m in holds if m.verdict != Verdict.STABLE)


def _unfounded(
    sat: float,
    margin: float,
    confirmation: dict[str, Any] | None,
    profile: list[StageMetrics],
    lost: dict[str, Any] | None,
    results: Results,
    stages: list[tuple[int, StageMetrics]],
) -> str | None:
    """Why no per-replica target may be recommended from the bracketed answer ``sat`` (None: it may): the
    target stopped answering (a server that crashed), the per-replica target was never held from idle (the
    confirmation was cut: budget, interruption, or the generator was the limit there), or a profile stage at
    or below it was not stable and no measurement of that rate again from idle held."""
    head = f"no recommendation, replica counts or Kubernetes manifests from the saturation point {sat:.1f} rps: "
    if lost is not None:
        return head + f"{lost.get('message', 'the target stopped answering')}; a server that crashed has no target"
    if confirmation is not None and confirmation.get("verdict") != Verdict.STABLE:
        seen = confirmation.get("verdict")
        how = f"was {seen}" if seen else "was never held (budget or interruption)"
        return head + (
            f"the per-replica target {confirmation['rate_rps']:.1f} rps {how}, so nothing shows a replica holds it; "
            "give the search the budget to confirm it"
        )
    cap = sat * (1 - margin)  # the per-replica target
    purpose = {s.index: s.purpose for s in results.segments}
    rechecked = [m for i, m in stages if purpose.get(i) == RECHECK_PURPOSE and not m.interrupted]
    for m in profile:
        if m.verdict == Verdict.STABLE or m.interrupted or m.target_rps > cap * (1 + 1e-9):
            continue
        again = [r for r in rechecked if abs(r.target_rps - m.target_rps) <= 1e-9 * m.target_rps]
        if not (again and again[-1].verdict == Verdict.STABLE):
            return head + (
                f"the profile stage at {m.target_rps / sat:.0%} of it ({m.target_rps:.1f} rps, at or below the "
                f"per-replica target) was {m.verdict} and was not held when measured again (or never was)"
            )
    return None


def _step_dict(s: Step | None) -> dict[str, Any] | None:
    return None if s is None else {"rate_rps": round(s.rate_rps, 4), "phase": s.phase, "fresh": s.fresh}


@dataclass(frozen=True)
class _Search:
    """One search (of ``find --repeats``) replayed from its measurements."""

    repeat: int
    history: list[Measured]
    decisions: list[Step | None]
    majority: bool = True

    @property
    def bracket(self) -> Bracket:
        return bracket(self.history, self.majority)

    @property
    def answer(self) -> float | None:
        return self.bracket.stable_rps

    @property
    def limited(self) -> bool:
        """It ended because the generator (or its connection cap) was the limit, twice."""
        h = self.history
        return bool(h) and h[-1].verdict in LIMITED and bool(self.decisions) and self.decisions[-1] is None

    @property
    def brackets(self) -> bool:
        """Its answer is bracketed: a rate above it was found not stable, and the generator was not the limit
        at the end (else the answer is only a lower bound: budget, ``max_rps``, the generator, its cap)."""
        return self.answer is not None and self.bracket.unstable_rps is not None and not self.limited


def _searches(results: Results, stages: list[tuple[int, StageMetrics]], params: SearchParams) -> list[_Search]:
    repeats = sorted({s.repeat for s in results.segments}) or [0]
    out = []
    for k in repeats:
        history = search_history(results, stages, params, k)
        out.append(_Search(k, history, replay(history, params), params.majority))
    return out


def find_fields(
    results: Results, stages: list[tuple[int, StageMetrics]], lost: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The search's summary fields.  A stage during which the target stopped answering (``lost``, see
    ``analysis.search.target_lost``) says nothing about the server's capacity: it is left out of the search."""
    f = results.header.get("config", {}).get("find", {})
    params = search_params(results)
    if lost is not None and lost.get("segment") is not None:
        stages = [(i, m) for i, m in stages if i != lost["segment"]]
    searches = _searches(results, stages, params)
    answered = [x for x in searches if x.answer is not None]
    # the answer is the lowest of the repeated searches that bracketed the capacity (every one of them is a
    # replica's capacity); a search that did not is a lower bound, never the answer of several; when none
    # did, the answer is the highest lower bound, and a lower bound it stays
    bracketed = [x for x in answered if x.brackets]
    # ... of those that reached the precision: a bracket the budget left coarse is not the answer of several
    # unless its unstable rate contradicts theirs (``search.counted``)
    brackets = {i: x.bracket for i, x in enumerate(bracketed)}
    coarse = [x for i, x in enumerate(bracketed) if i not in counted(brackets, params.precision)]
    bracketed = [x for x in bracketed if x not in coarse]
    if bracketed:
        chosen = bracketed[published({i: x.bracket for i, x in enumerate(bracketed)}, params.precision) or 0]
    else:
        chosen = max(answered, key=lambda x: x.answer or 0.0) if answered else searches[-1]
    history, decisions = chosen.history, chosen.decisions
    b = chosen.bracket
    replay_ok = all(replay_matches(x.history, x.decisions) for x in searches)
    finished = all(bool(x.decisions) and x.decisions[-1] is None for x in searches)
    last = history[-1] if history else None
    gen_limited = last is not None and last.verdict == Verdict.GENERATOR_LIMITED and decisions[-1] is None
    client_limited = last is not None and last.verdict == Verdict.CLIENT_LIMITED and decisions[-1] is None
    sat = b.stable_rps
    overloaded = [
        m for _, m in stages if m.verdict not in (Verdict.STABLE, *LIMITED, Verdict.FAILING, Verdict.INCOMPLETE)
    ]
    max_tp = max((m.throughput_rps for m in overloaded), default=None)
    purpose = {s.index: s.purpose for s in results.segments}
    last_profile = max((i for i, p in purpose.items() if p == "profile"), default=None)
    profile = [m for i, m in stages if i == last_profile]  # the profile of the final answer
    target = confirm_rate(sat, params) if sat is not None else None
    targets, holds, failed_holds = confirmation_holds(history)
    confirmation: dict[str, Any] | None = None
    if target is not None:
        held = held_at(history, target, params.majority)  # the confirmation, or its retests' decision
        confirmation = {
            "rate_rps": round(target, 3),
            "verdict": held.verdict if held else None,
            # every hold at a per-replica target (the confirmations and their retests), and those not stable
            "attempts": holds,
            "failed_holds": failed_holds,
            "targets": targets,
        }
    latency_at = []
    for m in profile:
        frac = m.target_rps / sat if sat else None
        latency_at.append(
            {
                "fraction": round(frac, 3) if frac else None,
                "offered_rps": round(m.offered_rps, 3),
                "throughput_rps": round(m.throughput_rps, 3),
                "latency_ms": {k: m.latency_ms[k] for k in ("p50", "p90", "p99", "max")},
                "verdict": m.verdict,
                **({"stream": m.stream} if m.stream is not None else {}),  # --stream: TTFC, gaps there
            }
        )
    slo = f.get("slo") or None
    lower_bound = sat is not None and not chosen.brackets
    rec = None
    withheld: str | None = None
    if sat is not None and not lower_bound:
        withheld = _unfounded(sat, float(f.get("margin", 0.15)), confirmation, profile, lost, results, stages)
        if withheld is None:
            rec = recommend(sat, float(f.get("margin", 0.15)), f.get("peak_rps"), f.get("min_rps")).to_dict()
    elif lower_bound:
        withheld = (
            f"no recommendation, replica counts or Kubernetes manifests: the saturation point ≥ {sat:.1f} rps is a "
            "lower bound (no search bracketed the capacity), and a per-replica target sized from it could be far "
            "below what a replica sustains; give the search the budget (or --max-rps, --max-inflight) to bracket it"
        )
    notes: list[str] = []
    if len(searches) > 1:
        for x in searches:
            if x.answer is not None and not x.brackets:
                why = "the generator was the limit" if x.limited else "no unstable rate was reached"
                notes.append(
                    f"search {x.repeat + 1} of {len(searches)} did not bracket the capacity (≥ {x.answer:.1f} rps, "
                    f"{why}): a lower bound, not an answer"
                    + (f"; the answer is the lowest of the {len(bracketed)} that did" if bracketed else "")
                )
        for x in coarse:
            notes.append(
                f"search {x.repeat + 1} of {len(searches)} stopped before the precision ({x.answer:.1f}-"
                f"{x.bracket.unstable_rps:.1f} rps, wider than {params.precision:.0%}; budget or interruption): not "
                "the answer, which is the lowest of those that reached it"
            )
        ran = len({s.repeat for s in results.segments})
        if int(f.get("repeats", 1)) > ran:
            notes.append(f"only {ran} of the {f.get('repeats')} searches asked for ran (budget or interruption)")
    if withheld is not None:
        notes.append(withheld)
    if gen_limited:
        notes.append(
            "generator-limited: the generator fell behind before the server saturated; the saturation "
            "point is a lower bound"
        )
    if client_limited:
        notes.append(
            "client-limited: requests waited for the generator's connections while the server answered at "
            "low-load speed; the saturation point is a lower bound (raise --max-inflight)"
        )
    if targets > 1:
        notes.append(
            f"the search confirmed its answer at {targets} per-replica targets: a target that did not hold (in 2 "
            "of 3 holds) sent it below; this server's capacity varies"
        )
    if confirmation is not None and failed_holds and confirmation["verdict"] == Verdict.STABLE:
        notes.append(
            f"the confirmation failed {failed_holds} of its {holds} holds before the per-replica target "
            f"{confirmation['rate_rps']:.1f} rps held in 2 of 3: it passed narrowly; keep the margin, or raise it"
        )
    if confirmation is not None and confirmation["verdict"] is None and finished is False:
        notes.append("the answer was not confirmed at the per-replica target (budget or interruption)")
    if sat is None and history:
        notes.append("no stable stage was found: even the lowest rate tried overloaded the server or failed")
    if b.unstable_rps is None and history and not gen_limited:
        notes.append("no unstable stage was reached: the saturation point is above the highest rate tried")
    if lower_bound and f.get("profile") and not profile:
        notes.append("no latency profile: the saturation point is a lower bound, not the capacity to profile")
    for m in profile:
        frac = m.target_rps / sat if sat else None
        if m.verdict != Verdict.STABLE and not m.interrupted and frac is not None and frac <= 1.0 + 1e-9:
            notes.append(
                f"the profile stage at {frac:.0%} of the saturation point was {m.verdict}: this "
                "server's capacity varies between runs; keep the margin, or raise it"
            )
    if f.get("profile") and sat is not None and not profile and lost is None and not lower_bound:
        notes.append("the latency profile was not measured (budget or interruption): raise --budget-s")
    if lost is not None:
        left_out = " and that stage is left out of it" if lost.get("segment") is not None else ""
        notes.append(f"the search ended because the target stopped answering{left_out}")
    elif not finished and not gen_limited and not client_limited:
        notes.append("the search stopped before reaching the requested precision (budget or interruption)")
    return {
        "saturation_rps": round(sat, 3) if sat is not None else None,
        "unstable_rps": round(b.unstable_rps, 3) if b.unstable_rps is not None else None,
        "max_throughput_rps": round(max_tp, 3) if max_tp is not None else None,
        "precision": params.precision,
        "precision_achieved": round(b.ratio, 4) if b.ratio is not None else None,
        "slo": slo,
        "search": {
            "params": {"start_rps": params.start_rps, "growth": params.growth, "max_rps": params.max_rps},
            "steps": [{"rate_rps": round(h.rate_rps, 4), "verdict": h.verdict, "phase": h.phase} for h in history],
            "finished": finished,
            "replay_matches": replay_ok,
            "next": _step_dict(decisions[-1]) if decisions else None,
            "confirmation": confirmation,
            "repeats": [_repeat_dict(x, params) for x in searches],
        },
        "saturation_range_rps": _range([x.answer for x in bracketed]) if len(searches) > 1 else None,
        "saturation_bracket_rps": _capacity_bracket(bracketed) or ([round(sat, 3), None] if sat is not None else None),
        # the answer is only a lower bound: nothing downstream (profile, hysteresis, recommendation, manifests)
        # treats it as a capacity
        "lower_bound": lower_bound,
        "latency_at": latency_at,
        "recommendation": rec,
        "recommendation_withheld": withheld,
        "budget_plan": f.get("budget_plan"),
        "find_notes": notes,
    }
