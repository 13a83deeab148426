"""A stage an interruption cut short is summarised on what it measured (``interrupted``, its window, its
figures; a verdict when the window held enough, else ``incomplete``); one it never reached is left out."""

from __future__ import annotations

import numpy as np
import pytest

from satpoint.analysis.summary.build import CUT_MIN_WINDOW_S, build_summary
from satpoint.config import RunConfig
from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import Results, Segment, new_header
from satpoint.plan import Stage
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate

TARGET = {"url": "http://127.0.0.1:1", "model": "sim", "protocol": "rest"}


def cut(stages: list[Stage], cfg: SimConfig, stop_s: float, kind: str = "run") -> dict:  # type: ignore[type-arg]
    """The summary of a run of ``stages`` against the offline sim, interrupted at ``stop_s`` (run clock):
    rows due after the stop are absent, as the dispatcher leaves them."""
    rec = simulate(due_times(stages), cfg)
    keep = rec.intended < stop_s
    rec = rec.select(keep)
    cut_off = rec.done > stop_s  # what was in flight was cut off at the stop, as the dispatcher does
    rec.outcome[cut_off] = Outcome.UNFINISHED
    rec.done[cut_off] = stop_s
    seg = Segment(0, "run", stages, "constant", 0, 0.0, rec, interrupted=True, stopped="interrupted")
    results = Results(new_header(RunConfig(kind=kind), TARGET, 0.0), [seg])
    return build_summary(results)


def test_a_stage_cut_during_its_hold_is_judged_on_the_window_it_measured() -> None:
    # the plan: 400 rps, ramp 1 s, hold 30 s, stopped 6 s in (5 s into the hold)
    s = cut([Stage(400, 1, 30)], SimConfig(slots=50, service_ms=2), 6.0)
    (st,) = s["stages"]
    assert st["interrupted"] is True and s["interrupted"] is True
    assert st["verdict"] == "stable", st["reasons"]
    assert st["hold_s"] == 30  # the plan, not what ran
    assert 1.0 < st["window_start_s"] < 3.0 and st["window_end_s"] == pytest.approx(6.0, abs=0.01)
    assert st["offered_rps"] == pytest.approx(400, rel=0.01)
    assert st["requests"] == pytest.approx(400 * (st["window_end_s"] - st["window_start_s"]), abs=2)


def test_an_overloaded_stage_cut_short_is_still_saturated() -> None:
    s = cut([Stage(600, 0, 30)], SimConfig(slots=4, service_ms=10), 8.0)  # capacity 400 rps
    (st,) = s["stages"]
    assert st["interrupted"] is True and st["verdict"] == "saturated", st["reasons"]


def test_too_short_a_window_or_a_ramp_is_incomplete_with_its_figures() -> None:
    cfg = SimConfig(slots=50, service_ms=2)
    s = cut([Stage(400, 1, 30)], cfg, 1.0 + CUT_MIN_WINDOW_S)  # the settle leaves less than the minimum
    (st,) = s["stages"]
    assert st["verdict"] == "incomplete" and "interrupted" in st["reasons"][0]
    assert st["requests"] > 0 and st["latency_ms"]["p50"] == pytest.approx(2, abs=0.1)
    ramp = cut([Stage(100, 2, 10), Stage(400, 10, 30)], cfg, 12.0 + 5.0)  # 5 s into the second ramp
    first, second = ramp["stages"]
    assert first["verdict"] == "stable" and not first["interrupted"]
    assert second["interrupted"] and second["verdict"] == "incomplete"
    assert "ramp" in second["reasons"][0] and second["requests"] > 0


def test_stages_never_reached_are_left_out() -> None:
    s = cut([Stage(100, 1, 5), Stage(200, 1, 5), Stage(300, 1, 5)], SimConfig(slots=50, service_ms=2), 9.0)
    assert [st["target_rps"] for st in s["stages"]] == [100, 200]
    assert [st["interrupted"] for st in s["stages"]] == [False, True]


def test_a_find_leaves_an_interrupted_stage_out_of_its_search() -> None:
    stages = [Stage(100, 1, 8)]
    s = cut(stages, SimConfig(slots=50, service_ms=2), 6.0, kind="find")
    assert s["stages"][0]["interrupted"] and s["stages"][0]["verdict"] == "stable"
    assert s["search"]["steps"] == [] and s["saturation_rps"] is None


def test_records_empty_segment_has_no_stage() -> None:
    seg = Segment(0, "run", [Stage(100, 1, 8)], "constant", 0, 0.0, Records.empty(np.empty(0)), interrupted=True,
                  stopped="interrupted")  # fmt: skip
    s = build_summary(Results(new_header(RunConfig(), TARGET, 0.0), [seg]))
    assert s["stages"] == [] and s["interrupted"] is True
