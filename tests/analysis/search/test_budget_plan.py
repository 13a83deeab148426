"""find's budget planned before the first stage (issue 33): it grows with --repeats and every extra, a given one
too small for them is refused, and a search that did not bracket the capacity is never taken for one
(not the answer of several, not profiled, not overloaded from, no recommendation)."""

from dataclasses import replace
from pathlib import Path

import pytest

from satpoint.analysis.search.budget_plan import plan_budget
from satpoint.analysis.search.holds import Budget, segment_overhead_s
from satpoint.analysis.search.steps import Measured
from satpoint.analysis.summary.build import build_summary
from satpoint.config import FindOptions, LoadOptions, RunConfig, VerdictRules
from satpoint.metrics.results import Results, new_header
from satpoint.procedures.saturation import run_find
from satpoint.procedures.saturation_hysteresis import run_hysteresis
from satpoint.procedures.search_run import SearchRun
from satpoint.servers.sim.model import SimConfig
from tests.analysis.search.test_search import FakeClock, timed_measure

OVERHEAD = segment_overhead_s(LoadOptions(drain_s=5.0))
BUDGET = Budget(270.0, 0.0, overhead_s=OVERHEAD)


def test_the_default_budget_grows_with_repeats_and_every_extra() -> None:
    plain = plan_budget(FindOptions(), BUDGET, 25.0, 0.01)
    # one search and its profile: 270 s, or what a typical one takes from the first rate when that is more
    assert plain.budget_s >= max(270.0, plain.need_s) and plain.refusal() is None
    three = plan_budget(FindOptions(repeats=3), BUDGET, 25.0, 0.01)
    assert three.budget_s >= 270.0 + 2 * three.search_s and three.refusal() is None
    hyst = plan_budget(FindOptions(hysteresis=True), BUDGET, 25.0, 0.01)
    assert hyst.hysteresis_s > 100 and hyst.budget_s >= 270.0 + hyst.hysteresis_s
    flame = plan_budget(FindOptions(flamegraph=True), BUDGET, 25.0, 0.01)
    held = plan_budget(FindOptions(), BUDGET, 25.0, 0.01, hold_rps=250.0)
    assert flame.budget_s > 270.0 and held.budget_s > 270.0 and held.hold_s > 0
    assert "3 searches" in three.line() and "planned" in three.line()
    # a planned budget holds what it was planned for: the same figure given with --budget-s is not refused
    for plan in (plain, three, hyst, flame, held):
        assert plan.budget_s >= plan.need_s
    given = plan_budget(FindOptions(repeats=3, budget_s=three.budget_s, budget_given=True), BUDGET, 25.0, 0.01)
    assert given.refusal() is None
    assert "hysteresis sequence" in hyst.line()


def test_a_given_budget_too_small_for_the_work_asked_is_refused_with_what_it_needs() -> None:
    given = FindOptions(repeats=3, budget_s=600.0, budget_given=True)
    plan = plan_budget(given, BUDGET, 25.0, 0.01)
    line = plan.refusal()
    assert line is not None and line.startswith("--budget-s 600 cannot hold 3 searches")
    need = int(line.split("give --budget-s ")[1].split()[0])
    assert need >= plan.need_s
    assert plan_budget(replace(given, budget_s=float(need)), BUDGET, 25.0, 0.01).refusal() is None
    # one search with nothing added is never refused: it ends on its budget, a lower bound if it must
    assert plan_budget(FindOptions(budget_s=20.0, budget_given=True), BUDGET, 25.0, 0.01).refusal() is None
    refused = plan_budget(FindOptions(budget_s=270.0, budget_given=True, hysteresis=True), BUDGET, 25.0, 0.01)
    assert refused.refusal() is not None and "hysteresis sequence" in (refused.refusal() or "")


def _results(opts: FindOptions, start: float) -> Results:
    return Results(new_header(RunConfig(kind="find", find=opts.describe(start, {})), {"url": "offline"}, 0.0))


def _find(tmp: Path, cfg: SimConfig, opts: FindOptions, start: float, planned: bool) -> dict:  # type: ignore[type-arg]
    """``find`` with default holds on a fake clock: each segment costs its ramps, holds, a 5 s drain and the
    cool-downs asked for; ``planned``: the budget and shares ``search_target`` plans."""
    clock = FakeClock()
    plan = plan_budget(opts, Budget(opts.budget_s, 0.0, overhead_s=OVERHEAD), start, 0.01)
    if planned:
        opts = replace(opts, budget_s=plan.budget_s)

    def cooldown(min_s: float, max_s: float) -> None:
        clock.now += min_s

    results = _results(opts, start)
    budget = Budget(opts.budget_s, clock(), clock, overhead_s=OVERHEAD)
    run = SearchRun(
        results, tmp, timed_measure(cfg, clock, drain_s=5.0), opts, cooldown=cooldown, budget=budget,
        plan=plan if planned else None,
    )  # fmt: skip
    run_find(run, VerdictRules(), start)
    assert clock.now <= opts.budget_s + 1e-6
    return build_summary(results)


@pytest.mark.parametrize("capacity_ms", [10.0, 11.7647])  # 300 and 255 rps
def test_repeats_3_with_the_planned_budget_every_search_brackets(tmp_path: Path, capacity_ms: float) -> None:
    cfg = SimConfig(slots=3, service_ms=capacity_ms)
    s = _find(tmp_path, cfg, FindOptions(repeats=3), 25.0, planned=True)
    repeats = s["search"]["repeats"]
    assert len(repeats) == 3 and all(r["brackets"] for r in repeats), repeats
    for r in repeats:
        assert 0.85 * cfg.capacity_rps <= r["saturation_rps"] <= 1.02 * cfg.capacity_rps
    assert not s["lower_bound"] and s["recommendation"] is not None
    assert s["budget_plan"] is None  # the header's plan is written by search_target


def test_a_budget_cut_search_is_never_the_answer_of_several(tmp_path: Path) -> None:
    # the run: a budget for one search given to three; the second is cut before it brackets (≥ 50 rps)
    cfg = SimConfig(slots=3, service_ms=10.0)
    s = _find(tmp_path, cfg, FindOptions(repeats=3, budget_s=330.0), 25.0, planned=False)
    repeats = s["search"]["repeats"]
    assert repeats[0]["brackets"] and any(not r["brackets"] for r in repeats[1:])
    assert s["saturation_rps"] == repeats[0]["saturation_rps"] >= 0.85 * 300  # not the lower bound
    assert not s["lower_bound"] and s["recommendation"]["saturation_rps"] == pytest.approx(s["saturation_rps"])
    assert any("did not bracket the capacity" in n for n in s["find_notes"])


def test_a_lower_bound_gets_no_profile_recommendation_or_hysteresis(tmp_path: Path) -> None:
    # one search cut after its staircase's first stages: "≥ X", never a capacity
    opts = FindOptions(budget_s=250.0, budget_given=True, hysteresis=True)  # too small: refused by search_target
    lines: list[str] = []
    s = _find(tmp_path, SimConfig(slots=3, service_ms=10.0), opts, 25.0, planned=False)
    assert s["saturation_rps"] is not None and s["lower_bound"] and s["unstable_rps"] is None
    assert s["recommendation"] is None and "lower bound" in s["recommendation_withheld"]
    assert s["latency_at"] == [] and s["hysteresis"] is None
    assert any("no hysteresis sequence" in n for n in s["find_notes"])
    # the hysteresis sequence never starts from a lower bound
    run = SearchRun(_results(opts, 25.0), tmp_path / "h", timed_measure(SimConfig(), FakeClock(), 0.0), opts,
                    log=lines.append)  # fmt: skip
    stair = [Measured(24.0, "stable", "staircase"), Measured(48.0, "stable", "staircase")]
    assert run_hysteresis(run, {0: stair}) is None and "lower bound" in lines[-1]


def test_a_confirmation_that_failed_once_then_held_says_so() -> None:
    from satpoint.analysis.search.summary import confirmation_holds

    h = [Measured(300.0, "stable", "refine"), Measured(255.0, "saturated", "confirm")]
    h += [Measured(255.0, "stable", "retest"), Measured(255.0, "stable", "retest")]
    assert confirmation_holds(h) == (1, 3, 1)  # one target, three holds, one of them failed
    assert confirmation_holds(h[:2]) == (1, 1, 1)


def test_a_budget_given_through_the_python_api_is_the_cap_it_says() -> None:
    """``FindOptions(budget_s=120)`` from the API is a cap, as ``--budget-s 120`` is: never raised by the
    planner, and refused when it cannot hold the work asked for; the default (270 s) is planned from."""
    api = plan_budget(FindOptions(budget_s=120.0, repeats=3), BUDGET, 25.0, 0.01)
    assert api.budget_s == 120.0 and api.given and FindOptions(budget_s=120.0).budget_fixed
    assert "(--budget-s)" in api.line()
    assert plan_budget(FindOptions(budget_s=120.0, hysteresis=True), BUDGET, 25.0, 0.01).refusal() is not None
    planned = plan_budget(FindOptions(repeats=3), BUDGET, 25.0, 0.01)
    assert planned.budget_s > 270.0 and not FindOptions().budget_fixed
    # the CLI and the sweep say which it is
    assert not FindOptions(budget_s=240.0, budget_given=False).budget_fixed
    assert FindOptions(budget_s=270.0, budget_given=True).budget_fixed
