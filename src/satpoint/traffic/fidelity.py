"""How faithfully a replay kept the trace's own times, per stage.

A request's send lag is ``sent - intended``, and ``intended`` is the trace's time (shifted to the run's
clock and divided by the speed): the lag is measured against the trace itself.  Per stage, over the whole
stage (ramp and settle included: a replay has no steady window to hide in), the lag's p50/p99/max and
the share of requests that left more than 1 ms late (a request never sent counts as late).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from satpoint.metrics.records import Outcome, Records
from satpoint.plan import StageSpan

#: a request that left more than this long after its trace time is late
LATE_S = 0.001


def stage_fidelity(rec: Records, spans: list[StageSpan]) -> list[dict[str, Any]]:
    """One row per stage: requests, lag percentiles (ms) against the trace's times, share > 1 ms late."""
    out: list[dict[str, Any]] = []
    lag_all = rec.send_lag_s()
    for sp in spans:
        lo, hi = np.searchsorted(rec.intended, [sp.start_s, sp.end_s], side="left")
        lag = lag_all[lo:hi]
        n = int(hi - lo)
        sent = lag[~np.isnan(lag)]
        never = int(np.count_nonzero(rec.outcome[lo:hi] == Outcome.NOT_SENT))
        late = int(np.count_nonzero(sent > LATE_S)) + never
        row: dict[str, Any] = {
            "stage": sp.index,
            "start_s": round(sp.start_s, 6),
            "end_s": round(sp.end_s, 6),
            "requests": n,
            "trace_rps": round(sp.stage.target_rps, 3),
            "lag_ms": {
                "p50": round(float(np.percentile(sent, 50)) * 1e3, 4) if len(sent) else None,
                "p99": round(float(np.percentile(sent, 99)) * 1e3, 4) if len(sent) else None,
                "max": round(float(sent.max()) * 1e3, 4) if len(sent) else None,
            },
            "late_fraction": round(late / n, 6) if n else 0.0,
            "never_sent": never,
        }
        out.append(row)
    return out


def overall(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The replay's worst stage figures and its total late share (weighted by requests)."""
    n = sum(r["requests"] for r in rows)
    late = sum(r["late_fraction"] * r["requests"] for r in rows)
    p99s = [r["lag_ms"]["p99"] for r in rows if r["lag_ms"]["p99"] is not None]
    return {
        "requests": n,
        "late_fraction": round(late / n, 6) if n else 0.0,
        "worst_stage_lag_p99_ms": max(p99s) if p99s else None,
    }
