"""Stream aggregates of a stage's steady window: time to first chunk, gaps between chunks, chunks/s.

Pure functions of :class:`~satpoint.metrics.records.Records` with stream columns
(``metrics.stream_records``), exact like the latency percentiles (order statistics of the recorded
values, no binning):

* **TTFC** (time to first chunk) = first chunk − *intended* send time, coordinated-omission free like
  latency.  Over the rows that count in latency (``Records.latency_mask``: OK plus censored): a censored
  row that got no chunk counts at ``done − intended`` (how long it had waited so far, a lower bound), so a
  server too slow to start streaming keeps its worst requests in the tail.  Answered errors are left out
  (counted by class in ``errors``).
* **gap** = time between consecutive chunks of one stream, over the same rows; a censored stream's
  open gap is in its gaps already (a lower bound, see ``metrics.stream_records``).
* **chunks_per_s** = chunks of the OK streams that ended inside the window, per second of window (the
  stream analogue of ``throughput_rps``, which is **requests_per_s** here); **chunks_per_request** their
  mean.  End-to-end latency is the stage's ``latency_ms`` (done − intended, done = the stream's end).
* **coalesced_gaps** / **coalesced_share**: the gaps, of the same rows, whose two chunks came in one read
  of the socket (stamped at one instant: the gap is recorded as 0), and their share of all gaps.  A chunk's
  time is when the generator's loop read it; a high share means the loop read late (a busy generator) or
  the server sent chunks together, and the gap percentiles then describe the reads, not the server.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.metrics.percentiles import pct_ms
from satpoint.metrics.records import Records

F64 = npt.NDArray[np.float64]
#: the stream figures' percentiles (a subset of ``metrics.stats.PCTS``, plus ``max``)
STREAM_PCTS = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def ttfc_s(rec: Records) -> F64:
    """Time to first chunk from the intended send time, per row: ``first − intended``; a censored row
    without a chunk counts at ``done − intended`` (a lower bound); NaN for other rows without a chunk."""
    s = rec.stream
    if s is None:
        return np.full(len(rec), np.nan)
    out: F64 = s.first_s - rec.intended
    waiting = np.isnan(s.first_s) & rec.censored_mask()
    out[waiting] = (rec.done - rec.intended)[waiting]
    return out


def gaps_s(rec: Records, rows: npt.NDArray[np.bool_]) -> F64:
    """Every gap between chunks of the picked rows, seconds (from the exact microsecond gaps)."""
    if rec.stream is None:
        return np.zeros(0)
    gaps: F64 = rec.stream.gaps_of(rows).astype(np.float64) / 1e6
    return gaps


def stream_window(part: Records, rec: Records, w0: float, w1: float) -> dict[str, Any] | None:
    """The stream figures of a steady window: ``part`` the rows due in ``[w0, w1)``, ``rec`` all rows (for
    the streams that ended in the window).  None when the rows carry no stream columns."""
    if part.stream is None or rec.stream is None:
        return None
    win = w1 - w0
    counted = part.latency_mask()
    ttfc = ttfc_s(part)[counted]
    ok_ended = rec.ok_mask() & (rec.done >= w0) & (rec.done < w1)
    chunks = rec.stream.chunks[ok_ended]
    streamed = part.stream.chunks > 0
    n_gaps = int(part.stream.gap_count[counted & (part.stream.gap_start >= 0)].sum())
    coalesced = int(part.stream.coalesced[counted].sum())
    return {
        "ttfc_ms": pct_ms(ttfc, STREAM_PCTS),
        "gap_ms": pct_ms(gaps_s(part, counted), STREAM_PCTS),
        "chunks_per_s": round(float(chunks.sum()) / win, 4) if win > 0 else None,
        "requests_per_s": round(float(len(chunks)) / win, 4) if win > 0 else None,
        "chunks_per_request": round(float(chunks.mean()), 4) if len(chunks) else None,
        "streams": int(np.count_nonzero(streamed)),
        "no_chunk": int(np.count_nonzero(counted & ~streamed)),
        "coalesced_gaps": coalesced,
        "coalesced_share": round(coalesced / n_gaps, 4) if n_gaps else None,
    }
