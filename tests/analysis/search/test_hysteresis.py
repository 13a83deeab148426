"""find --hysteresis offline: the step-down plan, the step states and figures on queue twins whose collapse
and recovery points are known, and the recommendation it lowers."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from satpoint.analysis.search.holds import Budget
from satpoint.analysis.search.hysteresis import (
    FLOOR_FRACTION,
    HYSTERESIS_PURPOSE,
    OVERLOAD_FACTOR,
    STEP_RATIO,
    STEPS_MAX_S,
    classify,
    hysteresis_stages,
    lower_recommendation,
)
from satpoint.analysis.search.steps import Measured
from satpoint.analysis.summary.build import build_summary
from satpoint.analysis.summary.model import parse_summary
from satpoint.config import FindOptions, RunConfig, VerdictRules
from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import Results, Segment, load_results, new_header
from satpoint.plan import FloatArray, Stage
from satpoint.procedures.saturation import run_find
from satpoint.procedures.saturation_hysteresis import hysteresis_reserve, run_hysteresis
from satpoint.procedures.search_run import Measure, SearchRun

T0 = 1_700_000_000.0
SLOTS, SERVICE_S = 4, 0.020  # capacity 200 rps
HIGH, LOW, FACTOR = 40, 4, 2.5  # degraded: 80 rps


def queue_twin(due: FloatArray, metastable: bool) -> Records:
    """A FIFO server with ``SLOTS`` slots of ``SERVICE_S``; metastable: a service that starts while more than
    ``HIGH`` requests wait takes ``FACTOR`` times longer, until fewer than ``LOW`` wait."""
    rec = Records.empty(np.asarray(due, dtype=np.float64))
    rec.sent[:] = rec.intended
    waiting: deque[int] = deque()
    running: list[tuple[float, int]] = []
    degraded = False
    n, i = len(due), 0
    while i < n or running or waiting:
        t_arr = float(due[i]) if i < n else np.inf
        t_done = running[0][0] if running else np.inf
        if t_done <= t_arr:
            t, _ = heapq.heappop(running)
        else:
            t = t_arr
            waiting.append(i)
            i += 1
        if len(waiting) > HIGH and metastable:
            degraded = True
        while waiting and len(running) < SLOTS:
            j = waiting.popleft()
            end = t + SERVICE_S * (FACTOR if degraded else 1.0)
            rec.done[j] = end
            heapq.heappush(running, (end, j))
        if len(waiting) < LOW:
            degraded = False
    rec.outcome[:] = Outcome.OK
    rec.status[:] = 200
    return rec


def twin_measure(metastable: bool) -> Measure:
    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        due = due_times(stages, "constant", index, start_rps, descending=purpose == HYSTERESIS_PURPOSE)
        seg = Segment(index, purpose, stages, "constant", index, T0 + index, queue_twin(due, metastable))
        seg.start_rps = start_rps
        return seg

    return measure


OPTS = FindOptions(
    budget_s=1e9, cooldown_s=0, min_requests=400, min_hold_s=3.0, max_hold_s=4.0, ramp_s=1.0, peak_rps=1000.0
)


def find_with_hysteresis(out: Path, metastable: bool) -> dict:  # type: ignore[type-arg]
    opts = OPTS.__class__(**{**OPTS.__dict__, "hysteresis": True})
    config = {"mode": "open_loop", "rules": {}, "find": opts.describe(25.0, {}), "load": {"procs": 1}}
    results = Results(new_header(RunConfig.from_header({"kind": "find", "config": config}), {"model": "twin"}, T0))

    def no_cooldown(min_s: float, max_s: float) -> None:
        return None

    run = SearchRun(results, out, twin_measure(metastable), opts, cooldown=no_cooldown)
    histories = run_find(run, VerdictRules(), 25.0)
    seg = run_hysteresis(run, histories)
    assert seg is not None and seg.purpose == HYSTERESIS_PURPOSE
    return build_summary(load_results(out))  # offline, from the folder (as analyze and report do)


def test_the_plan_overloads_then_steps_down_geometrically_without_a_ramp() -> None:
    stages = hysteresis_stages(FindOptions(), 200.0)
    over, steps = stages[0], stages[1:]
    assert over.target_rps == pytest.approx(OVERLOAD_FACTOR * 200) and over.ramp_s == FindOptions().ramp_s
    assert all(s.ramp_s == 0 for s in steps)
    rates = [s.target_rps for s in steps]
    assert rates[0] == pytest.approx(STEP_RATIO * 200)
    assert all(b == pytest.approx(a * STEP_RATIO) for a, b in itertools.pairwise(rates))
    assert FLOOR_FRACTION * 200 <= rates[-1] < FLOOR_FRACTION * 200 / STEP_RATIO
    assert sum(s.hold_s for s in steps) <= STEPS_MAX_S + 0.01 * len(steps)  # holds rounded to 10 ms
    assert min(s.hold_s for s in steps) >= 3.0
    # the budget it reserves covers it
    budget = Budget(1e9, 0.0, overhead_s=1.0)
    assert hysteresis_reserve(FindOptions(hysteresis=True), budget, 200.0, None) >= budget.stage_cost(stages)
    assert hysteresis_reserve(FindOptions(), budget, 200.0, None) == 0.0


@pytest.mark.parametrize(
    "args, state",
    [
        ((100.0, 5.0, 80.0, 2.0, None, None), "overloaded"),  # the queue grows
        ((100.0, -5.0, 80.0, 2.0, None, None), "draining"),  # shrinks, latency still high
        ((100.0, 0.1, 80.0, 2.0, None, None), "overloaded"),  # neither: stuck high
        ((100.0, -5.0, 3.0, 2.0, None, None), "recovered"),  # latency back within 2 x
        ((100.0, 0.0, 6.5, 2.0, None, None), "recovered"),  # ... or within the reference + 5 ms
        ((100.0, 0.0, 3.0, 2.0, 2000.0, 1500.0), "draining"),  # latency back, CPU per request not yet
        ((100.0, 0.0, 3.0, 2.0, 1600.0, 1500.0), "recovered"),
    ],
)
def test_a_step_is_classified_by_its_queue_latency_and_cpu(args: tuple, state: str) -> None:  # type: ignore[type-arg]
    assert classify(*args)[0] == state


def test_a_plain_server_keeps_its_goodput_and_recovers_just_under_its_capacity(tmp_path: Path) -> None:
    s = find_with_hysteresis(tmp_path, metastable=False)
    sat, h = s["saturation_rps"], s["hysteresis"]
    assert 180 <= sat <= 200
    assert h["overloaded"] and h["complete"] and h["metastable"] is False
    assert h["collapse_rps"] == pytest.approx(OVERLOAD_FACTOR * sat, rel=1e-3)
    assert h["goodput_share"] == pytest.approx(200 / sat, rel=0.05)  # it completes at its capacity
    assert h["recovery_rps"] == pytest.approx(STEP_RATIO * sat, rel=1e-3)  # the first step under S drains
    assert [st["state"] for st in h["steps"]][:2] == ["overloaded", "draining"]
    assert h["steps"][-1]["state"] == "recovered"
    assert s["recommendation"]["lowered_by"] is None
    assert s["recommendation"]["target_rps_per_replica"] == pytest.approx(0.85 * sat, rel=1e-3)
    parse_summary(s)  # the typed model knows every field


def test_a_metastable_server_collapses_and_recovers_only_at_its_degraded_capacity(tmp_path: Path) -> None:
    s = find_with_hysteresis(tmp_path, metastable=True)
    sat, h = s["saturation_rps"], s["hysteresis"]
    degraded = SLOTS / (SERVICE_S * FACTOR)  # 80 rps
    assert h["overloaded"] and h["metastable"] is True
    assert h["overload_throughput_rps"] == pytest.approx(degraded, rel=0.10)
    assert h["goodput_share"] == pytest.approx(degraded / sat, rel=0.10)
    assert h["recovery_rps"] == pytest.approx(degraded, rel=0.10)
    assert h["recovery_rps"] <= degraded  # it drains only below what it does when degraded
    over = [st for st in h["steps"] if st["rate_rps"] > h["recovery_rps"]]
    assert all(st["state"] == "overloaded" for st in over)
    assert "metastable" in h["explanation"]
    rec = s["recommendation"]
    assert rec["lowered_by"] == "hysteresis"
    assert rec["target_rps_per_replica_unlowered"] == pytest.approx(0.85 * sat, rel=1e-3)
    assert rec["target_rps_per_replica"] == pytest.approx(0.85 * h["recovery_rps"], rel=1e-3)
    assert rec["replicas"] == int(np.ceil(1000.0 / rec["target_rps_per_replica"]))
    assert rec["replicas_unlowered"] < rec["replicas"]
    assert any("lowered" in n for n in s["find_notes"])


def _block(overloaded: bool, recovery: float | None, complete: bool = True) -> dict:  # type: ignore[type-arg]
    return {"overloaded": overloaded, "recovery_rps": recovery, "complete": complete, "lowest_step_rps": 60.0}


def test_the_recommendation_is_lowered_only_when_recovery_is_below_the_target() -> None:
    rec: dict[str, Any] = {"margin": 0.15, "saturation_rps": 200.0, "target_rps_per_replica": 170.0}
    rec |= {"peak_rps": 1000.0, "replicas": 6, "min_rps": None, "min_replicas": None}
    kept = lower_recommendation(rec, _block(True, 190.0), 1000.0, None)
    assert kept is not None and kept["target_rps_per_replica"] == 170.0 and kept["lowered_by"] is None
    assert lower_recommendation(rec, _block(False, 80.0), 1000.0, None)["lowered_by"] is None  # type: ignore[index]
    low = lower_recommendation(rec, _block(True, 100.0), 1000.0, None)
    assert low is not None
    assert low["target_rps_per_replica"] == 85.0 and low["replicas"] == 12
    assert low["target_rps_per_replica_unlowered"] == 170.0 and low["replicas_unlowered"] == 6
    # never drained down to its lowest step: that step's rate is an upper bound, and it is used
    never = lower_recommendation(rec, _block(True, None), 1000.0, None)
    assert never is not None and never["target_rps_per_replica"] == pytest.approx(51.0)
    # cut short before draining: nothing is known, nothing is lowered
    assert lower_recommendation(rec, _block(True, None, complete=False), 1000.0, None)["lowered_by"] is None  # type: ignore[index]


def test_no_hysteresis_without_the_budget_for_it(tmp_path: Path) -> None:
    config = {"mode": "open_loop", "rules": {}, "find": OPTS.describe(25.0, {}), "load": {"procs": 1}}
    results = Results(new_header(RunConfig.from_header({"kind": "find", "config": config}), {"model": "twin"}, T0))
    lines: list[str] = []
    run = SearchRun(
        results, tmp_path, twin_measure(False), OPTS, log=lines.append, budget=Budget(30.0, 0.0, lambda: 0.0)
    )
    assert run_hysteresis(run, {0: [Measured(200.0, "stable", "staircase")]}) is None
    assert not results.segments and "no hysteresis sequence" in lines[-1]


def test_with_default_options_and_the_planned_budget_the_search_brackets_before_the_sequence(tmp_path: Path) -> None:
    # issue 33: the hysteresis and profile reserves left the search three stable staircase stages, and the
    # sequence then overloaded from a quarter of the capacity; planned, the search brackets the capacity first
    from dataclasses import replace

    from satpoint.analysis.search.budget_plan import plan_budget

    opts = FindOptions(hysteresis=True)
    overhead, START = 6.0, 0.25 / SERVICE_S  # the probe's first rate: a quarter of one slot's
    plan = plan_budget(opts, Budget(opts.budget_s, 0.0, overhead_s=overhead), START, SERVICE_S)
    opts = replace(opts, budget_s=plan.budget_s)
    now = [0.0]
    inner = twin_measure(True)

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        now[0] += sum(s.duration_s for s in stages) + overhead
        return inner(stages, start_rps, index, purpose)

    def cooldown(min_s: float, max_s: float) -> None:
        now[0] += min_s

    config = {"mode": "open_loop", "rules": {}, "find": opts.describe(START, {}), "load": {"procs": 1}}
    results = Results(new_header(RunConfig.from_header({"kind": "find", "config": config}), {"model": "twin"}, T0))
    budget = Budget(opts.budget_s, 0.0, lambda: now[0], overhead_s=overhead)
    run = SearchRun(results, tmp_path, measure, opts, cooldown=cooldown, budget=budget, plan=plan)
    assert run_hysteresis(run, run_find(run, VerdictRules(), START)) is not None
    s = build_summary(load_results(tmp_path))
    capacity, degraded = SLOTS / SERVICE_S, SLOTS / (SERVICE_S * FACTOR)
    assert not s["lower_bound"] and 0.85 * capacity <= s["saturation_rps"] <= 1.02 * capacity, s["search"]
    h = s["hysteresis"]
    assert h["collapse_rps"] == pytest.approx(OVERLOAD_FACTOR * s["saturation_rps"])
    assert h["recovery_rps"] == pytest.approx(degraded, rel=0.15)
    assert now[0] <= opts.budget_s
