"""The saturation search against the offline twin of the simulator (known capacity c/S)."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from satpoint.analysis.search.holds import (
    RECOVERY_S,
    Budget,
    profile_stages,
    recovery_s,
    segment_overhead_s,
    slow_budget_line,
    stage_hold,
    start_rate_from_probe,
)
from satpoint.analysis.search.steps import Bracket, Measured, SearchParams, Step, bracket, next_step, replay
from satpoint.analysis.summary.build import build_summary
from satpoint.analysis.summary.model import FindSummary
from satpoint.config import FindOptions, RunConfig, VerdictRules
from satpoint.engine.schedule import due_times
from satpoint.errors import TargetUnreachable
from satpoint.metrics.records import Outcome
from satpoint.metrics.results import Results, Segment, load_results, new_header
from satpoint.plan import Stage
from satpoint.procedures.saturation import run_find, run_profile, run_search
from satpoint.procedures.search_run import SearchRun
from satpoint.servers.sim.model import LOGNORMAL_SIGMA, SimConfig
from satpoint.servers.sim.offline import simulate


def offline_measure(cfg: SimConfig, arrival: str = "constant"):  # type: ignore[no-untyped-def]
    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        due = due_times(stages, arrival, seed=index, start_rps=start_rps)  # type: ignore[arg-type]
        return Segment(index, purpose, stages, arrival, index, 0.0, simulate(due, cfg), start_rps=start_rps)

    return measure


def find_offline(tmp: Path, cfg: SimConfig, start: float, arrival: str = "constant") -> Results:
    opts = FindOptions(budget_s=1e9, cooldown_s=0)
    results = Results(new_header(RunConfig(kind="find", find=opts.describe(start, {})), {"url": "offline"}, 0.0))
    run = SearchRun(results, tmp, offline_measure(cfg, arrival), opts, cooldown=lambda s, m: None)
    history = run_search(run, VerdictRules(), start)
    assert history
    return results


@pytest.mark.parametrize(
    "slots, service_ms, dist, start",
    [
        (1, 10.0, "const", 10.0),
        (4, 10.0, "exp", 20.0),
        (8, 5.0, "lognormal", 50.0),
        (50, 20.0, "exp", 30.0),
        (2, 40.0, "lognormal", 3.0),
    ],
)
def test_saturation_estimate_is_close_to_capacity(
    tmp_path: Path, slots: int, service_ms: float, dist: str, start: float
) -> None:
    cfg = SimConfig(slots=slots, service_ms=service_ms, dist=dist, seed=slots)  # type: ignore[arg-type]
    results = find_offline(tmp_path, cfg, start)
    summary = build_summary(results)
    capacity = cfg.capacity_rps
    sat = summary["saturation_rps"]
    assert 0.85 * capacity <= sat <= 1.02 * capacity, (sat, capacity, summary["search"]["steps"])
    assert summary["precision_achieved"] <= 0.05
    assert summary["search"]["finished"] and summary["search"]["replay_matches"]
    assert summary["max_throughput_rps"] == pytest.approx(capacity, rel=0.06)


def test_search_replays_identically_from_recorded_results(tmp_path: Path) -> None:
    cfg = SimConfig(slots=4, service_ms=10.0, dist="exp", seed=2)
    results = find_offline(tmp_path, cfg, 25.0)
    run = SearchRun(results, tmp_path, offline_measure(cfg), FindOptions(cooldown_s=0), cooldown=lambda s, m: None)
    run_profile(run, build_summary(results)["saturation_rps"])
    live = build_summary(results)
    replayed = build_summary(load_results(tmp_path))
    assert json.dumps(live, sort_keys=True) == json.dumps(replayed, sort_keys=True)
    assert [s["fraction"] for s in replayed["latency_at"]] == [0.5, 0.8, 0.9, 1.0]
    rec = replayed["recommendation"]
    assert rec["target_rps_per_replica"] == pytest.approx(replayed["saturation_rps"] * 0.85, rel=1e-3)


def test_search_goes_down_when_the_first_stage_is_unstable() -> None:
    p = SearchParams(start_rps=1000)
    s = next_step([Measured(1000, "saturated")], p)
    assert s is not None and s.fresh and s.rate_rps < 1000


def test_refinement_continues_upwards_and_restarts_downwards() -> None:
    p = SearchParams(start_rps=100, precision=0.05)
    h = [Measured(100, "stable"), Measured(200, "stable"), Measured(400, "saturated")]
    s = next_step(h, p)
    assert s == Step(pytest.approx(282.84, rel=1e-3), "refine", True)  # type: ignore[arg-type]
    h.append(Measured(s.rate_rps, "stable"))
    s2 = next_step(h, p)
    assert s2 is not None and s2.rate_rps > s.rate_rps and not s2.fresh


def test_generator_limited_is_retried_once_then_stops_the_search() -> None:
    h = [Measured(100, "stable"), Measured(200, "generator_limited")]
    again = next_step(h, SearchParams())
    assert again == Step(200, "staircase", False)
    assert next_step([*h, Measured(200, "stable")], SearchParams()) == Step(400, "staircase", False)
    assert next_step([*h, Measured(200, "generator_limited")], SearchParams()) is None


def test_k8s_quantity_is_an_integer_or_millis() -> None:
    from satpoint.reports.files.k8s import quantity

    assert quantity(539.644) == "539"
    assert quantity(2.5) == "2500m"


# the answer is confirmed before it is reported ----------------------------------------------------------------
def test_a_converged_search_confirms_at_the_per_replica_target() -> None:
    p = SearchParams(start_rps=100, precision=0.05, confirm_margin=0.15)
    h = [Measured(100, "stable", "staircase"), Measured(200, "stable", "staircase")]
    h += [Measured(400, "saturated", "staircase"), Measured(390, "saturated", "refine")]
    h += [Measured(385, "stable", "refine")]
    step = next_step(h, p)
    assert step == Step(pytest.approx(385 * 0.85), "confirm", True)  # type: ignore[arg-type]
    assert step is not None
    assert next_step([*h, Measured(step.rate_rps, "stable", "confirm")], p) is None
    # a confirmation that fails contradicts the stable 385: it is measured again from idle ...
    failed = [*h, Measured(step.rate_rps, "saturated", "confirm")]
    assert next_step(failed, p) == Step(step.rate_rps, "retest", True)
    # ... and when it holds then, the two disagree: a third hold decides (2 of 3) ...
    once = [*failed, Measured(step.rate_rps, "stable", "retest")]
    assert next_step(once, p) == Step(step.rate_rps, "retest", True)
    # ... holding again, the answer stands confirmed
    assert next_step([*once, Measured(step.rate_rps, "stable", "retest")], p) is None
    # ... failing again, the target is the new lowest unstable rate
    third = next_step([*once, Measured(step.rate_rps, "saturated", "retest")], p)
    assert third is not None and third.rate_rps < step.rate_rps and third.phase == "refine"
    # folders written before the third measurement replay with the retest replacing the failure
    assert next_step(once, replace(p, majority=False)) is None
    # failing twice, it is the new lowest unstable rate: the search continues below it
    below = next_step([*failed, Measured(step.rate_rps, "saturated", "retest")], p)
    assert below is not None and below.rate_rps < step.rate_rps and below.phase == "refine"
    assert next_step(h, SearchParams(start_rps=100, precision=0.05)) is None  # no confirmation asked


def test_a_stage_that_fails_below_a_stable_rate_is_retested_before_it_lowers_the_answer() -> None:
    # the path: 602 held, 1 204 collapsed the server, and the refinement's stages failed from then on
    p = SearchParams(start_rps=301, precision=0.05)
    h = [Measured(301, "stable", "staircase"), Measured(602, "stable", "staircase")]
    h += [Measured(1204, "saturated", "staircase")]
    assert next_step(h, p) == Step(pytest.approx(math.sqrt(602 * 1204)), "refine", True)  # type: ignore[arg-type]
    # a failure above every stable rate is no contradiction: it brackets the answer as before
    h += [Measured(851.4, "saturated", "refine")]
    step = next_step(h, p)
    assert step is not None and step.phase == "refine"
    # a failure below the stable 602 (a stage after the overload) is measured again, alone from idle
    low = [Measured(301, "stable", "staircase"), Measured(602, "stable", "staircase")]
    low += [Measured(1204, "saturated", "staircase"), Measured(550, "saturated", "refine")]
    assert next_step(low, p) == Step(550, "retest", True)
    # held on the retest: one vote each way, so a third measurement decides; held again (2 of 3), the first
    # failure no longer counts and the bracket is 602-1 204 again
    tied = [*low, Measured(550, "stable", "retest")]
    assert bracket(tied) == Bracket(301, 550) and next_step(tied, p) == Step(550, "retest", True)
    assert bracket(tied, majority=False) == Bracket(602, 1204)
    held = [*tied, Measured(550, "stable", "retest")]
    assert bracket(held) == Bracket(602, 1204)
    again = next_step(held, p)
    assert again is not None and again.phase == "refine" and 602 < again.rate_rps < 1204
    # failed twice: the lowest unstable rate, as without the retest (and never a third time)
    twice = [*low, Measured(550, "saturated", "retest")]
    assert bracket(twice) == Bracket(301, 550)
    down = next_step(twice, p)
    assert down is not None and down.phase == "refine" and 301 < down.rate_rps < 550
    # limited stages and profile stages are not retested by this rule
    assert next_step([*low[:2], Measured(550, "generator_limited", "refine")], p) != Step(550, "retest", True)
    assert next_step([*low[:2], Measured(550, "saturated", "profile")], p) != Step(550, "retest", True)
    assert replay(held, p)[-1] == again


def test_client_limited_stages_say_nothing_about_the_server() -> None:
    h = [Measured(100, "stable"), Measured(200, "client_limited")]
    assert next_step(h, SearchParams()) == Step(200, "staircase", False)
    assert next_step([*h, Measured(200, "client_limited")], SearchParams()) is None


def switching_measure(before: SimConfig, after: SimConfig, switch_at: int):  # type: ignore[no-untyped-def]
    """An offline server whose capacity drops from segment ``switch_at`` on (a replica that varies)."""

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        due = due_times(stages, "constant", seed=index, start_rps=start_rps)
        cfg = before if index < switch_at else after
        return Segment(index, purpose, stages, "constant", index, 0.0, simulate(due, cfg), start_rps=start_rps)

    return measure


# the budget and a target that goes away ----------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def timed_measure(cfg: SimConfig, clock: FakeClock, drain_s: float, lose_at: int | None = None):  # type: ignore[no-untyped-def]
    """The offline measure on a fake clock: a segment costs its ramps and holds plus a drain.  From
    segment ``lose_at`` on the target is gone: every request 1.5 s into that segment is refused."""
    inner = offline_measure(cfg)

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        seg = inner(stages, start_rps, index, purpose)
        clock.now += sum(s.duration_s for s in stages) + drain_s
        if lose_at is not None and index >= lose_at:
            gone = seg.records.intended >= 1.5
            seg.records.outcome[gone] = Outcome.CONN_REFUSED
            seg.records.done[gone] = seg.records.sent[gone] + 1e-4
        return seg

    return measure


def test_an_answer_its_own_confirmation_contradicts_is_never_reported(tmp_path: Path) -> None:
    # 400 rps while the search brackets it; 280 rps from the confirmation on
    fast, slow = SimConfig(slots=4, service_ms=10.0), SimConfig(slots=4, service_ms=10.0 * 400 / 280)
    opts = FindOptions(budget_s=1e9, cooldown_s=0)
    results = Results(new_header(RunConfig(kind="find", find=opts.describe(25.0, {})), {"url": "offline"}, 0.0))
    measure = switching_measure(fast, slow, switch_at=9)
    run_find(SearchRun(results, tmp_path, measure, opts, cooldown=lambda a, b=0.0: None), VerdictRules(), 25.0)
    s = build_summary(results)
    steps = s["search"]["steps"]
    assert [x["phase"] for x in steps].count("confirm") >= 2, steps  # the first confirmation failed
    assert s["saturation_rps"] <= 280 * 1.02
    assert s["search"]["confirmation"]["verdict"] == "stable"
    target = s["recommendation"]["target_rps_per_replica"]
    below = [r for r in s["latency_at"] if r["offered_rps"] <= target * 1.001]
    assert below and all(r["verdict"] == "stable" for r in below)
    assert s["search"]["replay_matches"] and s["search"]["finished"]
    replayed = build_summary(load_results(tmp_path))
    assert json.dumps(replayed, sort_keys=True) == json.dumps(s, sort_keys=True)


def test_a_failing_profile_stage_below_the_target_sends_the_search_down(tmp_path: Path) -> None:
    fast, slow = SimConfig(slots=4, service_ms=10.0), SimConfig(slots=4, service_ms=10.0 * 400 / 250)
    opts = FindOptions(budget_s=1e9, cooldown_s=0)
    results = Results(new_header(RunConfig(kind="find", find=opts.describe(25.0, {})), {"url": "offline"}, 0.0))
    seen: list[str] = []

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        seen.append(purpose)
        cfg = slow if "profile" in seen else fast  # the server slows down when the profile starts
        due = due_times(stages, "constant", seed=index, start_rps=start_rps)
        return Segment(index, purpose, stages, "constant", index, 0.0, simulate(due, cfg), start_rps=start_rps)

    run_find(SearchRun(results, tmp_path, measure, opts, cooldown=lambda a, b=0.0: None), VerdictRules(), 25.0)
    s = build_summary(results)
    assert seen.count("profile") == 2  # profiled again for the new, lower answer
    assert s["saturation_rps"] <= 250 * 1.02
    target = s["recommendation"]["target_rps_per_replica"]
    assert all(r["verdict"] == "stable" for r in s["latency_at"] if r["offered_rps"] <= target * 1.001)
    assert s["search"]["replay_matches"]


def test_the_search_finds_a_server_that_holds_many_requests_at_once(tmp_path: Path) -> None:
    # 1000 slots x 500 ms: capacity 2000 rps; in flight at capacity = 1000 (Little's law).  A cap of 256
    # connections made an earlier version report ~490 rps; a generous cap finds the server's capacity
    cfg = SimConfig(slots=1000, service_ms=500.0)
    opts = FindOptions(budget_s=1e9, cooldown_s=0)
    results = Results(new_header(RunConfig(kind="find", find=opts.describe(100.0, {})), {"url": "offline"}, 0.0))

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        due = due_times(stages, "constant", seed=index, start_rps=start_rps)
        cap = max(256, int(max(s.target_rps for s in stages) * 2.0))  # the generator's automatic cap
        rec = simulate(due, cfg, max_inflight=cap)
        return Segment(index, purpose, stages, "constant", index, 0.0, rec, start_rps=start_rps)

    rules = VerdictRules(baseline_service_ms=500.0)
    run_search(
        SearchRun(results, tmp_path, measure, opts, cooldown=lambda a, b=0.0: None, latency_hint_s=0.5), rules, 100.0
    )
    sat = build_summary(results)["saturation_rps"]
    assert 0.85 * 2000 <= sat <= 1.02 * 2000


def test_a_fixed_small_cap_is_reported_as_client_limited_not_as_saturation(tmp_path: Path) -> None:
    cfg = SimConfig(slots=1000, service_ms=500.0)
    opts = FindOptions(budget_s=1e9, cooldown_s=0)
    results = Results(new_header(RunConfig(kind="find", find=opts.describe(100.0, {})), {"url": "offline"}, 0.0))

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        due = due_times(stages, "constant", seed=index, start_rps=start_rps)
        rec = simulate(due, cfg, max_inflight=256)
        return Segment(index, purpose, stages, "constant", index, 0.0, rec, start_rps=start_rps)

    rules = VerdictRules(baseline_service_ms=500.0)
    run_search(
        SearchRun(results, tmp_path, measure, opts, cooldown=lambda a, b=0.0: None, latency_hint_s=0.5), rules, 100.0
    )
    s = build_summary(results)
    assert s["search"]["steps"][-1]["verdict"] == "client_limited"
    assert any("client-limited" in n for n in s["find_notes"])
    assert any(w.startswith("CLIENT LIMITED") for w in s["warnings"])


def test_repeated_searches_report_the_lowest_answer_and_the_spread(tmp_path: Path) -> None:
    # a replica whose capacity differs between searches (400 rps in the first, 300 in the second)
    capacities = [SimConfig(slots=4, service_ms=10.0), SimConfig(slots=3, service_ms=10.0)]
    opts = FindOptions(budget_s=1e9, cooldown_s=0, repeats=2)
    results = Results(new_header(RunConfig(kind="find", find=opts.describe(25.0, {})), {"url": "offline"}, 0.0))
    searches = [-1]

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        if purpose == "staircase" and start_rps == 0.0 and stages[0].target_rps == 25.0:
            searches[0] += 1  # a new search starts from the start rate
        cfg = capacities[min(searches[0], 1)]
        due = due_times(stages, "constant", seed=index, start_rps=start_rps)
        return Segment(index, purpose, stages, "constant", index, 0.0, simulate(due, cfg), start_rps=start_rps)

    histories = run_find(
        SearchRun(results, tmp_path, measure, opts, cooldown=lambda a, b=0.0: None), VerdictRules(), 25.0
    )
    assert sorted(histories) == [0, 1]
    s = build_summary(results)
    low, high = s["saturation_range_rps"]
    assert 0.85 * 300 <= low <= 1.02 * 300 and 0.85 * 400 <= high <= 1.02 * 400
    assert s["saturation_rps"] == low
    # where the capacity lies as far as the searches tell: lowest answer to highest unstable rate (a sweep
    # point's bracket_rps), so it reaches above the 400 rps search's answer
    within = s["saturation_bracket_rps"]
    top = max(r["unstable_rps"] for r in s["search"]["repeats"])
    assert within == [low, top] and high < top <= 1.1 * 400
    assert [r["repeat"] for r in s["search"]["repeats"]] == [0, 1]
    assert all(r["confirmed"] for r in s["search"]["repeats"])
    assert s["latency_at"][-1]["offered_rps"] == pytest.approx(low, rel=0.01)  # profiled at the answer
    assert s["search"]["replay_matches"] and s["search"]["finished"]
    assert json.dumps(build_summary(load_results(tmp_path)), sort_keys=True) == json.dumps(s, sort_keys=True)


def find_results(opts: FindOptions, start: float) -> Results:
    return Results(new_header(RunConfig(kind="find", find=opts.describe(start, {})), {"url": "offline"}, 0.0))


def test_the_budget_covers_the_whole_find_profile_drains_and_cool_downs_included(tmp_path: Path) -> None:
    cfg = SimConfig(slots=4, service_ms=10.0, dist="exp", seed=2)  # 400 rps
    # a precision this fine takes many more stages than the budget allows
    opts = FindOptions(
        budget_s=90, precision=0.005, cooldown_s=3, ramp_s=1, min_hold_s=3, max_hold_s=4, min_requests=400
    )
    clock = FakeClock()
    cooled: list[tuple[float, float]] = []

    def cooldown(min_s: float, max_s: float) -> None:
        cooled.append((min_s, max_s))
        clock.now += min_s

    results = find_results(opts, 100.0)
    budget = Budget(opts.budget_s, clock(), clock, overhead_s=2.5)
    run_find(
        SearchRun(results, tmp_path, timed_measure(cfg, clock, drain_s=2.0), opts, cooldown=cooldown, budget=budget),
        VerdictRules(),
        100.0,
    )
    assert clock.now <= opts.budget_s, (clock.now, [s.purpose for s in results.segments])
    assert results.segments[-1].purpose == "profile"  # room was kept for it
    summary = build_summary(results)
    assert [row["fraction"] for row in summary["latency_at"]] == [0.5, 0.8, 0.9, 1.0]
    assert not summary["search"]["finished"]  # the budget ended the search, not the precision
    assert all(max_s >= min_s for min_s, max_s in cooled)


def test_no_profile_when_what_is_left_of_the_budget_cannot_hold_it(tmp_path: Path) -> None:
    cfg = SimConfig(slots=4, service_ms=10.0)
    opts = FindOptions(budget_s=20, cooldown_s=1, ramp_s=1, min_hold_s=3, max_hold_s=4, min_requests=400)
    clock = FakeClock()
    results = find_results(opts, 100.0)
    lines: list[str] = []
    clock.now = 15.0  # most of the budget is gone
    measure = timed_measure(cfg, clock, 1.0)
    run_profile(SearchRun(results, tmp_path, measure, opts, log=lines.append, budget=Budget(20, 0.0, clock)), 380.0)
    assert results.segments == [] and clock.now == 15.0
    assert any("no profile" in line for line in lines)


def test_a_target_that_stops_answering_mid_stage_ends_the_search_there(tmp_path: Path) -> None:
    cfg = SimConfig(slots=4, service_ms=10.0)
    opts = FindOptions(budget_s=1e9, cooldown_s=0, ramp_s=1, min_hold_s=3, max_hold_s=4, min_requests=400)
    clock = FakeClock()
    lines: list[str] = []
    results = find_results(opts, 50.0)
    budget = Budget(opts.budget_s, 0.0, clock)
    measure = timed_measure(cfg, clock, 0.0, lose_at=2)
    run_find(SearchRun(results, tmp_path, measure, opts, log=lines.append, budget=budget), VerdictRules(), 50.0)
    assert [s.purpose for s in results.segments] == ["staircase"] * 3  # no more stages, no profile
    assert any("stopped answering during stage 3" in line for line in lines)
    summary = build_summary(load_results(tmp_path))
    lost = summary["target_lost"]
    assert lost["segment"] == 2 and lost["stage"] == 3
    assert "stopped answering during stage 3 (200 rps)" in lost["message"]
    # the stage it died in says nothing about capacity: 200 rps is not the unstable bound
    assert [s["rate_rps"] for s in summary["search"]["steps"]] == [50.0, 100.0]
    assert summary["saturation_rps"] == 100.0 and summary["unstable_rps"] is None
    assert summary["warnings"][0] == lost["message"]
    assert FindSummary.model_validate(summary).target_lost is not None


def test_a_target_that_stops_answering_between_stages_ends_the_search(tmp_path: Path) -> None:
    cfg = SimConfig(slots=4, service_ms=10.0)
    opts = FindOptions(budget_s=1e9, cooldown_s=1, ramp_s=1, min_hold_s=3, max_hold_s=4, min_requests=400)
    clock = FakeClock()
    results = find_results(opts, 200.0)

    def cooldown(min_s: float, max_s: float) -> None:  # the cool-down's probe finds nobody
        raise TargetUnreachable("cannot reach http://127.0.0.1:1/v2/models/sim/infer: Connection refused")

    measure = timed_measure(cfg, clock, 0.0)
    run = SearchRun(results, tmp_path, measure, opts, cooldown=cooldown, budget=Budget(1e9, 0.0, clock))
    run_find(run, VerdictRules(), 200.0)
    summary = build_summary(load_results(tmp_path))
    n = len(summary["stages"])
    assert n >= 2 and summary["stages"][-1]["verdict"] != "stable"  # the search had gone down: a fresh sequence
    assert summary["target_lost"]["stage"] == n and summary["target_lost"]["segment"] is None
    assert f"stopped answering after stage {n}" in summary["target_lost"]["message"]
    assert "Connection refused" in summary["target_lost"]["message"]
    assert summary["latency_at"] == []  # no profile


def test_the_budget_stop_says_whether_anything_was_measured() -> None:
    from satpoint.analysis.search.steps import budget_stop_line

    after = budget_stop_line(60, 12, 5, 800.0, 6, 40, profile_next=True)
    assert after == "budget of 60 s reached: stopping the search (the profile comes next)"
    before = budget_stop_line(60, 58, 0, 24.4, 82, 140, profile_next=False)
    assert before.startswith("budget of 60 s (58 s left) cannot hold the first stage, 24.4 rps for 82 s")
    assert "about 140 s; give a larger --budget-s" in before


# slow servers: holds, drains and budget that fit their latency ------------------------------------------------
def slow_find(tmp: Path, cfg: SimConfig, timeout_s: float = 30.0) -> tuple[dict, list[str], float]:  # type: ignore[type-arg]
    """``find`` against an offline slow server as ``search_target`` runs it: the probe's median latency sets
    the first rate, the holds and the drain; every segment draws its own service times; requests slower
    than the timeout time out, those still unanswered at the end of the drain are given up.  Returns the
    summary, what it said and the time it took on the fake clock."""
    median_s = cfg.service_ms / 1000 * (np.exp(-(LOGNORMAL_SIGMA**2) / 2) if cfg.dist == "lognormal" else 1.0)
    drain_s = max(5.0, min(timeout_s, 3 * median_s))
    clock = FakeClock()

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        due = due_times(stages, "constant", seed=index, start_rps=start_rps)
        rec = simulate(due, replace(cfg, seed=cfg.seed * 1000 + index))
        end = sum(st.duration_s for st in stages)
        late = rec.done - rec.intended > timeout_s
        rec.outcome[late] = Outcome.TIMEOUT
        rec.done[late] = rec.intended[late] + timeout_s
        gave_up = ~late & (rec.done > end + drain_s)
        rec.outcome[gave_up] = Outcome.UNFINISHED
        rec.done[gave_up] = end + drain_s
        clock.now += min(float(np.nanmax(rec.done)), end + drain_s) + 0.7
        return Segment(index, purpose, stages, "constant", index, 0.0, rec, start_rps=start_rps)

    def cooldown(min_s: float, max_s: float) -> None:
        clock.now += min_s

    opts = FindOptions(budget_s=1e9)
    start = start_rate_from_probe(median_s)
    lines: list[str] = []
    results = find_results(opts, start)
    budget = Budget(opts.budget_s, 0.0, clock, overhead_s=drain_s + 0.7)
    run = SearchRun(
        results, tmp, measure, opts, log=lines.append, cooldown=cooldown, budget=budget, latency_hint_s=median_s
    )
    run_find(run, VerdictRules(baseline_service_ms=median_s * 1000), start)
    return build_summary(results), lines, clock.now


@pytest.mark.parametrize(
    "slots, service_ms, dist, seed",
    [(40, 2500.0, "lognormal", 1), (40, 2500.0, "lognormal", 2), (40, 2500.0, "lognormal", 3), (8, 8000.0, "const", 0)],
)
def test_a_slow_server_is_found_at_its_capacity_and_its_profile_is_stable(
    tmp_path: Path, slots: int, service_ms: float, dist: str, seed: int
) -> None:
    # 40 slots x lognormal 2.5 s (16 rps) once reported at 0.31x: a 50 % profile stage judged saturated by
    # completions counted inside a window a few latencies long sent a bracketed search down
    cfg = SimConfig(slots=slots, service_ms=service_ms, dist=dist, seed=seed)  # type: ignore[arg-type]
    s, _, _ = slow_find(tmp_path, cfg)
    capacity = cfg.capacity_rps
    assert 0.85 * capacity <= s["saturation_rps"] <= 1.02 * capacity, s["search"]["steps"]
    target = s["recommendation"]["target_rps_per_replica"]
    below = [r for r in s["latency_at"] if r["offered_rps"] <= target * 1.001]
    assert len(below) >= 2 and all(r["verdict"] == "stable" for r in below), s["latency_at"]
    assert s["search"]["finished"] and s["search"]["replay_matches"]


def test_a_slow_servers_holds_drain_and_budget_fit_its_latency() -> None:
    opts = FindOptions()
    assert start_rate_from_probe(0.01) == 25.0 and start_rate_from_probe(0.2) == 5.0  # fast servers as before
    assert start_rate_from_probe(8.0) == 1.0  # 8 in flight, not 40
    assert stage_hold(opts, 100.0, 0.01) == 15.0  # a fast server holds what its requests need
    hold = stage_hold(opts, 1.0, 8.0)
    assert hold >= 6 * 8.0  # fill-up (one latency), then a window of several latencies
    assert all(st.hold_s >= 6 * 8.0 for st in profile_stages(opts, 1.0, 8.0))  # the profile holds as long
    assert stage_hold(opts, 16.0, 2.2) == pytest.approx(12 * 2.2)  # few requests: up to 12 latencies
    assert stage_hold(opts, 16.0, 4.0) == 2 * opts.max_hold_s  # ... at most twice --max-hold
    budget = Budget(270.0, 0.0, overhead_s=24.7)
    line = slow_budget_line(opts, budget, 1.0, 8.0)
    assert line is not None and "one request takes 8.0 s" in line and "give --budget-s" in line
    need = float(line.rsplit(" ", 1)[1])
    assert slow_budget_line(replace(opts, budget_s=need), budget, 1.0, 8.0) is None  # enough: nothing said
    assert slow_budget_line(opts, Budget(270.0, 0.0, overhead_s=5.7), 25.0, 0.01) is None  # not slow


def test_the_confirmation_never_holds_shorter_than_the_search(tmp_path: Path) -> None:
    # 8 s a request: stages hold 48 s; "twice the hold, at most twice --max-hold" once made it 30 s
    s, _, _ = slow_find(tmp_path, SimConfig(slots=8, service_ms=8000.0))
    rate = s["search"]["confirmation"]["rate_rps"]
    confirms = [st for st in s["stages"] if abs(st["target_rps"] - rate) <= 1e-3 * rate]
    assert confirms and all(st["hold_s"] >= 48.0 for st in confirms)
    assert all(st["hold_s"] >= 48.0 for st in s["stages"])


def test_one_marginal_profile_stage_is_measured_again_before_it_overturns_the_answer(tmp_path: Path) -> None:
    cfg = SimConfig(slots=4, service_ms=10.0)  # 400 rps
    opts = FindOptions(budget_s=1e9, cooldown_s=0)
    results = find_results(opts, 25.0)
    inner = offline_measure(cfg)
    seen: list[str] = []

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        seen.append(purpose)
        seg = inner(stages, start_rps, index, purpose)
        if purpose == "profile" and seen.count("profile") == 1:
            # the 50 % stage of the first profile loses a tenth of its answers (a hiccup, once)
            first = (seg.records.intended > stages[0].ramp_s + 3) & (seg.records.intended < stages[0].duration_s)
            lost = first & (np.arange(len(seg.records)) % 10 == 0)
            seg.records.outcome[lost] = Outcome.UNFINISHED
        return seg

    lines: list[str] = []
    run_find(
        SearchRun(results, tmp_path, measure, opts, log=lines.append, cooldown=lambda a, b=0.0: None),
        VerdictRules(),
        25.0,
    )
    s = build_summary(results)
    assert seen.count("recheck") == 1 and seen.count("profile") == 1  # measured again, and it held
    assert s["latency_at"][0]["verdict"] == "saturated"  # the profile shows what it measured ...
    assert 0.85 * 400 <= s["saturation_rps"] <= 1.02 * 400  # ... and the answer stands
    profile_steps = [x for x in s["search"]["steps"] if x["phase"] == "profile"]
    assert profile_steps and all(x["verdict"] == "stable" for x in profile_steps)  # the recheck's verdict counts
    assert any("measuring it again" in line for line in lines)
    assert s["search"]["replay_matches"] and s["search"]["finished"]
    assert json.dumps(build_summary(load_results(tmp_path)), sort_keys=True) == json.dumps(s, sort_keys=True)


def test_without_budget_to_measure_a_profile_stage_again_the_answer_stands(tmp_path: Path) -> None:
    cfg = SimConfig(slots=4, service_ms=10.0)
    opts = FindOptions(budget_s=1e9, cooldown_s=1, ramp_s=1, min_hold_s=3, max_hold_s=4, min_requests=400)
    clock = FakeClock()
    results = find_results(opts, 100.0)
    inner = timed_measure(cfg, clock, 0.0)

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        seg = inner(stages, start_rps, index, purpose)
        if purpose == "profile":  # the profile's 50 % stage loses a tenth of its answers, and the budget is gone
            first = seg.records.intended < stages[0].duration_s
            seg.records.outcome[first & (np.arange(len(seg.records)) % 10 == 0)] = Outcome.UNFINISHED
            clock.now = opts.budget_s - 1
        return seg

    lines: list[str] = []
    run = SearchRun(
        results, tmp_path, measure, opts, log=lines.append, cooldown=lambda a, b=0.0: None,
        budget=Budget(opts.budget_s, 0.0, clock),
    )  # fmt: skip
    run_find(run, VerdictRules(), 100.0)
    s = build_summary(results)
    assert [seg.purpose for seg in results.segments].count("recheck") == 0
    assert any("the answer stands" in line for line in lines)
    assert 0.85 * 400 <= s["saturation_rps"] <= 1.02 * 400
    assert s["search"]["replay_matches"]


def test_a_segments_cost_counts_the_observers_scrapes() -> None:
    from satpoint.config import LoadOptions
    from satpoint.observe.agent import SCRAPE_ROUND_S

    # each segment's two marks scrape every --metrics-url endpoint (a round of up to SCRAPE_ROUND_S each)
    plain = segment_overhead_s(LoadOptions())
    assert segment_overhead_s(LoadOptions(), scrapes=True) == pytest.approx(plain + 2 * SCRAPE_ROUND_S)


# one server, one answer: a stage that collapsed is measured again before it decides ----------------------------
def test_a_collapsed_stage_just_above_the_answer_is_retested_and_the_answer_holds(tmp_path: Path) -> None:
    # 400 rps; the path of a healthy search, then the same search on a server that collapses (to 250 rps,
    # as MLServer does after a stall near its capacity) during the stage that set its answer
    healthy, collapsed = SimConfig(slots=4, service_ms=10.0), SimConfig(slots=4, service_ms=16.0)
    clean = find_offline(tmp_path / "clean", healthy, 30.0)
    steps = build_summary(clean)["search"]["steps"]
    answer = build_summary(clean)["saturation_rps"]
    k = next(i for i, x in enumerate(steps) if x["rate_rps"] == pytest.approx(answer))
    assert answer > 0.9 * 400 and steps[k]["phase"] == "refine"

    def run(retest: bool, out: Path) -> dict:  # type: ignore[type-arg]
        opts = FindOptions(budget_s=1e9, cooldown_s=0, retest=retest)
        results = Results(new_header(RunConfig(kind="find", find=opts.describe(30.0, {})), {"url": "offline"}, 0.0))

        def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
            due = due_times(stages, "constant", seed=index, start_rps=start_rps)
            cfg = collapsed if index == k else healthy
            return Segment(index, purpose, stages, "constant", index, 0.0, simulate(due, cfg), start_rps=start_rps)

        run_search(SearchRun(results, out, measure, opts, cooldown=lambda a, b=0.0: None), VerdictRules(), 30.0)
        return build_summary(results)

    before = run(False, tmp_path / "before")
    assert before["saturation_rps"] < answer  # one collapse lowered the answer ...
    after = run(True, tmp_path / "after")
    phases = [x["phase"] for x in after["search"]["steps"]]
    # measured again, it held: one vote each way, and a third measurement held too (2 of 3)
    assert phases.count("retest") == 2, after["search"]["steps"]
    assert after["saturation_rps"] >= answer * 0.999  # ... the retest of it gives the healthy path's answer
    assert after["search"]["replay_matches"] and after["search"]["finished"]
    assert json.dumps(build_summary(load_results(tmp_path / "after")), sort_keys=True) == json.dumps(
        after, sort_keys=True
    )


def test_a_stage_past_the_capacity_that_answered_at_it_is_not_retested() -> None:
    p = SearchParams(start_rps=100, precision=0.05)
    h = [Measured(100, "stable", "staircase", 100), Measured(200, "stable", "staircase", 200)]
    h += [Measured(400, "saturated", "staircase", 300), Measured(283, "saturated", "refine", 280)]
    h += [Measured(238, "stable", "refine", 238), Measured(259, "stable", "refine", 259)]
    h += [Measured(271, "stable", "refine", 271)]
    assert next_step(h, p) is None  # 283 answered 280/s, about the 271 held: past the capacity, not collapsed
    collapsed = [*h[:3], Measured(283, "saturated", "refine", 150), *h[4:]]
    assert next_step(collapsed, p) == Step(283, "retest", True)
    assert next_step([*collapsed, Measured(283, "saturated", "retest", 150)], p) is None  # twice: it stands
    assert next_step(collapsed, replace(p, retest=False)) is None


def test_the_cool_down_is_longer_after_an_overload_and_before_a_retest() -> None:
    opts = FindOptions(cooldown_s=2.0)
    assert recovery_s(opts, "refine", "stable") == 2.0
    assert recovery_s(opts, "refine", "saturated") == recovery_s(opts, "retest", "stable") == RECOVERY_S > 2.0
    assert recovery_s(replace(opts, cooldown_s=0.0), "retest", "saturated") == 0.0  # no cool-down asked
