"""Figures at equal offered load for ``satpoint diff``: latency (p50, p90, p99), service time, error rate
and throughput of the stages both sides ran at the same rate, and, when both sides streamed (``--stream``),
time to first chunk and gaps between chunks (p50, p99), each with a 95 % interval from a block bootstrap
over one-second blocks of the steady window (``block_bootstrap``).

Why blocks: neighbouring requests are correlated under queueing (a slow request delays the ones queued
behind it), so resampling single requests would treat correlated rows as independent and give intervals
that are too narrow.  Resampling whole seconds keeps each second's dependence intact.  That is valid when
the correlation dies out well within a second (a queue at utilisation ρ forgets its state within a few
service times / (1 − ρ)², tens of milliseconds for a stable stage) and the window is stationary (the steady
window of a stable stage); near saturation it is neither, and the evidence says so.  With one run per side
the interval is the noise *within* a run, not between runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.analysis.diff_verdict import DEFAULT_TAIL_TOLERANCE, MetricDiff, Side, metric_diff, tolerance_for
from satpoint.metrics.records import Records
from satpoint.metrics.stream_stats import ttfc_s

#: two stages are at the same offered load when their target rates are within 1 %
RATE_MATCH = 0.01
#: bootstrap resamples per figure, and the interval's level
N_BOOT = 400
LEVEL = 0.95
#: fewer one-second blocks than this give no interval (a bootstrap over 2 blocks says nothing)
MIN_BLOCKS = 3

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class StageRows:
    """The rows of one stage's steady window, each with its one-second block."""

    target_rps: float
    verdict: str
    throughput_rps: float
    blocks: int  # blocks of about one second tiling the window
    block_s: float
    latency_s: F64  # the latency rows (answered OK, or censored at the time they waited)
    latency_block: npt.NDArray[np.int64]
    service_s: F64  # OK rows
    service_block: npt.NDArray[np.int64]
    error: F64  # 1.0 for an error row, per row due in the window
    error_block: npt.NDArray[np.int64]
    ok_per_block: F64  # OK rows due per block, per second
    #: streamed answers (``--stream``; None: the stage did not stream): time to first chunk per latency row
    #: (``metrics.stream_stats.ttfc_s``) and every gap between chunks of those rows, each with its block
    ttfc_s: F64 | None = None
    ttfc_block: npt.NDArray[np.int64] | None = None
    gap_s: F64 | None = None
    gap_block: npt.NDArray[np.int64] | None = None


def stage_rows(rec: Records, stage: Mapping[str, Any]) -> StageRows:
    """A stage of ``summary.json`` (``window_start_s``/``window_end_s`` on its segment's clock) and its rows."""
    w0, w1 = float(stage["window_start_s"]), float(stage["window_end_s"])
    win = max(w1 - w0, 1e-9)
    blocks = max(1, math.floor(win))
    width = win / blocks
    lo, hi = np.searchsorted(rec.intended, [w0, w1], side="left")
    part = rec.select(slice(int(lo), int(hi)))
    block = np.minimum(((part.intended - w0) / width).astype(np.int64), blocks - 1)
    lat_m = part.latency_mask()
    ok = part.ok_mask()
    ok_counts = np.bincount(block[ok], minlength=blocks).astype(np.float64) / width
    streams: dict[str, Any] = {}
    if part.stream is not None:  # the rows ``summary.json``'s ``stages[].stream`` counts (``stream_window``)
        ttfc = ttfc_s(part)
        got = lat_m & ~np.isnan(ttfc)
        s = part.stream
        has_gaps = lat_m & (s.gap_start >= 0) & (s.gap_count > 0)
        streams = {
            "ttfc_s": ttfc[got],
            "ttfc_block": block[got],
            "gap_s": s.gaps_of(has_gaps).astype(np.float64) / 1e6,
            "gap_block": np.repeat(block[has_gaps], s.gap_count[has_gaps].astype(np.int64)),
        }
    return StageRows(
        target_rps=float(stage["target_rps"]),
        verdict=str(stage.get("verdict", "")),
        throughput_rps=float(stage.get("throughput_rps") or 0.0),
        blocks=blocks,
        block_s=width,
        latency_s=part.latency_s()[lat_m],
        latency_block=block[lat_m],
        service_s=part.service_s()[ok],
        service_block=block[ok],
        error=part.error_mask().astype(np.float64),  # over every row due in the window, as summary.json's
        error_block=block,
        ok_per_block=ok_counts,
        **streams,
    )


def _groups(values: F64, block: npt.NDArray[np.int64], blocks: int) -> list[F64]:
    order = np.argsort(block, kind="stable")
    cuts = np.searchsorted(block[order], np.arange(1, blocks))
    return [np.asarray(g, dtype=np.float64) for g in np.split(values[order], cuts)]


def block_bootstrap(
    groups: Sequence[F64], stat: Callable[[F64], float], n_boot: int = N_BOOT, seed: int = 0
) -> tuple[float, float] | None:
    """A ``LEVEL`` percentile interval of ``stat`` over the rows of ``groups`` (one array per block),
    resampling whole blocks with replacement; None with fewer than ``MIN_BLOCKS`` blocks."""
    k = len(groups)
    if k < MIN_BLOCKS:
        return None
    rng = np.random.default_rng(seed)
    stats: list[float] = []
    for _ in range(n_boot):
        sample = np.concatenate([groups[i] for i in rng.integers(0, k, k)])
        if len(sample):
            stats.append(stat(sample))
    if not stats:
        return None
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(np.asarray(stats), [tail, 100 - tail])
    return float(lo), float(hi)


_BLOCK_OF = {
    "latency_s": "latency_block",
    "service_s": "service_block",
    "error": "error_block",
    "ttfc_s": "ttfc_block",
    "gap_s": "gap_block",
}


def _pooled_groups(stages: Sequence[StageRows], field: str) -> tuple[F64, list[F64]]:
    values: list[F64] = []
    groups: list[F64] = []
    for st in stages:
        v: F64 = getattr(st, field)
        b: npt.NDArray[np.int64] = getattr(st, _BLOCK_OF[field])
        values.append(v)
        groups.extend(_groups(v, b, st.blocks))
    return (np.concatenate(values) if values else np.zeros(0)), groups


def _rows_side(stages: Sequence[StageRows], field: str, stat: Callable[[F64], float], scale: float, seed: int) -> Side:
    values, groups = _pooled_groups(stages, field)
    blocks = sum(st.blocks for st in stages)
    n = len(stages)
    rows = "gaps" if field == "gap_s" else "requests"
    detail = f"{n} stage{'s' if n > 1 else ''}, {len(values)} {rows}, {blocks} one-second blocks"
    if len(values) == 0:
        return Side(value=None, low=None, high=None, n=n, blocks=blocks, detail=detail)
    ci = block_bootstrap(groups, stat, seed=seed)
    value = stat(values) * scale
    if ci is None:
        return Side(value=round(value, 6), low=None, high=None, n=n, blocks=blocks, detail=detail + ": too few")
    # several stages (measurements) at this rate: the range also spans each stage's own figure, so the
    # noise between measurements counts, not only the noise within them
    own = [stat(v) for st in stages if len(v := getattr(st, field))]
    ci = (min(ci[0], *own), max(ci[1], *own)) if len(own) > 1 else ci
    return Side(
        value=round(value, 6), low=round(ci[0] * scale, 6), high=round(ci[1] * scale, 6), n=n, blocks=blocks,
        detail=detail,
    )  # fmt: skip


def _throughput_side(stages: Sequence[StageRows], seed: int) -> Side:
    groups = [np.asarray([v], dtype=np.float64) for st in stages for v in st.ok_per_block]
    n = len(stages)
    value = statistics.fmean(st.throughput_rps for st in stages)
    ci = block_bootstrap(groups, lambda x: float(np.mean(x)), seed=seed)
    detail = f"{n} stage{'s' if n > 1 else ''}, {len(groups)} one-second blocks"
    if ci is None:
        return Side(value=round(value, 3), low=None, high=None, n=n, blocks=len(groups), detail=detail + ": too few")
    # the interval of the per-second rate, centred on the stage's own figure (completions in its window)
    mean = statistics.fmean(float(g[0]) for g in groups)
    low, high = ci[0] - mean + value, ci[1] - mean + value
    if n > 1:  # and each stage's own figure (the noise between measurements)
        low, high = min(low, *(st.throughput_rps for st in stages)), max(high, *(st.throughput_rps for st in stages))
    return Side(value=round(value, 3), low=round(low, 3), high=round(high, 3), n=n, blocks=len(groups), detail=detail)


def _percentile(q: float) -> Callable[[F64], float]:
    return lambda x: float(np.percentile(x, q))


#: (metric, rows field, statistic, scale to the unit, unit, better)
_ROW_METRICS: tuple[tuple[str, str, Callable[[F64], float], float, str], ...] = (
    ("latency_p50_ms", "latency_s", _percentile(50), 1000.0, "ms"),
    ("latency_p90_ms", "latency_s", _percentile(90), 1000.0, "ms"),
    ("latency_p99_ms", "latency_s", _percentile(99), 1000.0, "ms"),
    ("service_p50_ms", "service_s", _percentile(50), 1000.0, "ms"),
    ("service_p90_ms", "service_s", _percentile(90), 1000.0, "ms"),
    ("service_p99_ms", "service_s", _percentile(99), 1000.0, "ms"),
    ("error_rate", "error", lambda x: float(np.mean(x)), 1.0, "fraction"),
)
#: streamed answers, compared when every stage on both sides streamed (lower is better, as latency)
_STREAM_METRICS: tuple[tuple[str, str, Callable[[F64], float], float, str], ...] = (
    ("ttfc_p50_ms", "ttfc_s", _percentile(50), 1000.0, "ms"),
    ("ttfc_p99_ms", "ttfc_s", _percentile(99), 1000.0, "ms"),
    ("gap_p50_ms", "gap_s", _percentile(50), 1000.0, "ms"),
    ("gap_p99_ms", "gap_s", _percentile(99), 1000.0, "ms"),
)

BOOTSTRAP_METHOD = (
    f"block bootstrap over one-second blocks of the steady window ({N_BOOT} resamples, {LEVEL:.0%} interval)"
)


def load_diffs(
    base: Sequence[StageRows],
    new: Sequence[StageRows],
    point: str,
    tolerance: float,
    error_tolerance: float,
    tail_tolerance: float = DEFAULT_TAIL_TOLERANCE,
) -> list[MetricDiff]:
    """Latency, service time, error rate and throughput of two sets of stages at the same offered rate
    (p90 and p99 judged with ``tail_tolerance``), and time to first chunk and gaps between chunks when every
    stage of both sides streamed (their p99 judged with ``tail_tolerance`` too)."""
    unstable = [s.verdict for s in (*base, *new) if s.verdict != "stable"]
    caveat = ""
    if unstable:
        caveat = (
            f"stage verdicts: base {', '.join(s.verdict for s in base)}; new {', '.join(s.verdict for s in new)} "
            "(a stage that is not stable is not stationary: its interval is too narrow)"
        )
    out = []
    for i, (metric, field, stat, scale, unit) in enumerate(_ROW_METRICS):
        is_err = metric == "error_rate"
        b = _rows_side(base, field, stat, scale, seed=2 * i)
        n = _rows_side(new, field, stat, scale, seed=2 * i + 1)
        tol = error_tolerance if is_err else tolerance_for(metric, tolerance, tail_tolerance)
        out.append(metric_diff(metric, point, unit, "lower", b, n, tol, BOOTSTRAP_METHOD, is_err, caveat))
    b = _throughput_side(base, seed=100)
    n = _throughput_side(new, seed=101)
    out.append(metric_diff("throughput_rps", point, "rps", "higher", b, n, tolerance, BOOTSTRAP_METHOD, caveat=caveat))
    if all(s.ttfc_s is not None for s in (*base, *new)):
        for i, (metric, field, stat, scale, unit) in enumerate(_STREAM_METRICS, start=len(_ROW_METRICS)):
            b = _rows_side(base, field, stat, scale, seed=2 * i)
            n = _rows_side(new, field, stat, scale, seed=2 * i + 1)
            tol = tolerance_for(metric, tolerance, tail_tolerance)
            out.append(metric_diff(metric, point, unit, "lower", b, n, tol, BOOTSTRAP_METHOD, caveat=caveat))
    return out


def streamed(stages: Sequence[StageRows]) -> bool:
    """Whether these stages carry stream figures (their rows were recorded with ``--stream``)."""
    return any(s.ttfc_s is not None for s in stages)


def match_rates(
    base: Sequence[StageRows], new: Sequence[StageRows], stable_only: bool = False
) -> tuple[list[tuple[float, list[StageRows], list[StageRows]]], list[str]]:
    """Groups of stages at the same target rate on both sides (within ``RATE_MATCH``), rising, and notes.

    A rate is kept when at least one side held it stably (the latency of two overloaded stages depends on
    their length): a ``run`` whose new version no longer holds a rate the base held shows it as a latency
    regression there.  ``stable_only`` (``find``): only stable stages count and a rate must be held by both
    sides; a rate only one side held is named in the notes, since the saturation point's verdict judges it
    (a capacity 3 % lower is no regression at a 5 % tolerance, but it fails a rate just above it)."""
    rates: list[float] = []
    for st in sorted(base, key=lambda s: s.target_rps):
        if not any(_same(st.target_rps, r) for r in rates):
            rates.append(st.target_rps)
    out, notes = [], []
    for r in rates:
        b = [s for s in base if _same(s.target_rps, r)]
        n = [s for s in new if _same(s.target_rps, r)]
        if not b or not n or not any(s.verdict == "stable" for s in (*b, *n)):
            continue
        if not stable_only:
            out.append((r, b, n))
            continue
        bs, ns = [s for s in b if s.verdict == "stable"], [s for s in n if s.verdict == "stable"]
        if bs and ns:
            out.append((r, bs, ns))
        else:
            held, lost = ("base", "new") if bs else ("new", "base")
            notes.append(
                f"{r:.4g} rps: held by the {held} side only (the {lost} side's stages there: "
                f"{', '.join(s.verdict for s in (n if bs else b))}); latency there is not compared, the "
                "saturation point's verdict judges it"
            )
    return out, notes


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= RATE_MATCH * max(a, b, 1e-9)
