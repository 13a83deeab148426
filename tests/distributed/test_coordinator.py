"""The coordinator with in-process hosts: clocks, the common start, exact merging, lost hosts, Ctrl-C."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from satpoint.analysis.search.hosts import judge_hosts
from satpoint.analysis.search.verdicts import Verdict
from satpoint.config import VerdictRules
from satpoint.distributed.clock import ClockSample, estimate_offset
from satpoint.distributed.coordinator import run_on_hosts
from satpoint.distributed.host import SHARD_DIR_PREFIX, ShardJob, host_rows, remove_stale_shard_dirs
from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.schedule import due_times
from satpoint.errors import RunFailed
from satpoint.metrics.records import Outcome
from satpoint.metrics.stats import stage_metrics
from satpoint.plan import Stage, spans
from tests.distributed.fakes import FakeHost
from tests.engine.test_dispatcher import answer_after, fake_factory

pytestmark = pytest.mark.slow

OPTS = DispatchOptions(timeout_s=2.0, drain_s=0.5, warm_connections=1)


def job(hosts: int, stages: tuple[Stage, ...] = (Stage(400, 0.2, 1.0),), arrival: str = "constant") -> ShardJob:
    factory, _ = fake_factory(answer_after(0.002))
    return ShardJob(stages, arrival, 7, 0.0, hosts, 1, lambda: factory, OPTS)  # type: ignore[arg-type]


def test_the_offset_of_the_shortest_round_trip_is_kept_within_half_of_it() -> None:
    samples = [
        ClockSample(10.0, 15.004, 10.010),  # slow round trip, offset 4.999
        ClockSample(20.0, 25.0011, 20.002),  # fastest: offset 5.0001, uncertain by 1 ms
        ClockSample(30.0, 35.006, 30.008),
    ]
    got = estimate_offset(samples)
    assert got.offset_s == pytest.approx(5.0001)
    assert got.uncertainty_s == pytest.approx(0.001)
    assert got.rtt_s == pytest.approx(0.002)
    assert got.samples == 3
    with pytest.raises(ValueError):
        estimate_offset([])


@pytest.mark.parametrize("arrival", ["constant", "poisson"])
def test_hosts_and_their_processes_stripe_the_schedule_as_procs_does(arrival: str) -> None:
    stages = (Stage(300, 1.0, 2.0), Stage(500, 0.5, 1.0))
    j3 = ShardJob(stages, arrival, 3, 0.0, 3, 2, lambda: None, OPTS)  # type: ignore[arg-type,arg-type]
    due = due_times(list(stages), arrival, 3)  # type: ignore[arg-type]
    rows = [host_rows(j3, h) for h in range(3)]
    assert np.array_equal(np.sort(np.concatenate(rows)), due)
    for h in range(3):  # the host's runner deals its rows to its 2 processes: process k is n % 6 == h + 3k
        for k in range(2):
            assert np.array_equal(rows[h][k::2], due[h + 3 * k :: 6])


def test_two_hosts_with_skewed_clocks_start_together_and_merge_into_the_whole_schedule() -> None:
    hosts = [FakeHost("a", offset_s=5.0), FakeHost("b", offset_s=-3.25)]
    j = job(2)
    out, block = run_on_hosts(hosts, j, lead_s=0.3)
    due = due_times(list(j.stages), "constant", 7)
    assert np.array_equal(out.records.intended, due)  # exactly the single-machine schedule
    assert np.all(out.records.outcome == Outcome.OK)
    assert not out.interrupted and not out.notes
    offsets = [h["clock"]["offset_s"] for h in block["hosts"]]
    assert offsets == pytest.approx([5.0, -3.25], abs=0.002)
    for h in block["hosts"]:
        assert abs(h["clock"]["offset_s"] - (5.0 if h["index"] == 0 else -3.25)) <= h["clock"]["uncertainty_s"] + 1e-4
        assert h["requests"] == h["rows_planned"] == len(due) // 2
        assert h["cpu_us_per_request"] is not None and h["start_margin_s"] > 0
        assert len(h["stage_lag_p99_ms"]) == 1 and not h["lost"]
    # one machine, one monotonic clock: the skew is measured, and the offsets did not leak into it
    assert hosts[0].t0 is not None and hosts[1].t0 is not None
    assert block["start_skew_s"] == pytest.approx(abs(hosts[0].t0 - hosts[1].t0), abs=1e-6)
    assert block["start_skew_s"] < 0.002
    assert block["start_skew_bound_s"] > 0 and block["lost_share"] == 0


def test_a_clock_too_uncertain_for_the_alignment_is_reported() -> None:
    hosts = [FakeHost("a"), FakeHost("slow", there_s=0.004, back_s=0.0)]  # 4 ms one way: ±2 ms at best
    out, block = run_on_hosts(hosts, job(2), lead_s=0.3, align_s=0.001)
    assert any("host 1: clock offset uncertain by ±" in n for n in out.notes), out.notes
    assert not any(n.startswith("host 0: clock") for n in out.notes)
    assert block["start_skew_bound_s"] >= 0.004


def test_a_start_that_arrives_late_is_reported_not_hidden() -> None:
    class Late(FakeHost):
        def start(self, start_wall_s: float) -> dict[str, float]:
            time.sleep(0.6)  # beyond the lead
            return super().start(start_wall_s)

    out, block = run_on_hosts([FakeHost("a"), Late("b")], job(2), lead_s=0.2)
    assert block["hosts"][1]["start_margin_s"] < 0
    assert any("host 1: the start reached it" in n and "after the start time" in n for n in out.notes), out.notes


def test_a_host_lost_mid_run_loses_its_rows_and_the_others_are_kept() -> None:
    hosts = [FakeHost("a"), FakeHost("b", die_after_s=0.8)]
    j = job(2, (Stage(400, 0.2, 2.5),))
    out, block = run_on_hosts(hosts, j, lead_s=0.3)
    due = due_times(list(j.stages), "constant", 7)
    assert np.array_equal(out.records.intended, due[0::2])  # host 0's rows, all of them
    assert block["lost_hosts"] == 1 and block["lost_share"] == 0.5
    assert block["hosts"][1]["lost"] and "while running" in block["hosts"][1]["lost"]
    assert any("host 1 (b) lost" in n and "its rows are missing" in n for n in out.notes), out.notes
    assert any("1 of 2 generator hosts lost: 50% of the schedule's rows" in n for n in out.notes), out.notes
    # the stage verdict says what share of the planned load is missing
    m = stage_metrics(out.records, spans(list(j.stages))[0])
    m.verdict, m.reasons = Verdict.STABLE, []
    judged = judge_hosts(m, block, VerdictRules())
    assert judged.verdict == Verdict.GENERATOR_LIMITED
    assert "host 1 (b) lost: about 50% of this stage's scheduled requests are missing" in judged.reasons[0]


def test_a_host_that_cannot_be_prepared_is_reported_and_the_others_run() -> None:
    hosts = [FakeHost("a", fail_prepare=True), FakeHost("b")]
    out, block = run_on_hosts(hosts, job(2), lead_s=0.3)
    assert block["hosts"][0]["lost"].startswith("while preparing")
    assert len(out.records) == block["hosts"][1]["requests"] > 0


def test_every_host_lost_is_a_failed_run() -> None:
    with pytest.raises(RunFailed, match="every generator host failed"):
        run_on_hosts([FakeHost("a", die_after_s=0.0), FakeHost("b", die_after_s=0.0)], job(2), lead_s=0.3)


def test_stopping_stops_every_host_and_keeps_their_rows() -> None:
    hosts = [FakeHost("a"), FakeHost("b")]
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    j = job(2, (Stage(300, 0.0, 20.0),))
    t = time.monotonic()
    out, block = run_on_hosts(hosts, j, stop_event=stop, lead_s=0.3)
    assert time.monotonic() - t < 10
    assert out.interrupted
    assert all(h.stops == 1 for h in hosts)
    assert 0 < len(out.records) < len(due_times(list(j.stages), "constant", 7)) / 4
    assert all(h["requests"] > 0 for h in block["hosts"])


def test_the_overload_rule_sees_merged_snapshots_and_stops_every_host() -> None:
    seen: list[int] = []

    def rule(snap: object) -> bool:
        seen.append(getattr(snap, "total", 0))
        return len(seen) >= 3

    hosts = [FakeHost("a"), FakeHost("b")]
    j = job(2, (Stage(300, 0.0, 20.0),))
    out, _ = run_on_hosts(hosts, j, abort_when=rule, lead_s=0.3)
    assert out.overloaded and not out.interrupted
    total = len(due_times(list(j.stages), "constant", 7))
    assert max(seen) == total  # merged: both hosts' rows
    assert len(out.records) < total / 4


def test_a_host_that_falls_behind_is_named_in_the_verdict() -> None:
    block = {
        "hosts": [
            {"index": 0, "host": "gen-a", "stage_lag_p99_ms": [0.5, 0.6]},
            {"index": 1, "host": "gen-b", "stage_lag_p99_ms": [0.7, 42.0]},
        ],
        "lost_share": 0.0,
    }
    rec_job = job(1, (Stage(200, 0.0, 1.0), Stage(300, 0.0, 1.0)))
    out, _ = run_on_hosts([FakeHost("x")], rec_job, lead_s=0.2)
    sp = spans(list(rec_job.stages))
    first, second = (stage_metrics(out.records, s) for s in sp)
    for m in (first, second):
        m.verdict, m.reasons = Verdict.STABLE, []
    assert judge_hosts(first, block, VerdictRules()).verdict == Verdict.STABLE
    judged = judge_hosts(second, block, VerdictRules())
    assert judged.verdict == Verdict.GENERATOR_LIMITED
    assert "host 1 (gen-b) fell behind its schedule: p99 send lag 42.0 ms" in judged.reasons[0]


def test_the_same_hosts_run_one_segment_after_another() -> None:
    hosts = [FakeHost("a", offset_s=1.0), FakeHost("b")]
    first = job(2, (Stage(200, 0.0, 0.5),))
    factory, _ = fake_factory(answer_after(0.002))
    second = ShardJob((Stage(300, 0.0, 0.5),), "poisson", 8, 100.0, 2, 1, lambda: factory, OPTS)
    out1, _ = run_on_hosts(hosts, first, lead_s=0.2)
    out2, block2 = run_on_hosts(hosts, second, lead_s=0.2)
    assert np.array_equal(out1.records.intended, due_times(list(first.stages), "constant", 7))
    assert np.array_equal(out2.records.intended, due_times(list(second.stages), "poisson", 8, 100.0))
    assert block2["lost_hosts"] == 0


def test_a_host_whose_polls_hang_is_lost_without_blinding_the_driver() -> None:
    hosts = [FakeHost("a"), FakeHost("b", hang_after_s=0.5)]  # b's node stops answering half a second in
    j = job(2, (Stage(400, 0.2, 3.0),))
    seen: list[tuple[float, int]] = []
    t = time.monotonic()
    out, block = run_on_hosts(
        hosts, j, lead_s=0.3, poll_lost_s=1.0, on_snapshot=lambda s: seen.append((time.monotonic(), s.total))
    )
    assert time.monotonic() - t < 3.2 + 0.3 + 4  # the schedule, its lead, and slack: never the hung call's 60 s
    assert block["hosts"][1]["lost"] == "no answer to a poll within 1 s"
    assert hosts[1].abandoned.is_set()  # given up: what it runs is ended
    due = due_times(list(j.stages), "constant", 7)
    assert np.array_equal(out.records.intended, due[0::2])  # host 0's rows, all of them
    # the live figures kept coming while b's poll hung (the driver polled a all along)
    hung_at = t + 0.3 + 0.5 + 1.0
    assert len([n for when, n in seen if when > hung_at]) >= 4


def test_ctrl_c_reaches_the_other_hosts_while_one_hangs() -> None:
    class Timed(FakeHost):
        stopped_at: float | None = None

        def stop(self) -> None:
            self.stopped_at = time.monotonic()
            super().stop()

    a, b = Timed("a"), FakeHost("b", hang_after_s=0.0)
    stop = threading.Event()
    asked: list[float] = []

    def ctrl_c() -> None:
        asked.append(time.monotonic())
        stop.set()

    threading.Timer(1.0, ctrl_c).start()
    out, block = run_on_hosts([a, b], job(2, (Stage(300, 0.0, 20.0),)), stop_event=stop, lead_s=0.3, poll_lost_s=4.0)
    assert out.interrupted and asked and a.stopped_at is not None
    assert a.stopped_at - asked[0] < 0.6  # within a couple of poll intervals, not after b's hung poll
    assert block["hosts"][0]["requests"] > 0 and block["hosts"][1]["lost"]


def test_a_host_that_built_another_schedule_is_not_merged() -> None:
    class Skewed(FakeHost):
        def prepare(self, job: ShardJob, index: int) -> dict[str, float]:
            got = super().prepare(job, index)
            return {**got, "last_s": got["last_s"] + 0.001}  # e.g. another numpy on that node

    hosts = [FakeHost("a"), Skewed("b")]
    j = job(2)
    out, block = run_on_hosts(hosts, j, lead_s=0.3)
    lost = block["hosts"][1]["lost"]
    assert lost.startswith("it built another schedule than the driver's (due from") and "numpy" in lost, lost
    assert hosts[1].abandoned.is_set()
    assert np.array_equal(out.records.intended, due_times(list(j.stages), "constant", 7)[0::2])


def test_the_checkpoint_folder_of_a_killed_host_is_removed_by_the_next_shard(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that has ended: an actor killed mid-shard
    dead = tmp_path / f"{SHARD_DIR_PREFIX}{gone.pid}-abc"
    mine = tmp_path / f"{SHARD_DIR_PREFIX}{os.getpid()}-def"
    for d in (dead, mine):
        (d / "rows").mkdir(parents=True)
    other = tmp_path / "satpoint-triton-xyz"  # not a shard folder
    other.mkdir()
    assert remove_stale_shard_dirs(tmp_path) == [dead]
    assert not dead.exists() and mine.is_dir() and other.is_dir()
