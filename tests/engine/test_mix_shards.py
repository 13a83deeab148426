"""A model mix is exact across shards: each generator process and each host sends its rows' own models,
and the merged per-model counts (row by row) are the single-process plan's."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from satpoint.distributed.coordinator import run_on_hosts
from satpoint.distributed.host import ShardJob
from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.runner import _shard_options
from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Outcome
from satpoint.payloads.mix import ResolvedMix, mix_weights
from satpoint.plan import Stage
from tests.distributed.fakes import FakeHost
from tests.engine.test_dispatcher import answer_after, fake_factory

NAMES = tuple(f"m{i}" for i in range(20))
MIX = ResolvedMix(NAMES, mix_weights("zipf:1.1", NAMES), "zipf:1.1", per_model=3)


def test_each_generator_process_gets_its_rows_models() -> None:
    pay, models = MIX.rows(1000, seed=4)
    opts = DispatchOptions(payload_count=60, payload_index=pay, model_index=models)
    parts = [_shard_options(opts, k, 3) for k in range(3)]
    for k, p in enumerate(parts):
        assert p.model_index is not None and p.payload_index is not None
        assert np.array_equal(p.model_index, models[k::3])
        assert np.array_equal(p.payload_index // 3, p.model_index.astype(np.int64))  # payload of its own model
    merged = np.bincount(np.concatenate([p.model_index for p in parts if p.model_index is not None]), minlength=20)
    assert np.array_equal(merged, np.bincount(models, minlength=20))


def test_two_hosts_send_and_record_the_plans_models_row_by_row() -> None:
    stages = (Stage(600, 0.0, 0.8),)
    due = due_times(list(stages), "poisson", 11)
    pay, models = MIX.rows(len(due), seed=11)
    factory, made = fake_factory(answer_after(0.001))
    opts = DispatchOptions(timeout_s=2.0, drain_s=0.5, warm_connections=1, payload_count=60)
    opts = replace(opts, payload_index=pay, model_index=models)
    job = ShardJob(stages, "poisson", 11, 0.0, 2, 1, lambda: factory, opts)
    out, _ = run_on_hosts([FakeHost("a"), FakeHost("b")], job, lead_s=0.2)
    rec = out.records
    assert np.array_equal(rec.intended, due) and np.all(rec.outcome == Outcome.OK)
    assert np.array_equal(rec.model, models)  # recorded row by row as planned
    assert np.array_equal(np.bincount(rec.model, minlength=20), np.bincount(models, minlength=20))
    # each host sent each of its rows (host h owns rows h, h + 2, ...) with that row's own payload
    assert len(made.transports) == 2
    owned = set()
    for t in made.transports:
        idx = np.array([s[0] for s in t.sends])
        got = np.array([s[1] for s in t.sends])
        host = next(h for h in (0, 1) if h not in owned and np.array_equal(got, pay[h::2][idx]))
        owned.add(host)
        assert len(idx) == len(pay[host::2])
