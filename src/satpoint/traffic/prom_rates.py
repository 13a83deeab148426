"""Arrivals drawn from a Prometheus request-rate series: a seeded non-homogeneous Poisson process.

Prometheus keeps counters, not requests: ``rate(seldon_model_infer_total[1m])`` over a day, exported with
the HTTP API's ``query_range``, is a rate *profile* at the query's step (often 15-60 s).  This module
turns it back into arrival times a replay can send: a Poisson process whose rate is the series'.

Inputs:

- the JSON body of ``GET /api/v1/query_range`` (``{"status": "success", "data": {"resultType": "matrix",
  "result": [{"metric": {...}, "values": [[<unix s>, "<rate>"], ...]}, ...]}}``; the ``data`` object alone
  is read too).  Several series (a ``sum by (model)`` query) are summed; ``select={"model": "iris"}``
  keeps only the series whose labels match;
- a CSV ``timestamp,rate`` (a header line is optional; ``#`` comments and blank lines are skipped); the
  timestamp in epoch seconds (milliseconds above 1e11) or ISO 8601.

The rate is piecewise constant: a sample at time t with step s (the median spacing of the series, the query
step) stands for the interval [t - s, t), because ``rate(...[w])`` at t averages the past; where samples
are missing (Prometheus leaves out steps without data) or NaN the rate is 0.  A negative or infinite rate
is refused.

Arrivals are drawn by the time-change method, exact for a piecewise-constant rate: the points of a
unit-rate Poisson process (cumulative sums of Exp(1) draws from ``numpy.random.default_rng(seed)``) are
mapped through the inverse of the integrated rate Λ(t).  The draws are consumed in one fixed sequence and
the chunks only cut it, so for a given seed the arrivals are the same whatever the chunk size; memory is
one chunk.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.errors import SatpointError
from satpoint.traffic.envoy_log import parse_time

F64 = npt.NDArray[np.float64]


class PromRatesError(SatpointError):
    """The rate series cannot be read (not a matrix result, a bad sample, no series left)."""


@dataclass(frozen=True)
class RateSeries:
    """A piecewise-constant rate: ``rates_rps[i]`` holds on ``[edges_s[i], edges_s[i + 1])``."""

    edges_s: F64
    rates_rps: F64

    def expected_count(self) -> float:
        return float(np.sum(self.rates_rps * np.diff(self.edges_s)))

    def cumulative(self) -> F64:
        """Λ at every edge: the expected number of arrivals from the first edge."""
        return np.concatenate(([0.0], np.cumsum(self.rates_rps * np.diff(self.edges_s))))


def _intervals(t: F64, v: F64, step_s: float) -> tuple[F64, F64]:
    """(starts, ends) of one series' samples: [t - step, t), not reaching back past the previous sample."""
    prev = np.concatenate(([-math.inf], t[:-1]))
    return np.maximum(t - step_s, prev), t


def series_from_samples(samples: list[tuple[F64, F64]], step_s: float | None = None) -> RateSeries:
    """The sum of one or more sampled rate series (times, values), each sample standing for the step
    before it (``step_s``, or the median spacing of the samples of all series)."""
    clean: list[tuple[F64, F64]] = []
    for t, v in samples:
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        if np.any(np.diff(t) == 0):
            raise PromRatesError("two samples of one series at the same time")
        if np.any(np.isinf(v)) or np.any(v < 0):
            bad = int(np.flatnonzero(np.isinf(v) | (v < 0))[0])
            raise PromRatesError(f"sample at {t[bad]:.3f}: rate {v[bad]!r} is not a finite rate >= 0")
        keep = ~np.isnan(v)
        clean.append((t[keep], v[keep]))
    if step_s is None:
        gaps = np.concatenate([np.diff(t) for t, _ in samples])
        if len(gaps) == 0:
            raise PromRatesError("one sample gives no step (the query's): export at least two")
        step_s = float(np.median(gaps))
    parts = [(*_intervals(t, v, step_s), v) for t, v in clean if len(t)]
    if not parts:
        raise PromRatesError("no samples with a rate")
    edges = np.unique(np.concatenate([np.concatenate((s, e)) for s, e, _ in parts]))
    rates = np.zeros(len(edges) - 1)
    left = edges[:-1]
    for starts, ends, v in parts:
        k = np.searchsorted(ends, left, side="right")
        inside = k < len(ends)
        kk = np.minimum(k, len(ends) - 1)
        inside &= starts[kk] <= left
        rates += np.where(inside, v[kk], 0.0)
    return RateSeries(edges, rates)


def _matches(labels: Mapping[str, str], select: Mapping[str, str] | None) -> bool:
    return select is None or all(labels.get(k) == v for k, v in select.items())


def read_prom_json(path: Path, select: Mapping[str, str] | None = None) -> RateSeries:
    try:
        doc: Any = json.loads(path.read_text())
    except ValueError as e:
        raise PromRatesError(f"{path}: not JSON ({e})") from None
    if isinstance(doc, dict) and doc.get("status") == "error":
        raise PromRatesError(f"{path}: Prometheus answered an error: {doc.get('errorType')}: {doc.get('error')}")
    data = doc.get("data", doc) if isinstance(doc, dict) else None
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        got = data.get("resultType") if isinstance(data, dict) else type(doc).__name__
        raise PromRatesError(f"{path}: not a query_range matrix result (resultType {got!r})")
    series = data["result"]
    chosen = [s for s in series if _matches(s.get("metric", {}), select)]
    if not chosen:
        seen = [s.get("metric", {}) for s in series][:5]
        raise PromRatesError(f"{path}: no series matches {dict(select or {})}; series: {seen}")
    samples: list[tuple[F64, F64]] = []
    gaps: list[F64] = []  # the step is the query's, common to all series, selected or not
    for n, s in enumerate(series):
        try:
            arr = np.array([(float(t), float(v)) for t, v in s.get("values", [])], dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise PromRatesError(f"{path}: series {n} ({s.get('metric', {})}): bad sample ({e})") from None
        arr = arr.reshape(-1, 2)
        gaps.append(np.diff(np.sort(arr[:, 0])))
        if len(arr) and any(s is c for c in chosen):
            samples.append((arr[:, 0], arr[:, 1]))
    if not samples:
        raise PromRatesError(f"{path}: the series have no samples")
    all_gaps = np.concatenate(gaps)
    step = float(np.median(all_gaps)) if len(all_gaps) else None
    try:
        return series_from_samples(samples, step)
    except PromRatesError as e:
        raise PromRatesError(f"{path}: {e}") from None


def read_prom_csv(path: Path) -> RateSeries:
    ts: list[float] = []
    vs: list[float] = []
    with path.open(newline="") as f:
        for lineno, row in enumerate(csv.reader(f), start=1):
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            if len(row) < 2:
                raise PromRatesError(f"{path}:{lineno}: expected 'timestamp,rate', got {','.join(row)!r}")
            try:
                t, v = parse_time(row[0]), float(row[1])
            except ValueError as e:
                if not ts and lineno == 1:
                    continue  # a header line
                raise PromRatesError(f"{path}:{lineno}: {e}") from None
            ts.append(t)
            vs.append(v)
    if not ts:
        raise PromRatesError(f"{path}: no 'timestamp,rate' rows")
    try:
        return series_from_samples([(np.asarray(ts), np.asarray(vs))])
    except PromRatesError as e:
        raise PromRatesError(f"{path}: {e}") from None


def read_prom_rates(path: str | Path, select: Mapping[str, str] | None = None) -> RateSeries:
    """A rate series from a query_range JSON or a ``timestamp,rate`` CSV (by the first character)."""
    p = Path(path)
    with p.open("rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith((b"{", b"[")):
        return read_prom_json(p, select)
    if select:
        raise PromRatesError(f"{p}: a CSV holds one series; select= is for JSON results")
    return read_prom_csv(p)


def arrivals_from_rates(series: RateSeries, seed: int, chunk: int = 65536) -> Iterator[F64]:
    """Chunks of arrival times (epoch seconds, sorted) of a Poisson process with the series' rate."""
    if chunk < 1:
        raise ValueError("chunk must be >= 1")
    cum = series.cumulative()
    total = float(cum[-1])
    rng = np.random.default_rng(seed)
    carry = 0.0
    while True:
        e = rng.standard_exponential(chunk)
        e[0] += carry
        u = np.cumsum(e)
        carry = float(u[-1])
        if carry >= total:
            u = u[u < total]
        if len(u):
            k = np.searchsorted(cum, u, side="right") - 1
            yield series.edges_s[k] + (u - cum[k]) / series.rates_rps[k]
        if carry >= total:
            return


def iter_prom_arrivals(
    path: str | Path, seed: int, chunk: int = 65536, *, select: Mapping[str, str] | None = None
) -> Iterator[F64]:
    """Chunks of absolute arrival times (epoch seconds, float64, sorted) drawn as a seeded non-homogeneous
    Poisson process from a Prometheus rate series (query_range JSON or CSV; see the module's notes)."""
    yield from arrivals_from_rates(read_prom_rates(path, select), seed, chunk)


def chosen_series(path: str | Path, select: Mapping[str, str] | None = None) -> int:
    """How many series of a rate file are replayed (summed): those ``select`` matches (a CSV holds one)."""
    p = Path(path)
    with p.open("rb") as f:
        head = f.read(4096).lstrip()
    if not head.startswith((b"{", b"[")):
        return 1
    try:
        doc: Any = json.loads(p.read_text())
    except ValueError:
        return 0
    data = doc.get("data", doc) if isinstance(doc, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        return 0
    return sum(1 for s in result if isinstance(s, dict) and _matches(s.get("metric", {}), select))
