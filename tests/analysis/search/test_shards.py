"""A ``--procs`` shard that died mid-stage: the stage is judged on what the server got, not on the plan."""

from __future__ import annotations

import numpy as np
import pytest

from satpoint.analysis.search.summary import search_history
from satpoint.analysis.summary.build import all_stage_metrics, build_summary
from satpoint.config import RunConfig
from satpoint.engine.runner import shard_count
from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Outcome
from satpoint.metrics.results import Results, Segment, new_header
from satpoint.plan import Stage
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate

TARGET = {"url": "http://127.0.0.1:1", "model": "sim", "protocol": "rest"}
STAGES = [Stage(400, 1, 10)]


def two_shards(died_at_s: float | None, kind: str = "run", purpose: str = "run") -> Results:
    """A 2-process segment against the offline sim (capacity 500 rps): shard 1 dies at ``died_at_s``
    (its rows after its last checkpoint never exist, those in flight then are cut off), or not at all."""
    due = due_times(STAGES)
    rec = simulate(due, SimConfig(slots=5, service_ms=10))
    shard = np.arange(len(rec)) % 2
    counts = [shard_count(0, int((shard == 0).sum()), rec.select(shard == 0))]
    if died_at_s is None:
        counts.append(shard_count(1, int((shard == 1).sum()), rec.select(shard == 1)))
    else:
        keep = (shard == 0) | (rec.intended < died_at_s)
        open_then = (shard == 1) & (rec.done > died_at_s) & keep
        rec.outcome[open_then] = Outcome.UNFINISHED
        rec.done[open_then] = died_at_s
        rows = rec.select((shard == 1) & keep)
        rec = rec.select(keep)
        why = "generator process 1 died (exit code -9)"
        counts.append(shard_count(1, int((shard == 1).sum()), rows, why, died_at_s))
    seg = Segment(0, purpose, STAGES, "constant", 0, 0.0, rec, generator={"procs": 2, "shards": counts})
    return Results(new_header(RunConfig(kind=kind), TARGET, 0.0), [seg])


def test_a_stage_missing_a_dead_shards_rows_is_generator_limited_with_the_missing_share() -> None:
    (st,) = build_summary(two_shards(died_at_s=4.0))["stages"]
    # the window is 3..11 s: shard 1's rows after 4 s (3.5 of 8 s... of half the load) are missing
    assert st["verdict"] == "generator_limited"
    assert "generator process 1 died" in st["reasons"][0] and "never sent" in st["reasons"][0]
    share = float(st["reasons"][0].split(": ")[-1].split("%")[0])
    assert share == pytest.approx(100 * 0.5 * (11 - 4) / (11 - 3), abs=3)
    assert st["offered_rps"] == pytest.approx(400 * (1 - share / 100), rel=0.03)


def test_a_healthy_run_and_a_shard_lost_after_the_window_are_judged_as_before() -> None:
    assert build_summary(two_shards(None))["stages"][0]["verdict"] == "stable"
    assert build_summary(two_shards(died_at_s=10.995))["stages"][0]["verdict"] == "stable"


def test_find_does_not_count_the_planned_rate_as_sustained() -> None:
    results = two_shards(died_at_s=4.0, kind="find", purpose="staircase")
    history = search_history(results, all_stage_metrics(results))
    assert [(h.rate_rps, h.verdict) for h in history] == [(400, "generator_limited")]
    assert build_summary(results)["saturation_rps"] is None


def test_shard_counts_add_up() -> None:
    results = two_shards(died_at_s=4.0)
    shards = results.segments[0].generator["shards"]
    assert sum(s["planned"] for s in shards) == len(due_times(STAGES))
    assert sum(s["rows"] for s in shards) == len(results.segments[0].records) < len(due_times(STAGES))
