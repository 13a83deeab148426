"""A replayed trace is judged on every second of it: a burst at a stage's start is in that stage's figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from satpoint.analysis.summary.build import build_summary
from satpoint.config import RunConfig
from satpoint.metrics.results import Results, Segment, append_segment, load_results, new_header, write_header
from satpoint.plan import TRACE_ARRIVAL
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate
from satpoint.traffic.queue_sim import fifo_sojourn
from satpoint.traffic.trace_plan import stages_for

T0 = 1_700_000_000.0


def burst_at_each_stage_start(out: Path) -> np.ndarray:
    """30 s of replay in 10 s stages: 200 rps, and 1 000 rps in the first second of every stage, through an
    offline 4 x 10 ms server (400 rps): each burst leaves a backlog that drains in the next seconds."""
    rng = np.random.default_rng(3)
    t = np.arange(0.0, 30.0, 0.0005)
    rate = np.where((t % 10.0) < 1.0, 1000.0, 200.0)
    due = np.sort(t[rng.random(len(t)) < rate * 0.0005])
    stages = stages_for(due, 30.0, 10.0)
    config = {"mode": "open_loop", "rules": {"max_error_rate": 0.01}, "load": {"procs": 1, "max_inflight": 4096}}
    target = {"url": "http://sim.invalid:8080", "model": "sim", "protocol": "rest"}
    results = Results(new_header(RunConfig.from_header({"kind": "run", "config": config}), target, T0))
    results.header["trace"] = {"path": "trace.csv", "speed": 1.0, "replayed": len(due), "run_s": 30.0}
    write_header(out, results)
    rec = simulate(due, SimConfig(slots=4, service_ms=10.0, dist="const", seed=1))
    append_segment(out, results, Segment(0, "run", stages, TRACE_ARRIVAL, 0, T0, rec))
    return due


def test_a_burst_at_a_stage_start_is_judged_with_its_stage(tmp_path: Path) -> None:
    due = burst_at_each_stage_start(tmp_path / "run")
    summary = build_summary(load_results(tmp_path / "run"))
    queue = fifo_sojourn(due, np.full(len(due), 0.010), 4)
    assert len(summary["stages"]) == 3
    for k, st in enumerate(summary["stages"]):
        # the window is the whole stage: its first second (the burst) included
        assert st["window_start_s"] == k * 10.0 and st["window_end_s"] == (k + 1) * 10.0
        part = queue[(due >= 10.0 * k) & (due < 10.0 * (k + 1))]
        assert st["requests"] == len(part)
        expected = float(np.percentile(part, 99)) * 1000
        assert expected > 500  # the burst queued
        assert abs(st["latency_ms"]["p99"] - expected) <= 0.15 * expected, (st["latency_ms"], expected)


def test_a_trace_in_flight_cap_is_sized_from_its_busiest_second() -> None:
    from types import SimpleNamespace

    from satpoint.config import LoadOptions
    from satpoint.plan import Stage
    from satpoint.procedures.session import planned_inflight

    # one 60 s stage at 50 rps on average, 2 000 of its requests in one second
    due = np.sort(np.concatenate([np.linspace(0.0, 60.0, 1000, endpoint=False), 30.0 + np.arange(2000) / 2000]))
    target = SimpleNamespace(latency_hint_s=0.01)
    stages = [Stage(len(due) / 60.0, 0.0, 60.0)]
    assert planned_inflight(target, LoadOptions(), stages, 0.0) == 256  # type: ignore[arg-type]
    assert planned_inflight(target, LoadOptions(), stages, 0.0, due) >= 2000 * 2  # type: ignore[arg-type]
