"""The runner: checkpoints while a shard runs, and each generator process's share of the in-flight cap."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Self

import numpy as np
import pytest

from satpoint.endpoints.rest import RestFactoryBuilder
from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.runner import run_shard, split_max_inflight
from satpoint.metrics.checkpoint import CheckpointSpec, read_shard_file
from satpoint.transports.base import TransportFactory
from tests.engine.test_dispatcher import answer_after, fake_factory

perf = time.perf_counter


@pytest.mark.slow
def test_a_shard_checkpoints_while_it_runs_and_its_final_frame_is_its_rows(tmp_path: Path) -> None:
    due = np.arange(500, dtype=np.float64) / 200.0  # 200 rps for 2.5 s
    factory, _ = fake_factory(answer_after(0.003))
    spec = CheckpointSpec(tmp_path, 4, interval_s=0.5)
    sizes: list[int] = []

    def watch() -> bool:  # called at every housekeeping tick: the file grows while the shard runs
        path = spec.path(0)
        sizes.append(path.stat().st_size if path.exists() else 0)
        return False

    opts = DispatchOptions(timeout_s=5.0, drain_s=1.0, warm_connections=1)
    rec, stats = run_shard(due, perf() + 0.05, lambda: factory, opts, None, watch, checkpoint=spec, shard=0)
    assert stats.checkpoint_error is None
    assert spec.path(0).name == "segment-004.shard-0.rows"
    growing = [s for s in sizes if s > 0]
    assert len(set(growing)) >= 3, sizes  # several frames during the run, not one at the end
    got = read_shard_file(spec.path(0))
    assert got is not None and got.final and got.frames >= 4
    for name, col in rec.columns().items():
        assert np.array_equal(col, got.records.columns()[name], equal_nan=col.dtype.kind == "f"), name


def test_a_stopped_shard_checkpoints_exactly_the_rows_it_keeps(tmp_path: Path) -> None:
    due = np.arange(2000, dtype=np.float64) / 200.0  # 10 s
    factory, _ = fake_factory(answer_after(0.002))
    spec = CheckpointSpec(tmp_path, 0, interval_s=0.25)
    t_end = perf() + 1.0
    opts = DispatchOptions(timeout_s=5.0, drain_s=1.0, warm_connections=1)
    rec, stats = run_shard(due, perf() + 0.05, lambda: factory, opts, None, lambda: perf() > t_end, checkpoint=spec)
    assert stats.stopped_early and 100 < len(rec) < 400
    got = read_shard_file(spec.path(0))
    assert got is not None and got.final and len(got.records) == len(rec)


@dataclass(frozen=True)
class Capped:
    max_inflight: int

    def with_max_inflight(self, max_inflight: int) -> Self:
        return replace(self, max_inflight=max_inflight)

    def __call__(self) -> TransportFactory:
        raise NotImplementedError


@pytest.mark.parametrize(
    ("cap", "procs", "per"), [(1024, 1, 1024), (1024, 2, 512), (1024, 3, 342), (3, 8, 1), (1, 2, 1)]
)
def test_each_generator_process_gets_its_share_of_the_cap(cap: int, procs: int, per: int) -> None:
    build, got = split_max_inflight(Capped(cap), procs)
    assert got == per and build.max_inflight == per  # type: ignore[attr-defined]
    assert per * procs >= cap  # together never fewer than asked


def test_the_rest_builder_can_be_split_and_a_builder_without_a_cap_is_kept() -> None:
    rest = RestFactoryBuilder("127.0.0.1", 1, (b"x",), 100)
    build, per = split_max_inflight(rest, 4)
    assert per == 25 and build == replace(rest, max_inflight=25)

    def plain() -> TransportFactory:
        raise NotImplementedError

    assert split_max_inflight(plain, 4) == (plain, None)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin to one of them")
def test_a_shard_run_in_place_gives_the_caller_its_cpus_back() -> None:
    # a sweep runs its one-process generator in place: pinned to the generator's CPU for the run, it must
    # pick the next point's server cores from every CPU satpoint may use afterwards
    before = os.sched_getaffinity(0)
    gen_cpu = max(before)
    seen: list[set[int]] = []

    def stop() -> bool:  # called at every housekeeping tick, in the shard's thread
        seen.append(os.sched_getaffinity(0))
        return False

    factory, _ = fake_factory(answer_after(0.001))
    due = np.arange(120, dtype=np.float64) / 200.0  # 0.6 s
    opts = DispatchOptions(timeout_s=5.0, drain_s=1.0, warm_connections=1)
    rec, _ = run_shard(due, perf() + 0.05, lambda: factory, opts, None, stop, cpus=[gen_cpu])
    assert len(rec) == 120
    assert seen and all(s == {gen_cpu} for s in seen)  # pinned while it ran
    assert os.sched_getaffinity(0) == before
