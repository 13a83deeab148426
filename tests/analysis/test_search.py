"""The saturation search against the offline twin of the simulator (known capacity c/S)."""

import json
from pathlib import Path

import pytest

from satpoint.analysis.search import Measured, SearchParams, Step, next_step
from satpoint.analysis.summary import build_summary
from satpoint.config import FindOptions, RunConfig, VerdictRules
from satpoint.engine.schedule import due_times
from satpoint.metrics.results import Results, Segment, load_results, new_header
from satpoint.plan import Stage
from satpoint.saturation import run_profile, run_search
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
