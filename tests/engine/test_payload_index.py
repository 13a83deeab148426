"""Each row's own payload (``DispatchOptions.payload_index``: a replayed trace's ``payload`` column)."""

from __future__ import annotations

import numpy as np

from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.runner import _shard_options
from tests.engine.test_dispatcher import answer_after, shard


def test_rows_send_their_own_payload_on_time_and_from_the_backlog() -> None:
    due = np.arange(60, dtype=np.float64) / 600.0  # 600 rps for 0.1 s
    pay = np.array([(7 * i) % 5 for i in range(60)], dtype=np.int64)
    opts = DispatchOptions(timeout_s=5.0, drain_s=2.0, payload_count=5, payload_index=pay)
    # one slot and 5 ms answers: most rows wait in the backlog and leave from there
    rec, _, t, _ = shard(due, answer_after(0.005), opts, cap=1)
    assert rec.waited.sum() > 10
    assert [s[0] for s in t.sends] == list(range(60))
    assert [s[1] for s in t.sends] == pay.tolist()  # not i % 5


def test_each_generator_process_gets_its_rows_payloads() -> None:
    pay = np.arange(10, dtype=np.int64) * 3
    opts = DispatchOptions(payload_count=30, payload_index=pay)
    shards = [_shard_options(opts, k, 3).payload_index for k in range(3)]
    assert [s.tolist() for s in shards if s is not None] == [[0, 9, 18, 27], [3, 12, 21], [6, 15, 24]]
    plain = DispatchOptions(payload_count=4)
    assert _shard_options(plain, 1, 3) is plain
