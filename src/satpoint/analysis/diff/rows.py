"""Figures at equal offered load for ``satpoint diff``: latency (p50, p90, p99), service time, error rate
and throughput of the stages both sides ran at the same rate, and, when both sides streamed (``--stream``),
time to first chunk and gaps between chunks (p50, p99).  Each is judged on the interval of its change
new/base (new − base for the error rate) from a block bootstrap of both sides (``diff_bootstrap``): blocks of
each stage's rows in arrival order, as long as the rows' own correlation demands.

Why blocks: neighbouring requests are correlated under queueing (a slow request delays the ones queued
behind it), so resampling single requests would treat correlated rows as independent and give intervals
that are too narrow.  How long the correlation lasts depends on the rate and the utilisation (a queue at ρ
forgets its state within a few service times / (1 − ρ)²: tens of milliseconds at low load, seconds near
saturation), so the block length is measured on the rows, not fixed.  A window too short for at least
``MIN_BLOCKS`` blocks, or with fewer than 10 / (1 − q) rows for a q-quantile, gives no interval: that metric
is ``inconclusive``.  The window must be stationary (the steady window of a stable stage); near saturation
it is not, and the evidence says so.  With one run per side the interval is the noise *within* a run, not
between runs; several stages per side (``find --repeats``) are resampled stage by stage, so the noise
between them counts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.analysis.diff import bootstrap as diff_bootstrap
from satpoint.analysis.diff.bootstrap import (
    METHOD,
    MIN_BLOCKS,
    MIN_TAIL_ROWS,
    Blocks,
    Estimate,
    cut,
    mean_estimate,
    quantile_estimate,
)
from satpoint.analysis.diff.spread import latency_allowance
from satpoint.analysis.diff.tolerances import ALL_TAIL_METRICS, DEFAULT_TAIL_TOLERANCE, tolerance_for
from satpoint.analysis.diff.verdict import MetricDiff, sampled_diff
from satpoint.analysis.search.rates import same_load
from satpoint.metrics.records import Records
from satpoint.metrics.stream_stats import ttfc_s

#: the throughput's series: OK rows due per bin of about this long (at most MAX_THROUGHPUT_BINS bins)
THROUGHPUT_BIN_S = 0.1
MAX_THROUGHPUT_BINS = 4000

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class StageRows:
    """The rows of one stage's steady window in arrival order, each with its one-second block (the
    bootstrap cuts its own blocks, ``diff_bootstrap.cut``)."""

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
    ok_per_bin: F64  # OK rows due per bin of about ``THROUGHPUT_BIN_S``, per second (the throughput's series)
    #: streamed answers (``--stream``; None: the stage did not stream): time to first chunk per latency row
    #: (``metrics.stream_stats.ttfc_s``) and every gap between chunks of those rows, each with its block
    ttfc_s: F64 | None = None
    ttfc_block: npt.NDArray[np.int64] | None = None
    gap_s: F64 | None = None
    gap_block: npt.NDArray[np.int64] | None = None
    segment: int = -1  # the stage's segment in its folder (-1: not known)


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
        ok_per_bin=_ok_bins(part, ok, w0, win),
        **streams,
        segment=int(stage.get("segment", -1)),
    )


def _ok_bins(part: Records, ok: npt.NDArray[np.bool_], w0: float, win: float) -> F64:
    """OK rows due per bin of about ``THROUGHPUT_BIN_S`` (per second): the throughput's series."""
    bins = max(1, min(MAX_THROUGHPUT_BINS, math.floor(win / THROUGHPUT_BIN_S)))
    width = win / bins
    idx = np.minimum(((part.intended[ok] - w0) / width).astype(np.int64), bins - 1)
    return np.bincount(idx, minlength=bins).astype(np.float64) / width


#: (rows field, [(metric, quantile)]): the quantiles judged per series of rows
_QUANTILES: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = (
    ("latency_s", (("latency_p50_ms", 0.50), ("latency_p90_ms", 0.90), ("latency_p99_ms", 0.99))),
    ("service_s", (("service_p50_ms", 0.50), ("service_p90_ms", 0.90), ("service_p99_ms", 0.99))),
)
#: streamed answers, compared when every stage on both sides streamed (lower is better, as latency)
_STREAM_QUANTILES: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = (
    ("ttfc_s", (("ttfc_p50_ms", 0.50), ("ttfc_p99_ms", 0.99))),
    ("gap_s", (("gap_p50_ms", 0.50), ("gap_p99_ms", 0.99))),
)

BOOTSTRAP_METHOD = METHOD


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _why_not(blocks: Blocks, rows_word: str, min_rows: int = 0) -> str:
    """Why a side has no interval (too few rows for the quantile, or too few blocks), "" when it has one."""
    n, k = blocks.rows, blocks.count
    if n < min_rows:
        return f"{n} {rows_word}, fewer than the {min_rows} this quantile needs (10 / (1 − q))"
    if k < MIN_BLOCKS:
        longest = max(blocks.lengths, default=1)
        return (
            f"its rows are correlated over about {longest} in a row: {_plural(k, 'block')} of them, fewer than "
            f"{MIN_BLOCKS} (a longer window would decide)"
        )
    return ""


def _detail(stages: Sequence[StageRows], est: Estimate, rows_word: str) -> str:
    return (
        f"{_plural(len(stages), 'stage')}, {est.rows} {rows_word}, "
        f"{_plural(est.blocks, 'block')} of ~{est.block_rows} rows"
    )


def _quantile_diffs(
    base: Sequence[StageRows],
    new: Sequence[StageRows],
    field: str,
    metrics: Sequence[tuple[str, float]],
    seed: int,
    point: str,
    tols: Sequence[float],
    caveat: str,
    allowances: Sequence[float],
) -> list[MetricDiff]:
    rows_word = "gaps" if field == "gap_s" else "requests"
    qs = [q for _, q in metrics]
    sides = [cut([np.asarray(getattr(s, field), dtype=np.float64) for s in st], tails=qs) for st in (base, new)]
    out = []
    for j, (metric, q) in enumerate(metrics):
        need = math.ceil(MIN_TAIL_ROWS / (1 - q) - 1e-9)
        ests = [
            quantile_estimate(b, q, diff_bootstrap.N_BOOT, seed + 2 * j + i, _why_not(b, rows_word, need))
            for i, b in enumerate(sides)
        ]
        details = [_detail(st, e, rows_word) for st, e in zip((base, new), ests, strict=True)]
        out.append(sampled_diff(metric, point, "ms", "lower", ests[0], ests[1], details, 1000.0, tols[j],
                                BOOTSTRAP_METHOD, (len(base), len(new)), caveat=caveat,
                                allowance=allowances[j]))  # fmt: skip
    return out


def load_diffs(
    base: Sequence[StageRows],
    new: Sequence[StageRows],
    point: str,
    tolerance: float,
    error_tolerance: float,
    tail_tolerance: float = DEFAULT_TAIL_TOLERANCE,
    run_spread: float = 0.0,
    queueing: float = 1.0,
    shift: float = 0.0,
) -> list[MetricDiff]:
    """Latency, service time, error rate and throughput of two sets of stages at the same offered rate
    (p90 and p99 judged with ``tail_tolerance``), and time to first chunk and gaps between chunks when every
    stage of both sides streamed (their p99 judged with ``tail_tolerance`` too); each from the interval of
    its change (``diff_bootstrap``), Holm-adjusted later across the whole diff (``diff_verdict.make_doc``).

    A change must also exceed what an unchanged server moves between runs, which no interval within a run
    (nor stages pooled from one find's searches) sees: ``run_spread`` for the throughput, ``latency_allowance``
    for latency and service time (``queueing``: the base's ``queueing_factor`` at this rate).  Only between
    stable stages: a rate the base held and the new side did not is no drift.  ``shift``: the machine's change
    of speed between the runs (``diff_folders``), added to the capacity's spread; the light-load jitter only
    when a side rests on one stage at this rate (several are the spread between them)."""
    unstable = [s.verdict for s in (*base, *new) if s.verdict != "stable"]
    spread, shift = (0.0, 0.0) if unstable else (run_spread, shift)
    tp_allow, one = spread + shift, len(base) == 1 or len(new) == 1
    caveat = ""
    if unstable:
        caveat = (
            f"stage verdicts: base {', '.join(s.verdict for s in base)}; new {', '.join(s.verdict for s in new)} "
            "(a stage that is not stable is not stationary: its interval is too narrow)"
        )
    out: list[MetricDiff] = []
    groups = list(_QUANTILES)
    if all(s.ttfc_s is not None for s in (*base, *new)):
        groups += list(_STREAM_QUANTILES)
    for i, (field, metrics) in enumerate(groups):
        tols = [tolerance_for(m, tolerance, tail_tolerance) for m, _ in metrics]
        allows = [latency_allowance(spread, queueing, m in ALL_TAIL_METRICS, shift, one) for m, _ in metrics]
        out.extend(_quantile_diffs(base, new, field, metrics, 10 * i, point, tols, caveat, allows))
        if field == "service_s":  # the error rate and the throughput after latency and service time
            out.append(_error_diff(base, new, point, error_tolerance, caveat))
            out.append(_throughput_diff(base, new, point, tolerance, caveat, tp_allow))
    return out


def _error_diff(
    base: Sequence[StageRows], new: Sequence[StageRows], point: str, tolerance: float, caveat: str
) -> MetricDiff:
    """The error rate (over every row due in the window): blocks at least as long in time as the latency's."""
    ests, details = [], []
    for i, stages in enumerate((base, new)):
        b = cut([s.error for s in stages], length_of=[s.latency_s for s in stages])
        ests.append(mean_estimate(b, diff_bootstrap.N_BOOT, 100 + i, log=False, why_not=_why_not(b, "requests")))
        details.append(_detail(stages, ests[-1], "requests"))
    return sampled_diff("error_rate", point, "fraction", "lower", ests[0], ests[1], details, 1.0, tolerance,
                        BOOTSTRAP_METHOD, (len(base), len(new)), absolute=True, caveat=caveat)  # fmt: skip


def _throughput_diff(
    base: Sequence[StageRows], new: Sequence[StageRows], point: str, tolerance: float, caveat: str,
    allowance: float = 0.0,
) -> MetricDiff:  # fmt: skip
    """The throughput: the stages' own figure (completions in the window), with the relative spread of the OK
    rows due per bin of about ``THROUGHPUT_BIN_S``."""
    ests, details = [], []
    for i, stages in enumerate((base, new)):
        b = cut([s.ok_per_bin for s in stages], length_of=[s.latency_s for s in stages], own=False)
        value = statistics.fmean(st.throughput_rps for st in stages) if stages else None
        ests.append(
            mean_estimate(b, diff_bootstrap.N_BOOT, 200 + i, log=True, value=value, why_not=_why_not(b, "bins"))
        )
        details.append(f"{_plural(len(stages), 'stage')}, {b.rows} bins, {_plural(b.count, 'block')}")
    return sampled_diff("throughput_rps", point, "rps", "higher", ests[0], ests[1], details, 1.0, tolerance,
                        BOOTSTRAP_METHOD, (len(base), len(new)), caveat=caveat, allowance=allowance)  # fmt: skip


def queueing_factor(at_rate: Sequence[StageRows], lowest: Sequence[StageRows]) -> float:
    """How much queueing the latency at a rate holds (at least 1): its median over the median at the lowest
    rate measured (``lowest``: the side's stable stages at its two lowest rates, lowest first), and, when the
    lowest rate is itself loaded, what an M/M/1 through the two lowest (latency W = W0 / (1 − λ/μ)) says:
    μ = (W2·λ2 − W1·λ1) / (W2 − W1), the factor 1 / (1 − λ/μ) (inf at or past μ).  For an M/M/1 it is also
    how much a relative change of the capacity moves the latency at that rate (``latency_allowance``)."""
    if not lowest or not at_rate:
        return 1.0
    here = float(np.median(np.concatenate([s.latency_s for s in at_rate])))
    w = [float(np.median(s.latency_s)) if len(s.latency_s) else math.nan for s in lowest[:2]]
    k = here / w[0] if w[0] > 0 and math.isfinite(here) else 1.0
    if len(w) == 2 and w[1] > w[0] > 0 and lowest[1].target_rps > lowest[0].target_rps:
        mu = (w[1] * lowest[1].target_rps - w[0] * lowest[0].target_rps) / (w[1] - w[0])
        rate = at_rate[0].target_rps
        k = max(k, 1.0 / (1.0 - rate / mu) if rate < mu else math.inf)
    return max(1.0, k)


def streamed(stages: Sequence[StageRows]) -> bool:
    """Whether these stages carry stream figures (their rows were recorded with ``--stream``)."""
    return any(s.ttfc_s is not None for s in stages)


def match_rates(
    base: Sequence[StageRows], new: Sequence[StageRows], stable_only: bool = False
) -> tuple[list[tuple[float, list[StageRows], list[StageRows]]], list[str]]:
    """Groups of stages at the same target rate on both sides (``rates.same_load``), rising, and notes.

    A rate is kept when at least one side held it stably (the latency of two overloaded stages depends on
    their length): a ``run`` whose new version no longer holds a rate the base held shows it as a latency
    regression there.  ``stable_only`` (``find``): only stable stages count and a rate must be held by both
    sides; a rate only one side held is named in the notes, since the saturation point's verdict judges it
    (a capacity 3 % lower is no regression at a 5 % tolerance, but it fails a rate just above it)."""
    rates: list[float] = []
    for st in sorted(base, key=lambda s: s.target_rps):
        if not any(same_load(st.target_rps, r) for r in rates):
            rates.append(st.target_rps)
    out, notes = [], []
    for r in rates:
        b = [s for s in base if same_load(s.target_rps, r)]
        n = [s for s in new if same_load(s.target_rps, r)]
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
