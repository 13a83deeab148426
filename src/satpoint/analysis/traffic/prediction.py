"""A simple queue's prediction beside a replay's measurement (``run --trace``, ``summary.json``'s
``trace.prediction``).

The replay's own intended times (every scheduled request, at the trace's times divided by the speed) go
through a c-server FIFO queue (``traffic.queue_sim``); each stage's predicted p50/p99 are taken over the
same rows as its measured ones (the stage's steady window) and set beside them, with a verdict: the server
behaves as a simple queue, or measured is much worse (something else is at work: GC, batching, contention).

What the queue is given, all from the replay itself:

- Service times: ``done - sent`` of the OK requests sent while no other request was in flight (the server
  was idle: nothing can have queued; low load by definition), drawn with replacement (seed 0).  Fewer
  than ``MIN_SAMPLE`` of them (a server never idle): the ``MIN_SAMPLE`` least loaded requests instead
  (the fewest others in flight when sent, ties kept).
- Busy throughput: where requests queued at the server (service time above ``QUEUED_FACTOR`` x the
  sample's p50), the server's slots were all busy; the rate of completions along runs of such requests
  (gaps no longer than one service time, runs of at least ``MIN_RUN`` and 4 x the slots) is the server's
  capacity ``c / slot time`` (see ``busy_throughput``).
- Slots (the server's concurrency): ``--server-slots N`` when given; else estimated as
  ``round(busy throughput x mean service time)`` when the replay queued the server (at least
  ``MIN_BUSY_PAIRS`` busy gaps); else the most unqueued requests seen in service at once (the server was
  never full, so any concurrency at least that large predicts the same; see ``peak_unqueued``).
- Overhead: the client-side service time holds the network and HTTP overhead besides the time a slot is
  held.  With a busy throughput, a slot is held ``c / busy throughput`` on average; the rest of the mean
  service time (never negative, never more) is overhead, added to every predicted latency and taken off
  every drawn service time.  Without one, the overhead is 0.

A stage agrees when measured p50 and p99 are both within ``AGREE_FRAC`` (or ``AGREE_MS``) of predicted;
it is "much worse" when measured is ``MUCH_WORSE`` times predicted or more (on p50 or p99).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.metrics.records import Records
from satpoint.traffic.queue_sim import fifo_sojourn, service_times

F64 = npt.NDArray[np.float64]

#: fewer idle-server requests than this: the lowest-rate stage's service times instead
MIN_SAMPLE = 50
#: a request whose service time exceeds this multiple of the sample's p50 queued at the server
QUEUED_FACTOR = 1.5
#: busy gaps needed to measure the busy throughput
MIN_BUSY_PAIRS = 100
#: a busy run counts when it holds at least this many gaps (and 4 x the slots, once known)
MIN_RUN = 16
#: measured within this fraction (or AGREE_MS) of predicted, on p50 and p99: a simple queue
AGREE_FRAC = 0.15
AGREE_MS = 1.0
#: measured at least this multiple of predicted (p50 or p99): something else is at work
MUCH_WORSE = 1.5
SEED = 0

TEXT = {
    "simple_queue": "behaves as a simple queue",
    "worse": "measured worse than a simple queue ({x:.2f}x)",
    "much_worse": "measured much worse than a simple queue ({x:.1f}x): something else is at work "
    "(GC, batching, contention)",
    "better": "measured better than a simple queue ({x:.2f}x): the queue's slots or service times are off",
}


@dataclass(frozen=True)
class QueueModel:
    """What the simple queue is given: slot times (s), slots, overhead (s), and where they came from."""

    slot_s: F64
    slots: int
    slots_source: str  # "given" | "busy_throughput" | "peak_concurrency"
    overhead_s: float
    service_source: str  # "idle_server" | "least_loaded (...)"
    busy_rps: float | None

    def describe(self) -> dict[str, Any]:
        s = self.slot_s + self.overhead_s
        return {
            "slots": self.slots,
            "slots_source": self.slots_source,
            "service_source": self.service_source,
            "service_samples": len(s),
            "service_ms": {
                "p50": _ms(float(np.percentile(s, 50))),
                "p99": _ms(float(np.percentile(s, 99))),
                "mean": _ms(float(s.mean())),
            },
            "overhead_ms": _ms(self.overhead_s),
            "busy_rps": round(self.busy_rps, 2) if self.busy_rps is not None else None,
            "seed": SEED,
        }


def _ms(v: float) -> float:
    return round(v * 1e3, 4)


def _in_flight_at_send(rec: Records) -> npt.NDArray[np.int64]:
    """Per row: how many other requests were in flight when it was sent (-1 for rows never sent)."""
    sent = rec.sent
    has = ~np.isnan(sent)
    s_sorted = np.sort(sent[has])
    done = np.where(np.isnan(rec.done), np.inf, rec.done)[has]
    d_sorted = np.sort(done)
    out = np.full(len(sent), -1, dtype=np.int64)
    out[has] = np.searchsorted(s_sorted, sent[has], side="left") - np.searchsorted(d_sorted, sent[has], side="right")
    return out


def service_sample(rec: Records) -> tuple[F64, str]:
    """Low-load service times (s) and where they came from (see the module's doc)."""
    ok = rec.ok_mask()
    svc = rec.service_s()
    flight = _in_flight_at_send(rec)
    idle = ok & (flight == 0)
    if int(np.count_nonzero(idle)) >= MIN_SAMPLE or not ok.any():
        return svc[idle], "idle_server"
    least = np.sort(flight[ok])[min(MIN_SAMPLE, int(ok.sum())) - 1]
    return svc[ok & (flight <= least)], f"least_loaded (<= {int(least)} others in flight)"


def busy_throughput(rec: Records, typical_s: float, min_run: int = MIN_RUN) -> float | None:
    """Completions per second while the server's slots were all busy (None: it never queued enough).

    Completions in time order; two successive ones are linked when both requests queued at the server and
    the gap between them is at most one service time.  Runs of at least ``min_run`` links (short queueing
    episodes are left out: their first and last gaps are biased) give the rate: links / time spanned."""
    ok = rec.ok_mask()
    order = np.argsort(rec.done[ok], kind="stable")
    done = rec.done[ok][order]
    queued = (rec.service_s()[ok] > QUEUED_FACTOR * typical_s)[order]
    gaps = np.diff(done)
    link = (queued[1:] & queued[:-1] & (gaps <= typical_s)).astype(np.int8)
    edges = np.diff(np.concatenate(([0], link, [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # link runs [start, end)
    long = (ends - starts) >= min_run
    n = int((ends - starts)[long].sum())
    span = float((done[ends[long]] - done[starts[long]]).sum())
    return n / span if n >= MIN_BUSY_PAIRS and span > 0 else None


def peak_unqueued(rec: Records, sample: F64) -> int:
    """The most unqueued requests (service time within the sample's p99) in service at once; each is
    counted over its [sent, done] shrunk by a tenth of the fastest service time at both ends, so the
    overhead outside the server (assumed smaller) does not make two successive requests overlap."""
    margin = 0.1 * float(sample.min())
    keep = rec.ok_mask() & (rec.service_s() <= float(np.percentile(sample, 99)))
    sent, done = rec.sent[keep] + margin, rec.done[keep] - margin
    if not len(sent):
        return 1
    times = np.concatenate([sent, done])
    step = np.concatenate([np.ones(len(sent), dtype=np.int64), -np.ones(len(done), dtype=np.int64)])
    order = np.lexsort((step, times))  # at equal times a request ends before the next one starts
    return max(1, int(np.cumsum(step[order]).max()))


def queue_model(rec: Records, slots: int | None) -> QueueModel | None:
    """The queue the replay is compared with (None: no service time was measured)."""
    sample, source = service_sample(rec)
    sample = sample[np.isfinite(sample) & (sample >= 0)]
    if not len(sample):
        return None
    typical = float(np.percentile(sample, 50))
    mean = float(sample.mean())
    busy = busy_throughput(rec, typical, max(MIN_RUN, 4 * (slots or 0)))
    if slots is not None:
        c, c_source = slots, "given"
    elif busy is not None:
        c, c_source = max(1, round(busy * mean)), "busy_throughput"
        if 4 * c > MIN_RUN:  # a larger server: longer runs, then its count again
            busy = busy_throughput(rec, typical, 4 * c) or busy
            c = max(1, round(busy * mean))
    else:
        c, c_source = peak_unqueued(rec, sample), "peak_concurrency"
    overhead = min(max(0.0, mean - c / busy), float(sample.min())) if busy is not None else 0.0
    return QueueModel(np.maximum(sample - overhead, 0.0), c, c_source, overhead, source, busy)


def verdict(measured: dict[str, Any], predicted: dict[str, float]) -> tuple[str, float | None]:
    """``(code, ratio)``: the ratio is measured / predicted on the percentile furthest from agreement."""
    ratios: list[float] = []
    agree = True
    for q in ("p50", "p99"):
        m, p = measured.get(q), predicted.get(q)
        if m is None or p is None or not (math.isfinite(m) and math.isfinite(p)) or p <= 0:
            return "unknown", None
        agree = agree and abs(m - p) <= max(AGREE_FRAC * p, AGREE_MS)
        ratios.append(m / p)
    worst = max(ratios, key=lambda r: abs(math.log(r)) if r > 0 else math.inf)
    if agree:
        return "simple_queue", worst
    if max(ratios) >= MUCH_WORSE:
        return "much_worse", max(ratios)
    return ("worse" if worst > 1 else "better"), worst


def describe_verdict(code: str, ratio: float | None) -> str:
    if code not in TEXT:
        return "no prediction (no latency measured)"
    return TEXT[code].format(x=ratio if ratio is not None else math.nan)


def predict_stages(rec: Records, stages: list[dict[str, Any]], model: QueueModel) -> list[dict[str, Any]]:
    """One row per stage: measured and predicted p50/p99 (ms) over the stage's window, and the verdict."""
    n = len(rec)
    lat = fifo_sojourn(rec.intended, service_times(n, model.slot_s, SEED), model.slots) + model.overhead_s
    rows: list[dict[str, Any]] = []
    for st in stages:
        lo, hi = np.searchsorted(rec.intended, [st["window_start_s"], st["window_end_s"]], side="left")
        part = lat[lo:hi]
        pred = (
            {q: _ms(float(np.percentile(part, v))) for q, v in (("p50", 50), ("p99", 99))}
            if len(part)
            else {"p50": math.nan, "p99": math.nan}
        )
        meas = {q: (st.get("latency_ms") or {}).get(q) for q in ("p50", "p99")}
        code, ratio = verdict(meas, pred)
        rows.append(
            {
                "stage": st["index"],
                "requests": int(hi - lo),
                "measured_ms": meas,
                "predicted_ms": {k: (v if math.isfinite(v) else None) for k, v in pred.items()},
                "ratio": round(ratio, 3) if ratio is not None else None,
                "verdict": code,
                "text": describe_verdict(code, ratio),
            }
        )
    return rows


def prediction_block(rec: Records, stages: list[dict[str, Any]], slots: int | None) -> dict[str, Any] | None:
    """``trace.prediction``: the queue's parameters and, per stage, measured beside predicted."""
    if not stages or not len(rec):
        return None
    model = queue_model(rec, slots)
    if model is None:
        return None
    rows = predict_stages(rec, stages, model)
    codes = [r["verdict"] for r in rows]
    return {**model.describe(), "stages": rows, "simple_queue_stages": codes.count("simple_queue")}
