"""When the target stopped answering: a target that died once measuring had started.

A target that goes away mid-run leaves its mark in the rows: from some request on, every request fails
to connect (refused: nothing listens; reset: the connection died; other socket errors) and none is
answered any more.  That is not "bad input" and not saturation (an overloaded server still answers, or
times out): it is a run that failed, reported as such (exit code 1) with everything measured before.

``find`` also records, in the results header (``target_lost``), when the target stopped answering
between two stages (the cool-down probe or the next stage's connections failed): nothing in the rows
shows that.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import Results

#: outcomes that say nobody is there any more
GONE = (Outcome.CONN_REFUSED, Outcome.CONN_RESET, Outcome.CONN_ERROR)
#: outcomes that say the server answered something
ANSWERED = (Outcome.OK, Outcome.HTTP_ERROR, Outcome.MALFORMED, Outcome.GRPC_ERROR)
#: the failures after the last answer must be at least this many requests over at least this long
MIN_ROWS = 10
MIN_SPAN_S = 1.0
#: where ``find`` records a target that stopped answering between stages
HEADER_KEY = "target_lost"


def stopped_answering_at(rec: Records) -> float | None:
    """The run-clock due time from which every finished request failed to connect and none was answered
    (at least ``MIN_ROWS`` of them over at least ``MIN_SPAN_S``), or None."""
    answered = np.flatnonzero(np.isin(rec.outcome, ANSWERED))
    start = int(answered[-1]) + 1 if len(answered) else 0
    finished = np.flatnonzero(rec.finished_mask()[start:]) + start
    if len(finished) < MIN_ROWS or not np.isin(rec.outcome[finished], GONE).all():
        return None
    first, last = int(finished[0]), int(finished[-1])
    if rec.intended[last] - rec.intended[first] < MIN_SPAN_S:
        return None
    return float(rec.intended[first])


def target_lost(results: Results, judged_segments: list[int]) -> dict[str, Any] | None:
    """summary.json's ``target_lost``: where the target stopped answering, with the line that says so.

    ``judged_segments`` holds the segment index of every stage of the summary, in order, so the stage
    named is the one the stage table numbers."""
    for seg in results.segments:
        at_s = stopped_answering_at(seg.records)
        if at_s is None:
            continue
        span = next((sp for sp in seg.spans if at_s < sp.end_s), seg.spans[-1])
        stage = sum(1 for i in judged_segments if i < seg.index) + span.index + 1
        rate = span.stage.target_rps
        return {
            "segment": seg.index,
            "stage": stage,
            "at_s": round(at_s, 3),
            "message": (
                f"the target stopped answering during stage {stage} ({rate:g} rps), {at_s - span.start_s:.1f} s "
                "into it: every request since then failed to connect (what was measured before is kept)"
            ),
        }
    recorded = results.header.get(HEADER_KEY)
    if isinstance(recorded, dict):
        stage = len(judged_segments)
        where = f"after stage {stage}" if stage else "before the first stage"
        return {
            "segment": None,
            "stage": stage or None,
            "at_s": None,
            "message": (
                f"the target stopped answering {where} ({recorded.get('error', 'no answer')}; what was measured "
                "before is kept)"
            ),
        }
    return None
