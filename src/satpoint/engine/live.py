"""Live snapshots of a running shard, small enough to send between processes twice a second."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from satpoint.engine.dispatcher import Progress
from satpoint.metrics.records import Outcome, Records

WINDOW_S = 1.0
_SAMPLE = 2000


@dataclass(slots=True)
class LiveSnapshot:
    now_s: float
    due: int
    sent: int
    inflight: int
    backlog: int
    total: int
    due_recent: int  # due in the last WINDOW_S
    ok_recent: int  # due in the last WINDOW_S and already answered OK
    errors: int  # all errors so far
    ok_total: int = 0  # all OK answers so far, whenever they were due (their rate is the answered rate)
    latency_sample_s: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    lag_sample_s: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0))


# no outcome yet, or cut off by the end of the run: not an error (``Records.error_mask``)
_NOT_SENT, _UNFINISHED, _OK = int(Outcome.NOT_SENT), int(Outcome.UNFINISHED), int(Outcome.OK)


class ErrorCount:
    """The errors (and OK answers, :attr:`ok`) among a shard's rows due so far, kept up to date at the cost
    of what changed.

    Each look scans only the rows that became due since the last one and the rows that were still open
    then (at most the in-flight cap plus the backlog), not every row so far: a snapshot four times a
    second stays as cheap in the thirtieth minute as in the first.  A row's outcome is written once,
    when it finishes, so a row counted as finished is never looked at again."""

    __slots__ = ("_errors", "_hi", "_open", "ok")

    def __init__(self) -> None:
        self._hi = 0  # rows [0, _hi) have been looked at
        self._errors = 0  # errors among them that have finished
        self.ok = 0  # OK answers among them (after :meth:`update`)
        self._open: npt.NDArray[np.intp] = np.empty(0, dtype=np.intp)  # those still without an outcome

    def update(self, rec: Records, hi: int) -> int:
        """The number of errors (``Records.error_mask``: neither OK nor open) among rows ``[0, hi)``."""
        outcome = rec.outcome
        if len(self._open):
            now = outcome[self._open]
            still = (now == _NOT_SENT) | (now == _UNFINISHED)
            ok = int(np.count_nonzero(now == _OK))
            self.ok += ok
            self._errors += int(np.count_nonzero(~still)) - ok
            self._open = self._open[still]
        if hi > self._hi:
            fresh = outcome[self._hi : hi]
            still = (fresh == _NOT_SENT) | (fresh == _UNFINISHED)
            ok = int(np.count_nonzero(fresh == _OK))
            self.ok += ok
            self._errors += len(fresh) - ok - int(np.count_nonzero(still))
            if still.any():
                self._open = np.concatenate([self._open, np.flatnonzero(still) + self._hi])
            self._hi = hi
        return self._errors


def snapshot(p: Progress, rec: Records, errors: ErrorCount | None = None) -> LiveSnapshot:
    """Latency of requests due in the last second; outstanding ones count at their age so far.

    ``errors``: the shard's running error count (a new one scans every row due so far)."""
    lo = int(np.searchsorted(rec.intended, p.now_s - WINDOW_S - 0.0, side="left"))
    hi = min(p.due, len(rec))
    intended = rec.intended[lo:hi]
    done = rec.done[lo:hi] - p.t0  # sent/done hold raw perf_counter values while running
    now = p.now_s
    lat = np.where(np.isnan(done), now - intended, done - intended)
    lag = (rec.sent[lo:hi] - p.t0) - intended
    lag = lag[~np.isnan(lag)]
    if len(lat) > _SAMPLE:
        lat = lat[:: len(lat) // _SAMPLE + 1]
    if len(lag) > _SAMPLE:
        lag = lag[:: len(lag) // _SAMPLE + 1]
    count = errors or ErrorCount()
    n_errors = count.update(rec, hi)
    return LiveSnapshot(
        now_s=now,
        due=p.due,
        sent=p.sent,
        inflight=p.inflight,
        backlog=p.backlog,
        total=p.total,
        due_recent=hi - lo,
        ok_recent=int(np.count_nonzero(rec.select(slice(lo, hi)).ok_mask())),
        errors=n_errors,
        ok_total=count.ok,
        latency_sample_s=lat,
        lag_sample_s=lag,
    )


def merge(snaps: list[LiveSnapshot]) -> LiveSnapshot:
    if len(snaps) == 1:
        return snaps[0]
    return LiveSnapshot(
        now_s=max(s.now_s for s in snaps),
        due=sum(s.due for s in snaps),
        sent=sum(s.sent for s in snaps),
        inflight=sum(s.inflight for s in snaps),
        backlog=sum(s.backlog for s in snaps),
        total=sum(s.total for s in snaps),
        due_recent=sum(s.due_recent for s in snaps),
        ok_recent=sum(s.ok_recent for s in snaps),
        errors=sum(s.errors for s in snaps),
        ok_total=sum(s.ok_total for s in snaps),
        latency_sample_s=np.concatenate([s.latency_sample_s for s in snaps]),
        lag_sample_s=np.concatenate([s.lag_sample_s for s in snaps]),
    )
