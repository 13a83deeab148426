"""Offline twin of ``satpoint sim --stream``: the rows (with stream columns) a c-slot streaming server would
produce for a schedule, without a network: every request is sent at its due time, waits for a slot as in
the sim (``SlotScheduler``), and its chunks arrive at ``start + stream_chunk_offsets`` exactly.  Lets the
stream statistics, verdicts and the search be tested against known queueing behaviour in milliseconds.
"""

from __future__ import annotations

import numpy as np

from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.stream_records import attach
from satpoint.plan import FloatArray
from satpoint.servers.sim.model import SimConfig, SlotScheduler


def simulate_stream(due_s: FloatArray, config: SimConfig, origin_s: float = 0.0) -> Records:
    """The records of ``due_s`` against ``config``'s streamed answers (an injected error is a stream error
    at its last chunk, as the sim sends it)."""
    rec = Records.empty(np.asarray(due_s, dtype=np.float64))
    stamp = attach(rec)
    sched = SlotScheduler.from_config(config, origin_s)
    offsets = config.stream_offsets_s
    last = len(offsets) - 1
    for i, t in enumerate(rec.intended.tolist()):
        adm = sched.admit(t, offsets[-1])
        rec.sent[i] = t
        chunks = offsets[:last] if adm.error else offsets
        for off in chunks:
            stamp.chunk(i, adm.start_s + off)
        end = adm.start_s + offsets[-1]
        stamp.end(i, end)
        rec.done[i] = end
        rec.outcome[i] = Outcome.STREAM_ERROR if adm.error else Outcome.OK
        rec.status[i] = 200
    return rec
