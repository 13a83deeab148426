"""Offline twin of ``satpoint sim``: the records a c-slot server would produce, without a network.

Feeds a schedule's due times through the simulator's virtual-time slot scheduler and returns the
rows a perfect generator would record (sent = intended).  It lets the statistics, verdicts and the
saturation search be tested against known queueing behaviour in milliseconds.

With ``max_inflight`` the generator has a connection cap: a request due while ``max_inflight`` requests
are outstanding waits (FIFO) for the earliest answer, is sent then and marked ``waited``, as the real
dispatcher does.
"""

from __future__ import annotations

import heapq

import numpy as np

from satpoint.metrics.records import Outcome, Records
from satpoint.plan import FloatArray
from satpoint.servers.sim.model import SimConfig, SlotScheduler


def simulate(due_s: FloatArray, config: SimConfig, origin_s: float = 0.0, max_inflight: int | None = None) -> Records:
    rec = Records.empty(np.asarray(due_s, dtype=np.float64))
    sched = SlotScheduler.from_config(config, origin_s)
    done = rec.done
    sent = rec.sent
    outcome = rec.outcome
    status = rec.status
    waited = rec.waited
    outstanding: list[float] = []  # answer times of the requests in flight (a min-heap)
    last_send = -np.inf
    for i, t in enumerate(rec.intended.tolist()):
        send = max(t, last_send)  # FIFO: never before a request that was due earlier
        if max_inflight is not None:
            while outstanding and outstanding[0] <= send:
                heapq.heappop(outstanding)
            if len(outstanding) >= max_inflight:
                send = max(send, heapq.heappop(outstanding))
                waited[i] = True
        adm = sched.admit(send)
        sent[i] = send
        last_send = send
        done[i] = adm.finish_s
        outcome[i] = Outcome.HTTP_ERROR if adm.error else Outcome.OK
        status[i] = 500 if adm.error else 200
        if max_inflight is not None:
            heapq.heappush(outstanding, adm.finish_s)
    return rec
