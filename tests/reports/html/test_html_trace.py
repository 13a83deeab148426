"""A replayed trace's report: the summary's queue prediction wired through ``build_summary`` and the HTML
section (arrivals against sent, latency with the bursts marked, measured against predicted)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from satpoint.analysis.summary.build import build_summary
from satpoint.config import RunConfig
from satpoint.metrics.results import Results, Segment, append_segment, load_results, new_header, write_header
from satpoint.plan import TRACE_ARRIVAL
from satpoint.reports.html.report import load_folders, render_report
from satpoint.reports.html.trace import bursts
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate
from satpoint.traffic.trace_plan import stages_for

T0 = 1_700_000_000.0


def make_trace_run(out: Path, slots: int | None) -> None:
    """20 s of replay: 150 rps with 1 s bursts of 600 rps every 5 s, through an offline 4 x 10 ms server."""
    rng = np.random.default_rng(7)
    t = np.arange(0.0, 20.0, 0.001)
    rate = np.where((t % 5.0) >= 4.0, 600.0, 150.0)
    due = np.sort(t[rng.random(len(t)) < rate * 0.001])
    stages = stages_for(due, 20.0, 10.0)
    config = {"mode": "open_loop", "rules": {"max_error_rate": 0.01}, "load": {"procs": 1, "max_inflight": 512}}
    target = {"url": "http://sim.invalid:8080", "model": "sim", "protocol": "rest"}
    results = Results(new_header(RunConfig.from_header({"kind": "run", "config": config}), target, T0))
    results.header["trace"] = {
        "path": "trace.csv",
        "speed": 2.0,
        "window_start": "2026-01-01T00:00:00.000Z",
        "window_end": "2026-01-01T00:00:40.000Z",
        "replayed": len(due),
        "run_s": 20.0,
        "server_slots": slots,
    }
    write_header(out, results)
    rec = simulate(due, SimConfig(slots=4, service_ms=10.0, dist="const", seed=1))
    append_segment(out, results, Segment(0, "run", stages, TRACE_ARRIVAL, 0, T0, rec))


def test_bursts_are_the_seconds_well_above_their_surroundings() -> None:
    due = np.full(120, 100.0)
    due[40:43] = 300.0
    due[90] = 140.0  # not 1.5x
    assert bursts(due, 1.0) == [(40.0, 43.0)]
    assert bursts(np.zeros(5), 1.0) == []


def test_the_summary_predicts_each_stage_and_the_report_draws_the_trace(tmp_path: Path) -> None:
    out = tmp_path / "trace-run"
    make_trace_run(out, slots=None)
    summary = build_summary(load_results(out))
    pred = summary["trace"]["prediction"]
    assert pred["slots"] == 4 and pred["slots_source"] == "busy_throughput"
    assert len(pred["stages"]) == len(summary["stages"]) == 2
    for row, st in zip(pred["stages"], summary["stages"], strict=True):
        assert row["measured_ms"]["p99"] == st["latency_ms"]["p99"]
        assert row["measured_ms"]["p99"] > 30  # the bursts queued
        assert row["verdict"] == "simple_queue", row  # the offline server is a simple queue
    page = render_report(load_folders([out]))
    assert '<a href="#trace">replayed trace</a>' in page
    for key in ("arrivals", "latency", "pred"):
        assert f'id="trace-{key}-0"' in page
    assert 'id="trace-speed-0"' not in page  # no find --trace around it
    assert page.count("behaves as a simple queue") >= 2
    assert "x0" in page and "burst" in page  # the bursts are shaded and named


def test_given_slots_are_recorded(tmp_path: Path) -> None:
    out = tmp_path / "trace-run"
    make_trace_run(out, slots=4)
    pred = build_summary(load_results(out))["trace"]["prediction"]
    assert pred["slots_source"] == "given" and pred["slots"] == 4
