"""find's answer and recommendation fail closed: a coarse bracket cut by the budget is not the answer of several,
and no per-replica target is recommended for a server that crashed, whose target was never held, or whose
profile failed below the target without being measured again."""

from pathlib import Path

import numpy as np

from satpoint.analysis.search.holds import Budget, profile_reserve
from satpoint.analysis.search.steps import Bracket, counted, published
from satpoint.analysis.summary.build import build_summary
from satpoint.config import FindOptions, VerdictRules
from satpoint.metrics.records import Outcome
from satpoint.metrics.results import Segment
from satpoint.plan import Stage
from satpoint.procedures.saturation import run_find
from satpoint.procedures.search_run import SearchRun
from satpoint.servers.sim.model import SimConfig
from tests.analysis.search.test_budget_plan import _results
from tests.analysis.search.test_search import FakeClock, offline_measure, timed_measure

CFG = SimConfig(slots=3, service_ms=10.0)  # 300 rps
FAST = FindOptions(budget_s=1e9, cooldown_s=0, ramp_s=1, min_hold_s=3, max_hold_s=4, min_requests=400)


def test_a_coarse_bracket_counts_only_when_it_contradicts_the_precise_answer() -> None:
    fine, coarse = Bracket(296.0, 305.0), Bracket(200.0, 400.0)
    assert counted({0: fine, 1: coarse}, 0.05) == [0] and published({0: fine, 1: coarse}, 0.05) == 0
    low = Bracket(150.0, 280.0)  # a search that found 280 rps unstable: below the precise answer
    assert counted({0: fine, 1: low}, 0.05) == [0, 1] and published({0: fine, 1: low}, 0.05) == 1
    assert published({1: coarse}, 0.05) == 1 and published({}, 0.05) is None


def test_a_search_cut_before_its_precision_is_not_the_answer_of_several(tmp_path: Path) -> None:
    # the third search's budget runs out after its staircase found 400 rps unstable (200 stable): a bracket of
    # 100 %, whose 200 rps must not become the answer (the profile's, the recommendation's) of a 300 rps server
    opts = FindOptions(repeats=3, budget_s=1e5, cooldown_s=0)
    clock = FakeClock()
    budget = Budget(opts.budget_s, 0.0, clock)
    inner = timed_measure(CFG, clock, 5.0)
    starts: list[int] = []

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        seg = inner(stages, start_rps, index, purpose)
        if purpose == "staircase" and start_rps == 0.0 and stages[0].target_rps == 25.0:
            starts.append(index)  # a search begins
        if len(starts) == 3 and purpose == "staircase" and stages[0].target_rps >= 400.0:
            # what is left holds the profile, not one more stage of the search
            clock.now = opts.budget_s - profile_reserve(opts, budget, 200.0, None) - 1.0
        return seg

    results = _results(opts, 25.0)
    run = SearchRun(results, tmp_path, measure, opts, cooldown=lambda a, b=0.0: None, budget=budget)
    run_find(run, VerdictRules(), 25.0)
    s = build_summary(results)
    reps = s["search"]["repeats"]
    assert len(reps) == 3 and reps[2]["saturation_rps"] == 200.0 and reps[2]["unstable_rps"] == 400.0, reps
    assert s["saturation_rps"] >= 0.85 * 300, s["saturation_rps"]
    assert s["recommendation"]["saturation_rps"] >= 0.85 * 300
    assert s["saturation_range_rps"][0] >= 0.85 * 300
    profiled = [seg for seg in results.segments if seg.purpose == "profile"]
    assert profiled and round(profiled[-1].stages[-1].target_rps, 3) == s["saturation_rps"]  # the answer's, not 200
    assert any("search 3 of 3" in n and "precision" in n for n in s["find_notes"]), s["find_notes"]


def test_a_target_lost_under_load_gets_no_recommendation(tmp_path: Path) -> None:
    # the search brackets 300 rps, then the server dies during the profile (at half of it)
    inner = offline_measure(CFG)

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        seg = inner(stages, start_rps, index, purpose)
        if purpose == "profile":
            gone = seg.records.intended >= 1.5
            seg.records.outcome[gone] = Outcome.CONN_REFUSED
            seg.records.done[gone] = seg.records.sent[gone] + 1e-4
        return seg

    results = _results(FAST, 25.0)
    run_find(SearchRun(results, tmp_path, measure, FAST, cooldown=lambda a, b=0.0: None), VerdictRules(), 25.0)
    s = build_summary(results)
    assert s["target_lost"] is not None and s["saturation_rps"] is not None and not s["lower_bound"]
    assert s["recommendation"] is None
    assert "stopped answering" in s["recommendation_withheld"]


def test_an_answer_whose_target_was_never_held_gets_no_recommendation(tmp_path: Path) -> None:
    # the confirmation is due (the header asks for it) but the run ended before it: the budget, as a cut run
    measured = FindOptions(budget_s=1e9, cooldown_s=0, confirm=False)
    results = _results(FindOptions(budget_s=1e9, cooldown_s=0), 25.0)  # confirm: the summary expects it
    run = SearchRun(results, tmp_path, offline_measure(CFG), measured, cooldown=lambda a, b=0.0: None)
    run_find(run, VerdictRules(), 25.0)
    s = build_summary(results)
    assert s["saturation_rps"] is not None and not s["lower_bound"]
    assert s["search"]["confirmation"]["verdict"] is None
    assert s["recommendation"] is None
    assert "never held" in s["recommendation_withheld"]


def test_a_profile_stage_below_the_target_that_failed_unchecked_withholds_the_recommendation(tmp_path: Path) -> None:
    # the profile's 50 % stage loses a tenth of its answers, and no budget is left to measure it again
    opts = FindOptions(budget_s=1e9, cooldown_s=1, ramp_s=1, min_hold_s=3, max_hold_s=4, min_requests=400)
    clock = FakeClock()
    inner = timed_measure(CFG, clock, 0.0)

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        seg = inner(stages, start_rps, index, purpose)
        if purpose == "profile":
            first = seg.records.intended < stages[0].duration_s
            seg.records.outcome[first & (np.arange(len(seg.records)) % 10 == 0)] = Outcome.UNFINISHED
            clock.now = opts.budget_s - 1
        return seg

    results = _results(opts, 100.0)
    run = SearchRun(results, tmp_path, measure, opts, cooldown=lambda a, b=0.0: None,
                    budget=Budget(opts.budget_s, 0.0, clock))  # fmt: skip
    run_find(run, VerdictRules(), 100.0)
    s = build_summary(results)
    assert s["saturation_rps"] is not None and s["latency_at"][0]["verdict"] != "stable"
    assert s["recommendation"] is None
    assert "profile" in s["recommendation_withheld"] and "50%" in s["recommendation_withheld"]
