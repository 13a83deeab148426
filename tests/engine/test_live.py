"""Live snapshots: the running error count that spares a full scan of the rows four times a second."""

from __future__ import annotations

import numpy as np

from satpoint.engine.dispatcher import Progress
from satpoint.engine.live import ErrorCount, snapshot
from satpoint.metrics.records import Outcome, Records

FINAL = [Outcome.OK, Outcome.OK, Outcome.HTTP_ERROR, Outcome.TIMEOUT, Outcome.CONN_RESET, Outcome.GRPC_ERROR]


def test_the_running_count_equals_a_full_scan_while_rows_finish_out_of_order() -> None:
    rng = np.random.default_rng(7)
    n = 4000
    rec = Records.empty(np.arange(n) / 1000.0)
    final = rng.choice(np.array(FINAL, dtype=np.int8), n)
    finishes_at = np.arange(n) + rng.integers(0, 400, n)  # each row finishes up to 400 rows after it is due
    finishes_at[rng.choice(n, 20, replace=False)] = 10 * n  # a few never finish before the end
    count = ErrorCount()
    for step in range(0, n + 500, 37):
        hi = min(step, n)
        now_done = (finishes_at <= step) & (np.arange(n) < hi)
        rec.outcome[now_done] = final[now_done]
        rec.done[now_done] = 1.0
        assert count.update(rec, hi) == int(np.count_nonzero(rec.select(slice(0, hi)).error_mask()))
        assert count.ok == int(np.count_nonzero(rec.select(slice(0, hi)).ok_mask()))
    rec.outcome[rec.outcome == Outcome.NOT_SENT] = Outcome.UNFINISHED  # the run ends: cut off, not errors
    assert count.update(rec, n) == int(np.count_nonzero(rec.error_mask()))


def test_a_row_that_finished_is_not_read_again() -> None:
    """Each look reads the rows due since the last one and those still open then, not every row so far."""
    rec = Records.empty(np.arange(100) / 1000.0)
    rec.outcome[:60] = Outcome.HTTP_ERROR
    rec.outcome[60:70] = Outcome.OK
    count = ErrorCount()
    assert count.update(rec, 80) == 60  # rows 70..79 are still open
    rec.outcome[:60] = Outcome.OK  # rows already counted: never read again (outcomes are written once)
    rec.outcome[70:100] = Outcome.TIMEOUT
    assert count.update(rec, 100) == 60 + 30


def test_the_snapshot_reports_the_running_count() -> None:
    rec = Records.empty(np.arange(10) / 1000.0)
    rec.outcome[:4] = [Outcome.OK, Outcome.HTTP_ERROR, Outcome.OK, Outcome.CONN_RESET]
    p = Progress(now_s=0.01, due=10, sent=10, backlog=0, inflight=6, total=10, t0=0.0)
    count = ErrorCount()
    assert snapshot(p, rec, count).errors == 2
    rec.outcome[4:] = Outcome.TIMEOUT
    assert snapshot(p, rec, count).errors == 8
    assert snapshot(p, rec).errors == 8  # without a running count: a full scan, same answer
