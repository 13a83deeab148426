"""Generator processes (``--procs``) that died mid-segment: their part in stage verdicts.

A segment records each process's planned and recorded rows under ``generator.shards`` (see
``engine.runner.shard_count``).  A process that dies is replaced by the rows its checkpoint holds, up to
its last checkpoint; the rows it would have sent afterwards never reached the server.  Judged on the rows
alone, such a stage carries less load than planned and may look stable at a rate the server never got,
so a stage whose steady window holds fewer rows than the plan put there (counted on the schedule
regenerated from the segment's plan and seed) is ``generator_limited``, its reason giving the missing
share, as ``analysis.search.hosts`` does for a lost Ray host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from satpoint.analysis.search.verdicts import Verdict
from satpoint.engine.schedule import due_times
from satpoint.metrics.results import Segment
from satpoint.metrics.stats import StageMetrics
from satpoint.plan import TRACE_ARRIVAL

#: a stage missing more than this share of its planned requests is not the server's measurement
MISSING_SHARE = 0.01


def lost_shards(seg: Segment) -> list[dict[str, Any]]:
    """The generator processes of ``seg`` that died without reporting (``generator.shards``)."""
    shards = seg.generator.get("shards")
    if not isinstance(shards, list):
        return []
    return [s for s in shards if isinstance(s, dict) and s.get("lost")]


def shard_judge(seg: Segment) -> Callable[[StageMetrics], StageMetrics]:
    """A function that amends a judged stage of ``seg`` with its dead generator processes (identity when
    none died; the schedule is regenerated once, on first use, when one did)."""
    lost = lost_shards(seg)
    if not lost or seg.purpose == "closed_loop" or seg.arrival == TRACE_ARRIVAL:
        # a replayed trace's schedule is not regenerated from the plan (its rows say what was due)
        return lambda m: m
    due: list[np.ndarray[Any, Any]] = []

    def judge(m: StageMetrics) -> StageMetrics:
        if m.verdict in (Verdict.FAILING, Verdict.INCOMPLETE):
            return m
        if not due:
            due.append(due_times(seg.stages, seg.arrival, seg.seed, seg.start_rps))
        lo, hi = np.searchsorted(due[0], [m.window_start_s, m.window_end_s], side="left")
        planned = int(hi - lo)
        missing = planned - m.requests
        if planned <= 0 or missing <= MISSING_SHARE * planned:
            return m
        names = "; ".join(
            f"generator process {s.get('shard')} died ({s.get('lost')})"
            + (f", its rows end at {s['until_s']:.1f} s" if isinstance(s.get("until_s"), (int, float)) else "")
            for s in lost
        )
        m.verdict = Verdict.GENERATOR_LIMITED
        m.reasons = [
            f"{names}: {missing / planned:.0%} of this stage's scheduled requests in its window were never sent "
            f"({missing} of {planned}); the server got that much less load than planned",
            *m.reasons,
        ]
        return m

    return judge
