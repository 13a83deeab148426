"""Aggregates over records: steady-window stage metrics and per-second intervals.

Percentiles are exact order statistics of the recorded values (numpy's default linear interpolation
between neighbours), computed from the raw per-request rows; nothing is binned, so a merge of shards
or of intervals loses no precision.

Latency percentiles include every request due in the window that succeeded, plus the censored ones
(timed out, still outstanding at the end, never sent) at the time they had waited so far: leaving
them out would hide exactly the requests that suffered most.  Requests answered with an error are
counted in ``error_rate`` and by class, not in latency.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.metrics.percentiles import PCTS as PCTS
from satpoint.metrics.percentiles import pct_ms as pct_ms
from satpoint.metrics.records import ERROR_NAMES, Outcome, Records
from satpoint.metrics.stream_stats import stream_window
from satpoint.plan import StageSpan

LATE_S = 0.001  # a request that left more than 1 ms after its due time is "late"


#: the steady window starts at least this many p50 latencies after the hold begins ...
FILL_LATENCIES = 1.5
#: ... but never later than this fraction of the hold (the rest is the window)
MAX_SETTLE_FRAC = 0.6


def _hold_p50_s(rec: Records, span: StageSpan) -> float:
    """Median latency of the successful requests due in the stage's hold (0 if none)."""
    lo, hi = np.searchsorted(rec.intended, [span.hold_start_s, span.end_s], side="left")
    part = rec.select(slice(int(lo), int(hi)))
    lat = part.latency_s()[part.ok_mask()]
    return float(np.median(lat)) if len(lat) else 0.0


def settle_s(hold_s: float) -> float:
    """Start of the steady window after the hold begins: 20 % of the hold, within [0.5 s, 5 s], and never
    more than half the hold (so a hold under 1 s keeps half of itself as its window)."""
    return min(max(0.2 * hold_s, 0.5), 5.0, 0.5 * hold_s)


@dataclass
class StageMetrics:
    index: int
    target_rps: float
    ramp_s: float
    hold_s: float
    window_start_s: float
    window_end_s: float
    requests: int
    offered_rps: float
    throughput_rps: float
    completed_rps: float
    error_rate: float
    errors: dict[str, int]
    latency_ms: dict[str, float | None]
    service_ms: dict[str, float | None]
    send_lag_ms: dict[str, float | None]
    generator_lag_ms: dict[str, float | None]  # send lag of requests that had a free slot: the generator's own
    late_fraction: float
    waited_fraction: float
    censored: int
    queue_growth_rps: float  # slope of (due - finished) over the window; > 0 means a growing queue
    latency_trend_ms_per_s: float  # slope of latency against due time over the window
    verdict: str = ""
    reasons: list[str] = field(default_factory=list)
    #: requests due in the window that the transport sent a second time after their first attempt failed
    #: before any answer (``Records.retried``); their outcome and latency are those of the retry
    retries: int = 0
    #: the run was interrupted during this stage: its window ends where the rows end (``incomplete``
    #: when too little of it was measured to judge)
    interrupted: bool = False
    #: requests due in the window that finished (any outcome, timeouts included), followed past the window's
    #: end until they finished, timed out or the run gave up on them, per second of window: the fate of the
    #: same requests ``offered_rps`` counts (``completed_rps`` counts completions *inside* the window, which
    #: a server whose latency is a sizeable part of the window does not match even when it keeps up)
    due_finished_rps: float = 0.0
    #: standard error of ``latency_trend_ms_per_s`` (from the scatter of the latencies about their trend):
    #: a trend of a few standard errors is the server answering slower than requests come, not noise
    latency_trend_se_ms_per_s: float = 0.0
    #: streamed answers (``--stream``): time to first chunk, gaps, chunks/s (``metrics.stream_stats``); None
    #: when the rows carry no stream columns
    stream: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _slope(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> float:
    if len(x) < 3 or float(np.ptp(x)) == 0.0:
        return 0.0
    xc = x - x.mean()
    return float(np.dot(xc, y - y.mean()) / np.dot(xc, xc))


def _slope_se(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> float:
    """Standard error of the least-squares slope of ``y`` against ``x`` (0 with fewer than 3 points)."""
    if len(x) < 3 or float(np.ptp(x)) == 0.0:
        return 0.0
    xc = x - x.mean()
    sxx = float(np.dot(xc, xc))
    b = float(np.dot(xc, y - y.mean())) / sxx
    resid = y - y.mean() - b * xc
    return math.sqrt(float(np.dot(resid, resid)) / (len(x) - 2) / sxx)


def queue_growth_rps(rec: Records, t_start: float, t_end: float, points: int = 24) -> float:
    """Least-squares slope of the outstanding count Q(t) = #due(<=t) - #finished(<=t) in the window."""
    finished = np.sort(rec.done[rec.finished_mask()])
    ts = np.linspace(t_start, t_end, points)
    q = np.searchsorted(rec.intended, ts, side="right") - np.searchsorted(finished, ts, side="right")
    return _slope(ts, q.astype(np.float64))


def stage_metrics(
    rec: Records, span: StageSpan, settle: float | None = None, until_s: float | None = None
) -> StageMetrics:
    """Metrics of the stage's steady window; ``until_s`` cuts a stage that was stopped early (the
    window is then its last seconds before the stop, ramp included if need be)."""
    st = span.stage
    s = settle_s(st.hold_s) if settle is None else settle
    if settle is None:
        # a slow server fills its pipeline for about one latency after the ramp (Little's law): the
        # outstanding count grows meanwhile although nothing queues, so the window starts after that
        s = max(s, min(FILL_LATENCIES * _hold_p50_s(rec, span), MAX_SETTLE_FRAC * st.hold_s))
    w0, w1 = span.hold_start_s + s, span.end_s
    if until_s is not None and until_s < w1:
        w1 = max(until_s, span.start_s + 1e-3)
        w0 = max(span.start_s, min(w0, w1 - 2.0))
    win = w1 - w0
    lo, hi = np.searchsorted(rec.intended, [w0, w1], side="left")
    part = rec.select(np.arange(lo, hi))
    n = len(part)
    oc = part.outcome
    ok = part.ok_mask()
    censored = part.censored_mask()
    err_mask = part.error_mask()
    errors: dict[str, int] = {}
    for code in np.unique(oc[err_mask]):
        o = Outcome(int(code))
        if o in (Outcome.HTTP_ERROR, Outcome.GRPC_ERROR):
            for status in np.unique(part.status[oc == code]):
                prefix = "http" if o is Outcome.HTTP_ERROR else "grpc"
                errors[f"{prefix}_{int(status)}"] = int(np.count_nonzero((oc == code) & (part.status == status)))
        else:
            errors[ERROR_NAMES[o]] = int(np.count_nonzero(oc == code))
    n_err = int(np.count_nonzero(err_mask))
    # completions inside the window, by completion time (all rows, not just those due in the window)
    done_all = rec.done
    in_win = (done_all >= w0) & (done_all < w1)
    ok_done = int(np.count_nonzero(in_win & rec.ok_mask()))
    fin_done = int(np.count_nonzero(in_win & rec.finished_mask()))  # in_win is False where done is NaN
    lat = part.latency_s()
    lat_sel = lat[part.latency_mask()]
    lag = part.send_lag_s()
    free = ~part.waited & ~np.isnan(lag)
    sent = ~np.isnan(lag)
    late = int(np.count_nonzero(lag[sent] > LATE_S)) + int(np.count_nonzero(oc == Outcome.NOT_SENT))
    x = part.intended[ok]
    trend = _slope(x, lat[ok]) * 1000 if len(x) > 2 else 0.0
    trend_se = _slope_se(x, lat[ok]) * 1000
    return StageMetrics(
        index=span.index,
        target_rps=st.target_rps,
        ramp_s=st.ramp_s,
        hold_s=st.hold_s,
        window_start_s=round(w0, 6),
        window_end_s=round(w1, 6),
        requests=n,
        offered_rps=n / win if win > 0 else math.nan,
        throughput_rps=ok_done / win if win > 0 else math.nan,
        completed_rps=fin_done / win if win > 0 else math.nan,
        error_rate=n_err / n if n else 0.0,
        errors=errors,
        latency_ms=pct_ms(lat_sel),
        service_ms=pct_ms(part.service_s()[ok]),
        send_lag_ms=pct_ms(lag, {"p50": 50.0, "p99": 99.0}),
        generator_lag_ms=pct_ms(lag[free], {"p50": 50.0, "p99": 99.0}),
        late_fraction=late / n if n else 0.0,
        waited_fraction=float(np.count_nonzero(part.waited)) / n if n else 0.0,
        censored=int(np.count_nonzero(censored)),
        queue_growth_rps=queue_growth_rps(rec, w0, w1),
        latency_trend_ms_per_s=trend,
        retries=int(np.count_nonzero(part.retried)),
        latency_trend_se_ms_per_s=trend_se,
        due_finished_rps=int(np.count_nonzero(part.finished_mask())) / win if win > 0 else 0.0,
        stream=stream_window(part, rec, w0, w1),
    )


@dataclass
class Interval:
    second: int
    stage: int
    offered: int
    throughput: int
    errors: int
    latency_ms: dict[str, float | None]
    send_lag_p99_ms: float | None
    inflight_end: int


def intervals(rec: Records, spans: list[StageSpan]) -> list[Interval]:
    """One row per second of the run clock: offered (due), OK completions, errors, latency of due rows."""
    if len(rec) == 0:
        return []
    end = max(float(np.nanmax(rec.done)) if np.any(~np.isnan(rec.done)) else 0.0, spans[-1].end_s)
    seconds = math.floor(end) + 1  # the last second [s, s+1) holds ``end`` even when it is a whole second
    bounds = np.arange(seconds + 1, dtype=np.float64)
    due_idx = np.searchsorted(rec.intended, bounds)
    ok_done = np.sort(rec.done[rec.ok_mask()])
    ok_counts = np.diff(np.searchsorted(ok_done, bounds))
    err_counts = np.diff(np.searchsorted(np.sort(rec.done[rec.error_mask()]), bounds))
    fin = np.sort(rec.done[rec.finished_mask()])
    lat = rec.latency_s()
    lag = rec.send_lag_s()
    keep = rec.latency_mask()
    out = []
    for s in range(seconds):
        a, b = int(due_idx[s]), int(due_idx[s + 1])
        stage = next((sp.index for sp in spans if sp.start_s <= s < sp.end_s), -1)
        sl = slice(a, b)
        lg = lag[sl]
        lg = lg[~np.isnan(lg)]
        out.append(
            Interval(
                second=s,
                stage=stage,
                offered=b - a,
                throughput=int(ok_counts[s]),
                errors=int(err_counts[s]),
                latency_ms=pct_ms(lat[sl][keep[sl]], {"p50": 50.0, "p90": 90.0, "p99": 99.0}),
                send_lag_p99_ms=round(float(np.percentile(lg, 99)) * 1000, 4) if len(lg) else None,
                inflight_end=int(due_idx[s + 1] - np.searchsorted(fin, s + 1.0)),
            )
        )
    return out
