"""The saturation search against the offline twin of the simulator (known capacity c/S)."""

import json
from pathlib import Path

import pytest

from satpoint.analysis.search import Measured, SearchParams, Step, next_step
from satpoint.analysis.summary import build_summary
from satpoint.analysis.summary_model import FindSummary
from satpoint.config import FindOptions, RunConfig, VerdictRules
from satpoint.engine.schedule import due_times
from satpoint.errors import TargetUnreachable
from satpoint.metrics.records import Outcome
from satpoint.metrics.results import Results, Segment, load_results, new_header
from satpoint.plan import Stage
from satpoint.saturation import Budget, run_profile, run_search, search_and_profile
from satpoint.servers.offline import simulate
from satpoint.servers.sim_model import SimConfig


def offline_measure(cfg: SimConfig, arrival: str = "constant"):  # type: ignore[no-untyped-def]
    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        due = due_times(stages, arrival, seed=index, start_rps=start_rps)  # type: ignore[arg-type]
        return Segment(index, purpose, stages, arrival, index, 0.0, simulate(due, cfg), start_rps=start_rps)

    return measure


def find_offline(tmp: Path, cfg: SimConfig, start: float, arrival: str = "constant") -> Results:
    opts = FindOptions(budget_s=1e9, cooldown_s=0)
    results = Results(new_header(RunConfig(kind="find", find=opts.describe(start, {})), {"url": "offline"}, 0.0))
    history = run_search(
        results, tmp, offline_measure(cfg, arrival), opts, VerdictRules(), start, cooldown=lambda s, m: None
    )
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
    run_profile(
        results,
        tmp_path,
        offline_measure(cfg),
        FindOptions(cooldown_s=0),
        build_summary(results)["saturation_rps"],
        cooldown=lambda s, m: None,
    )
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
    from satpoint.reports.k8s import quantity

    assert quantity(539.644) == "539"
    assert quantity(2.5) == "2500m"


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
    search_and_profile(
        results,
        tmp_path,
        timed_measure(cfg, clock, drain_s=2.0),
        opts,
        VerdictRules(),
        100.0,
        budget,
        cooldown=cooldown,
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
    run_profile(
        results, tmp_path, timed_measure(cfg, clock, 1.0), opts, 380.0, log=lines.append, budget=Budget(20, 0.0, clock)
    )
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
    search_and_profile(results, tmp_path, measure, opts, VerdictRules(), 50.0, budget, log=lines.append)
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
    search_and_profile(
        results, tmp_path, measure, opts, VerdictRules(), 200.0, Budget(1e9, 0.0, clock), cooldown=cooldown
    )
    summary = build_summary(load_results(tmp_path))
    n = len(summary["stages"])
    assert n >= 2 and summary["stages"][-1]["verdict"] != "stable"  # the search had gone down: a fresh sequence
    assert summary["target_lost"]["stage"] == n and summary["target_lost"]["segment"] is None
    assert f"stopped answering after stage {n}" in summary["target_lost"]["message"]
    assert "Connection refused" in summary["target_lost"]["message"]
    assert summary["latency_at"] == []  # no profile
