"""``find --hysteresis`` run against a target: after the search, one segment tips the server over and
steps the load down (the plan and the figures are ``analysis.search.hysteresis``'s)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from satpoint.analysis.search.holds import Budget
from satpoint.analysis.search.hysteresis import HYSTERESIS_PURPOSE, OVERLOAD_FACTOR, hysteresis_stages
from satpoint.analysis.search.steps import Measured, bracket, published_answer
from satpoint.analysis.search.target_lost import stopped_answering_at
from satpoint.config import FindOptions
from satpoint.metrics.results import Segment
from satpoint.procedures.session import LOST_ERRORS

if TYPE_CHECKING:
    from satpoint.procedures.search_run import SearchRun


def hysteresis_reserve(
    opts: FindOptions, budget: Budget, best_stable_rps: float | None, latency_s: float | None
) -> float:
    """What the hysteresis sequence will cost at most (``--hysteresis``), given the best stable rate so
    far: reserved while the search runs, as the profile is."""
    if not opts.hysteresis:
        return 0.0
    stages = hysteresis_stages(opts, best_stable_rps or 1.0, latency_s)
    return opts.cooldown_s + budget.stage_cost(stages)


def run_hysteresis(run: SearchRun, histories: dict[int, list[Measured]]) -> Segment | None:
    """After the search, its profile and flame graph: one segment (purpose ``hysteresis``) that holds
    ``OVERLOAD_FACTOR`` x the saturation point (the lowest answer of the searches), ramped from idle
    after the cool-down, then steps the load down without a pause; held whatever happens (no overload
    stop), within the in-flight cap and timeouts.  Skipped, and said so, when the budget cannot hold it."""
    if run.stop.is_set() or run.target_gone():
        return None
    # a search that did not bracket the capacity is a lower bound: overloading from it starts far below the
    # capacity, and the "recovery" it measures is nothing of the server's
    chosen = published_answer(histories, run.opts.precision)  # find's answer (a coarse bracket is not)
    if chosen is None:
        found = any(bracket(h).stable_rps is not None for h in histories.values())
        why = "no search bracketed the capacity (the answer is a lower bound)" if found else "no saturation point"
        run.log(f"no hysteresis sequence: {why}")
        return None
    sat = chosen[1]
    opts, budget = run.opts, run.spend
    stages = hysteresis_stages(opts, sat, run.latency_hint_s)
    cost = budget.stage_cost(stages)
    spare = budget.left() - cost
    if spare < opts.cooldown_s:
        run.log(
            f"no hysteresis sequence: it needs about {opts.cooldown_s + cost:.0f} s and "
            f"{max(0.0, budget.left()):.0f} s of the budget is left (raise --budget-s)"
        )
        return None
    over, steps = stages[0], stages[1:]
    run.log(
        f"hysteresis: {over.target_rps:.1f} rps ({OVERLOAD_FACTOR:.0%} of {sat:.1f}) for {over.hold_s:.0f} s, then "
        f"{len(steps)} steps down to {steps[-1].target_rps:.1f} rps without a pause, about {cost:.0f} s in all"
    )
    try:
        run.cooldown(opts.cooldown_s, spare)
        seg = run.measure(stages, 0.0, len(run.results.segments), HYSTERESIS_PURPOSE)
    except LOST_ERRORS as e:
        run.lost("before the hysteresis sequence", e)
        return None
    run.append(seg, 0)
    if stopped_answering_at(seg.records) is not None:
        run.log("the target stopped answering during the hysteresis sequence")
    return seg
