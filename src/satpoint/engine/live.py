"""Live snapshots of a running shard, small enough to send between processes twice a second."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from satpoint.engine.dispatcher import Progress
from satpoint.metrics.records import Records

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
    latency_sample_s: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    lag_sample_s: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0))


def snapshot(p: Progress, rec: Records) -> LiveSnapshot:
    """Latency of requests due in the last second; outstanding ones count at their age so far."""
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
    errors = int(np.count_nonzero(rec.select(slice(0, hi)).error_mask()))
    return LiveSnapshot(
        now_s=now,
        due=p.due,
        sent=p.sent,
        inflight=p.inflight,
        backlog=p.backlog,
        total=p.total,
        due_recent=hi - lo,
        ok_recent=int(np.count_nonzero(rec.select(slice(lo, hi)).ok_mask())),
        errors=errors,
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
        latency_sample_s=np.concatenate([s.latency_sample_s for s in snaps]),
        lag_sample_s=np.concatenate([s.lag_sample_s for s in snaps]),
    )
