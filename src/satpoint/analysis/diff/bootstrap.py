"""The interval of a change for ``satpoint diff``: a block bootstrap of both sides, blocks sized from the
data's own correlation.

- **Blocks.** Each stage's rows, in arrival order, are cut into non-overlapping blocks of ``block_rows``
  rows, chosen from the series itself: the longest of the Politis–White length for the circular block
  bootstrap (Politis & White 2004, as corrected by Patton, Politis & White 2009), ``ACF_LAGS`` times the lag
  where the autocorrelation first drops below ``ACF_CUT``, and the window split into at most ``MAX_BLOCKS``
  blocks (long blocks cost nothing in bias and keep the work bounded).  A queue near saturation
  remembers its state over hundreds of requests; blocks of one second (the earlier rule) were too short there
  and gave intervals too narrow.  Fewer than ``MIN_BLOCKS`` blocks (the correlation is too long for the
  window): no interval.
- **Resampling.** A side with several stages at the rate (``find --repeats``) is resampled in two levels:
  its stages with replacement, then each drawn stage's blocks with replacement, so the noise between
  measurements counts as well as the noise within them.  A mean (error rate, throughput) is resampled
  directly; a quantile by Woodruff's method (``quantile_estimate``): the bootstrap gives the spread of the
  share of rows below it, the sample quantiles at q ± that spread give the quantile's.  The cost is a
  matrix product of the resampled block counts with per-block sums, whatever the number of rows.
- **The change.** Both sides are resampled, independently; the change is judged on log(new/base) (on
  new − base for an absolute metric, the error rate) with the bootstrap's standard error of each side,
  widened for the number of blocks (their variance is estimated from few of them: Student's t with
  the smaller side's blocks − 1 degrees of freedom, as for batch means; for a quantile, fewer when its
  block means are heavy-tailed, ``effective_df``: the rows beyond p99 come in a few busy periods a block).  It
  gives an interval at any level and a p-value for "no change", which ``diff_verdict.holm`` adjusts across the
  metrics of one diff.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

#: bootstrap resamples per side and figure, and the interval's level
N_BOOT = 400
LEVEL = 0.95
#: fewer blocks than this give no interval; more than MAX_BLOCKS are never cut (blocks grow instead)
MIN_BLOCKS = 12
MAX_BLOCKS = 20
#: a block is at least ACF_LAGS times the lag where the autocorrelation first drops below ACF_CUT
ACF_CUT = 0.1
ACF_LAGS = 2
#: a q-quantile needs at least MIN_TAIL_ROWS / (1 - q) rows on each side (p99: 1000, p90: 100, p50: 20)
MIN_TAIL_ROWS = 10

METHOD = (
    f"change new/base from a block bootstrap of both sides ({N_BOOT} resamples each; blocks sized from each "
    f"stage's own autocorrelation in arrival order, at least {MIN_BLOCKS}; quantiles by Woodruff's method; "
    f"Student-t interval on the log ratio, {LEVEL:.0%}, its degrees of freedom from the blocks and, for a "
    "quantile, their kurtosis; Holm-adjusted across the diff's metrics)"
)


# block length ---------------------------------------------------------------------------------------------
def autocovariance(x: F64, max_lag: int) -> F64:
    """The (biased) autocovariance of ``x`` at lags 0..max_lag, by FFT."""
    n = len(x)
    e = x - x.mean()
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(e, size)
    return np.asarray(np.fft.irfft(f * np.conj(f), size)[: max_lag + 1] / n, dtype=np.float64)


def _constant(x: F64) -> bool:
    """Constant to a millionth (a simulated server's fixed service time, up to float rounding)."""
    return float(np.ptp(x)) <= 1e-6 * float(np.max(np.abs(x)))


def block_rows(x: F64) -> int:
    """The block length (rows) for series ``x`` in arrival order (see the module's docstring); when it is
    longer than ``len(x) / MIN_BLOCKS`` the series has too few blocks for an interval."""
    n = len(x)
    if n < 2 * MIN_BLOCKS:
        return max(1, n // MIN_BLOCKS)
    kn = max(5, math.ceil(math.sqrt(math.log10(n))))
    max_lag = min(n - 1, n // MIN_BLOCKS + kn + 1)
    floor = math.ceil(n / MAX_BLOCKS)
    if _constant(x):  # any block will do
        return floor
    acv = autocovariance(np.asarray(x, dtype=np.float64), max_lag)
    if acv[0] <= 0:
        return floor
    rho = acv / acv[0]
    below = np.flatnonzero(rho[1:] < ACF_CUT)
    if len(below) == 0:  # never decorrelates within the window
        return n
    acf_len = ACF_LAGS * (int(below[0]) + 1)
    # Politis-White: m = the first lag after which kn autocorrelations in a row are insignificant
    cv = 2 * math.sqrt(math.log10(n) / n)
    small = np.abs(rho[1:]) < cv
    runs = np.convolve(small.astype(np.int64), np.ones(kn, dtype=np.int64), "valid")
    first = np.flatnonzero(runs == kn)
    if len(first) == 0:
        return n
    big_m = min(2 * max(int(first[0]), 1), max_lag)
    k = np.arange(1, big_m + 1)
    lam = np.where(k / big_m <= 0.5, 1.0, 2 * (1 - k / big_m))
    g = float(2 * np.sum(lam * k * acv[1 : big_m + 1]))
    lr = float(acv[0] + 2 * np.sum(lam * acv[1 : big_m + 1]))
    pw = 1.0 if lr <= 0 else (2 * g * g / (4 / 3 * lr * lr)) ** (1 / 3) * n ** (1 / 3)
    return int(min(n, max(floor, acf_len, math.ceil(pw), 1)))


# resampling -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Blocks:
    """One side's series cut into blocks: per stage, the bounds of its blocks."""

    stages: list[F64]  # each stage's values in arrival order
    bounds: list[npt.NDArray[np.int64]]  # per stage: K+1 row offsets
    lengths: list[int]  # per stage: the chosen block length (rows)

    @property
    def count(self) -> int:
        return sum(len(b) - 1 for b in self.bounds)

    @property
    def rows(self) -> int:
        return sum(len(s) for s in self.stages)


def series_block_rows(x: F64, tails: Sequence[float] = ()) -> int:
    """``block_rows`` of ``x`` and of whether each row exceeds ``x``'s q-quantile for each q of ``tails``
    (a tail quantile depends on how long the rows beyond it cluster, which can outlast the values'
    correlation: a queue's slow requests come in busy periods), the longest."""
    ln = block_rows(x)
    if len(x) >= 2 * MIN_BLOCKS and not _constant(x):
        for q in tails:
            ln = max(ln, block_rows((x > np.quantile(x, q)).astype(np.float64)))
    return ln


def cut(
    stages: Sequence[F64], length_of: Sequence[F64] | None = None, tails: Sequence[float] = (), own: bool = True
) -> Blocks:
    """Each stage cut into blocks of its own data-chosen length (``series_block_rows``); with ``length_of``
    (another series of the same stages, e.g. the latency for the error rate), blocks at least as long in time
    as that series'; ``own`` False: not from the series' own correlation (a schedule's OK rows per bin are
    periodic, never decorrelating), only from ``length_of``'s."""
    bounds, lengths = [], []
    for i, v in enumerate(stages):
        n = len(v)
        ln = (series_block_rows(v, tails) if own else math.ceil(n / MAX_BLOCKS)) if n else 1
        other = None if length_of is None else length_of[i]
        if other is not None and len(other) >= 2 * MIN_BLOCKS and n:
            ln = max(ln, math.ceil(block_rows(other) * n / len(other)))
        k = n // ln if n else 0
        bounds.append(np.linspace(0, n, max(k, 1) + 1).astype(np.int64) if k else np.zeros(1, dtype=np.int64))
        lengths.append(ln)
    return Blocks([np.asarray(s, dtype=np.float64) for s in stages], bounds, lengths)


def _weights(blocks: Blocks, n_boot: int, rng: np.random.Generator) -> F64:
    """Resampled block counts (n_boot × all blocks): stages with replacement, then blocks within each."""
    sizes = [len(b) - 1 for b in blocks.bounds]
    m = len(sizes)
    picks = rng.multinomial(m, [1 / m] * m, size=n_boot) if m > 1 else np.ones((n_boot, 1), dtype=np.int64)
    cols = [rng.multinomial(picks[:, s] * k, [1 / k] * k).astype(np.float64) for s, k in enumerate(sizes) if k > 0]
    return np.concatenate(cols, axis=1) if cols else np.zeros((n_boot, 0))


def mean_draws(blocks: Blocks, n_boot: int, seed: int) -> F64:
    """Bootstrap draws of the pooled mean."""
    rng = np.random.default_rng(seed)
    sums, counts = [], []
    for v, b in zip(blocks.stages, blocks.bounds, strict=True):
        for k in range(len(b) - 1):
            sums.append(float(np.sum(v[b[k] : b[k + 1]])))
            counts.append(float(b[k + 1] - b[k]))
    if not sums:
        return np.full(n_boot, np.nan)
    w = _weights(blocks, n_boot, rng)
    tot = w @ np.asarray(counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.where(tot > 0, (w @ np.asarray(sums)) / tot, np.nan), dtype=np.float64)


# Student's t without scipy ---------------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > 1e-300 else 1e-300)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1 + aa * d
            d = 1 / (d if abs(d) > 1e-300 else 1e-300)
            c = 1 + aa / c
            c = c if abs(c) > 1e-300 else 1e-300
            h *= d * c
        if abs(d * c - 1) < 1e-12:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with ``df`` degrees of freedom (normal beyond 1e6)."""
    if math.isinf(t):
        return 0.0
    if df > 1e6:
        return 2 * (1 - NormalDist().cdf(abs(t)))
    return _betainc(df / 2, 0.5, df / (df + t * t))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t, by bisection on ``t_two_sided_p``."""
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > 2 * (1 - p) and hi < 1e6:
        hi *= 2
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_two_sided_p(mid, df) > 2 * (1 - p) else (lo, mid)
    return (lo + hi) / 2


# one side ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """One side's figure over its pooled rows: its standard error (of log(value) for a relative figure, of
    the value itself for an absolute one), already widened for the number of blocks, and its own interval."""

    value: float
    se: float
    blocks: int
    rows: int
    block_rows: int  # the longest stage's block length (rows)
    low: float
    high: float
    why_not: str = ""  # why there is no interval (too few rows or blocks), "" when there is one
    kurtosis: float = 0.0  # the excess kurtosis of the block means behind ``se`` (``block_kurtosis``)

    @property
    def df(self) -> float:
        return effective_df(self.blocks, self.kurtosis)


def block_kurtosis(blocks: Blocks) -> float:
    """The excess kurtosis of ``blocks``' block means (at least 0; 0 with fewer than 4 blocks or no spread)."""
    means = np.asarray([float(np.mean(v[b[k] : b[k + 1]])) for v, b in zip(blocks.stages, blocks.bounds, strict=True)
                        for k in range(len(b) - 1) if b[k + 1] > b[k]])  # fmt: skip
    if len(means) < 4:
        return 0.0
    m = means - means.mean()
    m2 = float(np.mean(m**2))
    return 0.0 if m2 <= 0 else max(0.0, float(np.mean(m**4)) / m2**2 - 3.0)


def effective_df(blocks: int, kurtosis: float = 0.0) -> float:
    """The degrees of freedom of a variance estimated from ``blocks`` block means whose excess kurtosis is
    ``kurtosis``: the chi-square with the same relative variance, Var(s²)/σ⁴ = 2/(k − 1) + κ/k, so
    2 / (2/(k − 1) + κ/k); k − 1 for normal block means.  A tail quantile's block means are heavy-tailed (the
    rows beyond p99 come in a few busy periods a block), and k − 1 credited its interval with more stability
    than it has (p99 coverage 0.87-0.89 for a nominal 0.95 on an M/M/1 at ρ = 0.9; 0.94 with this)."""
    k = max(blocks, 2)
    return max(1.0, min(k - 1.0, 2.0 / (2.0 / (k - 1) + max(kurtosis, 0.0) / k)))


def _widen(draws: F64, blocks: int) -> float:
    d = draws[np.isfinite(draws)]
    k = max(blocks, 2)
    return float(np.std(d)) * math.sqrt(k / (k - 1)) if len(d) > 1 else 0.0


def _tq(df: float, level: float = LEVEL) -> float:
    return t_quantile(1 - (1 - level) / 2, df)


def quantile_estimate(blocks: Blocks, q: float, n_boot: int, seed: int, why_not: str = "") -> Estimate:
    """The q-quantile of the pooled rows and its spread by Woodruff's method: the block bootstrap gives the
    standard error ``s`` of the share of rows at or below the quantile, and the quantile's own spread is that
    of the sample quantiles at q ± s (no density to estimate; the bootstrap of a tail quantile itself
    understates its noise under queueing: 0.10 for 0.12 on log p99 of an M/M/1 at ρ = 0.9)."""
    pooled = np.concatenate(blocks.stages) if blocks.stages else np.zeros(0)
    value = float(np.quantile(pooled, q)) if len(pooled) else math.nan
    longest = max(blocks.lengths, default=1)
    if not len(pooled):
        return Estimate(value, 0.0, 0, 0, longest, math.nan, math.nan, why_not or "no rows")
    below = Blocks([(v <= value).astype(np.float64) for v in blocks.stages], blocks.bounds, blocks.lengths)
    s = _widen(mean_draws(below, n_boot, seed), blocks.count)
    kurtosis = block_kurtosis(below)
    t = _tq(effective_df(blocks.count, kurtosis))
    lo, hi = np.quantile(pooled, [max(q - s, 0.0), min(q + s, 1.0)])
    wlo, whi = np.quantile(pooled, [max(q - t * s, 0.0), min(q + t * s, 1.0)])
    if value > 0 and lo > 0:
        se = (math.log(hi) - math.log(lo)) / 2
    elif value > 0:
        se = math.log(hi / value)
    else:
        se = 0.0
    return Estimate(value, se, blocks.count, blocks.rows, longest, float(wlo), float(whi), why_not, kurtosis)


def mean_estimate(blocks: Blocks, n_boot: int, seed: int, log: bool, value: float | None = None,
                  why_not: str = "") -> Estimate:  # fmt: skip
    """The mean of the pooled rows (or ``value``, with the rows' relative spread) and its block-bootstrap
    standard error: of log(value) when ``log``, else of the value."""
    longest = max(blocks.lengths, default=1)
    if not blocks.rows:
        return Estimate(math.nan, 0.0, 0, 0, longest, math.nan, math.nan, why_not or "no rows")
    mean = float(np.mean(np.concatenate(blocks.stages)))
    draws = mean_draws(blocks, n_boot, seed)
    v = mean if value is None else value
    t = _tq(max(blocks.count - 1, 1))
    if log:
        se = _widen(np.log(draws[draws > 0]), blocks.count) if mean > 0 else 0.0
        return Estimate(v, se, blocks.count, blocks.rows, longest, v * math.exp(-t * se), v * math.exp(t * se),
                        why_not)  # fmt: skip
    se = _widen(draws, blocks.count)
    return Estimate(v, se, blocks.count, blocks.rows, longest, max(0.0, v - t * se), v + t * se, why_not)


# the change ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """The change new vs base: relative (new/base − 1) or absolute (new − base), its interval at ``LEVEL``,
    the p-value of "no change" and the degrees of freedom behind it."""

    change: float
    low: float
    high: float
    p_value: float
    df: float


def change_of(base: Estimate, new: Estimate, absolute: bool, level: float = LEVEL) -> Change:
    """The change and its Student-t interval from both sides' bootstrap spreads (see the module's docstring)."""
    (se_b, df_b), (se_n, df_n) = (base.se, base.df), (new.se, new.df)
    d = new.value - base.value if absolute else math.log(new.value / base.value)
    var = se_b**2 + se_n**2
    if var <= 0:
        p = 1.0 if d == 0 else 0.0
        lo = hi = d
        df = math.inf
    else:
        # the smaller side's blocks − 1 (of the sides with any spread): Welch-Satterthwaite's sum would credit
        # the tail quantiles with more stability than their standard errors have (A/A p99 on an M/M/1 at 0.9)
        df = min(d_ for d_, se_ in ((df_b, se_b), (df_n, se_n)) if se_)
        se = math.sqrt(var)
        p = t_two_sided_p(d / se, df)
        t = t_quantile(1 - (1 - level) / 2, df)
        lo, hi = d - t * se, d + t * se
    if absolute:
        return Change(d, lo, hi, p, df)
    return Change(math.expm1(d), math.expm1(lo), math.expm1(hi), p, df)
