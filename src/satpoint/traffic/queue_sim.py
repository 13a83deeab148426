"""What a simple queue would do with the exact arrivals: a c-server FIFO queue, simulated.

The prediction beside a replay's measurement: requests arrive at the trace's times, wait for one of the
server's ``slots`` (its concurrency) in arrival order, and each holds its slot for a service time, either
a constant or drawn (seeded, with replacement) from the service times measured at low load.  Where the
measured latency agrees with this, the server behaves as a simple queue; where it is much worse, something
else (GC pauses, batching, contention) is at work.

The recurrence (Kiefer-Wolfowitz): keep the slots' next-free times in a min-heap; request i starts at
``max(a_i, earliest free)`` and frees its slot at start + s_i; latency = done - a_i (waiting + service).
Three paths, all exact:

- one slot: Lindley's recursion vectorised, ``done_i = C_i + max_{k<=i}(a_k - C_{k-1})`` with C the
  cumulative service (``numpy.maximum.accumulate``);
- a constant service time: slots free in the order they were taken, so request i waits for request
  i - c and the queue is c interleaved single-slot queues (arrivals i = r mod c), each vectorised;
- otherwise: the heap, ``heapq.heapreplace`` over Python floats, O(n log c).

Measured on this project's 2-core machine (benchmarks/RESULTS.md, "Traffic importers and the queue
prediction"): 10^6 arrivals take 0.04-0.05 s on the vectorised paths and 0.34-0.39 s through the heap
(4 and 40 slots).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
Service = float | Sequence[float] | F64


def service_times(n: int, service: Service, seed: int = 0) -> F64:
    """n service times: the constant ``service``, or n draws with replacement from the sample ``service``
    (measured low-load service times) by ``numpy.random.default_rng(seed)``."""
    s = np.asarray(service, dtype=np.float64)
    if s.ndim == 0:
        if not (math.isfinite(float(s)) and float(s) >= 0):
            raise ValueError(f"service time {float(s)!r} is not a finite time >= 0")
        return np.full(n, float(s))
    if s.size == 0 or not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError("the service-time sample must be non-empty, finite and >= 0")
    drawn: F64 = np.random.default_rng(seed).choice(s.ravel(), size=n, replace=True)
    return drawn


def _lindley_done(a: F64, s: F64) -> F64:
    """Completion times of one FIFO slot (a sorted)."""
    c = np.cumsum(s)
    best: F64 = np.maximum.accumulate(a - (c - s))
    return c + best


def _heap_done(a: F64, s: F64, slots: int) -> F64:
    heap = [-math.inf] * slots
    done = [0.0] * len(a)
    replace = heapq.heapreplace
    for i, (ai, si) in enumerate(zip(a.tolist(), s.tolist(), strict=True)):
        f = heap[0]
        d = (ai if ai > f else f) + si
        replace(heap, d)
        done[i] = d
    return np.asarray(done, dtype=np.float64)


def fifo_sojourn(arrivals_s: npt.ArrayLike, service_s: npt.ArrayLike, slots: int) -> F64:
    """Latency (waiting + service) per request of a FIFO queue with ``slots`` servers, for sorted arrival
    times and one service time per request."""
    a = np.asarray(arrivals_s, dtype=np.float64)
    s = np.asarray(service_s, dtype=np.float64)
    if a.ndim != 1 or s.shape != a.shape:
        raise ValueError("arrivals and service times must be 1-D arrays of one length")
    if slots < 1:
        raise ValueError("slots must be >= 1")
    n = len(a)
    if n == 0:
        return np.zeros(0)
    if np.any(np.diff(a) < 0):
        raise ValueError("arrival times must be sorted")
    done: F64
    rel: F64 = a - a[0]  # relative times keep the precision that epoch seconds would spend on the date
    if slots == 1:
        done = _lindley_done(rel, s)
    elif slots >= n:
        done = rel + s
    elif np.all(s == s[0]):
        done = np.empty(n)
        for r in range(slots):
            done[r::slots] = _lindley_done(rel[r::slots], s[r::slots])
    else:
        done = _heap_done(rel, s, slots)
    return done - rel


def simulate(arrivals_s: npt.ArrayLike, service: Service, slots: int, seed: int = 0) -> F64:
    """Predicted latency per request: ``fifo_sojourn`` with service times from ``service_times``."""
    a = np.asarray(arrivals_s, dtype=np.float64)
    return fifo_sojourn(a, service_times(len(a), service, seed), slots)


def predict_percentiles(
    arrivals: npt.ArrayLike,
    service: Service,
    slots: int,
    qs: Sequence[float] = (50.0, 99.0),
    seed: int = 0,
) -> dict[float, float]:
    """Predicted latency percentiles in seconds, ``{q: value}`` for q in percent (numpy's linear
    interpolation between order statistics, as satpoint's measured percentiles)."""
    lat = simulate(arrivals, service, slots, seed)
    if len(lat) == 0:
        return {float(q): math.nan for q in qs}
    vals = np.percentile(lat, list(qs))
    return {float(q): float(v) for q, v in zip(qs, vals, strict=True)}
