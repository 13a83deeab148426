"""Offline twin of ``satpoint sim``: the records a c-slot server would produce, without a network.

Feeds a schedule's due times through the simulator's virtual-time slot scheduler and returns the
rows a perfect generator would record (sent = intended).  It lets the statistics, verdicts and the
saturation search be tested against known queueing behaviour in milliseconds.
"""

from __future__ import annotations

import numpy as np

from satpoint.metrics.records import Outcome, Records
from satpoint.servers.sim_model import SimConfig, SlotScheduler


def simulate(due_s: np.ndarray, config: SimConfig, origin_s: float = 0.0) -> Records:
    rec = Records.empty(np.asarray(due_s, dtype=np.float64))
    sched = SlotScheduler.from_config(config, origin_s)
    done = rec.done
    outcome = rec.outcome
    status = rec.status
    for i, t in enumerate(rec.intended.tolist()):
        adm = sched.admit(t)
        done[i] = adm.finish_s
        outcome[i] = Outcome.HTTP_ERROR if adm.error else Outcome.OK
        status[i] = 500 if adm.error else 200
    rec.sent[:] = rec.intended
    return rec
