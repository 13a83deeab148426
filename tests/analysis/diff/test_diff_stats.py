"""The statistics behind ``satpoint diff``'s verdicts at equal load: the interval's coverage on a queue near
saturation, the power to see a change of 1.5 x the tolerance, A/A pairs, and the review's examples (H3).

Queues are simulated by Lindley's recursion for the waiting time, vectorised (W_n = C_n - min_{k<=n} C_k with
C the running sum of service minus interarrival times), in units of the mean service time; every draw is
seeded, so each test gives the same figures on every run."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from satpoint.analysis.diff.bootstrap import MIN_BLOCKS, N_BOOT, Estimate, change_of, cut, quantile_estimate
from satpoint.analysis.diff.rows import StageRows, load_diffs, stage_rows
from satpoint.analysis.diff.verdict import DiffDoc, Side, judge, judge_change, make_doc, sampled_diff
from satpoint.metrics.records import Outcome, Records

F64 = npt.NDArray[np.float64]


def mm1(n: int, rho: float, rng: np.random.Generator, warm: int = 20_000) -> F64:
    """Sojourn times (waiting + service) of n customers of an M/M/1 at utilisation ``rho``, mean service 1,
    in arrival order, after ``warm`` customers from empty."""
    a = rng.exponential(1 / rho, n + warm)
    s = rng.exponential(1.0, n + warm)
    c = np.cumsum(np.concatenate([[0.0], s[:-1] - a[1:]]))
    w = c - np.minimum.accumulate(np.minimum(c, 0.0))
    return np.asarray((w + s)[warm:], dtype=np.float64)


def stage(latency_s: F64, rate: float, errors: F64 | None = None) -> StageRows:
    """A stable stage whose rows, due at ``rate``, took ``latency_s`` each (errors where ``errors`` is 1)."""
    n = len(latency_s)
    rec = Records.empty(np.arange(n) / rate)
    rec.sent[:] = rec.intended
    rec.done[:] = rec.sent + latency_s
    rec.outcome[:] = Outcome.OK
    if errors is not None:
        rec.outcome[errors > 0] = Outcome.HTTP_ERROR
    doc = {"target_rps": rate, "verdict": "stable", "throughput_rps": rate, "window_start_s": 0.0,
           "window_end_s": n / rate}  # fmt: skip
    return stage_rows(rec, doc)


def diff(base: StageRows, new: StageRows, tol: float = 0.05, tail: float = 0.20) -> DiffDoc:
    return make_doc("run", {"dir": "b"}, {"dir": "n"}, tol, 0.005, load_diffs([base], [new], "r", tol, 0.005, tail),
                    [], "0", tail)  # fmt: skip


def first_lag_below(x: F64, cut_at: float = 0.1, max_lag: int = 5000) -> int:
    """The first lag at which the autocorrelation of ``x`` drops below ``cut_at`` (plain numpy, not the
    module's own estimator)."""
    e = x - x.mean()
    f = np.fft.rfft(e, 2 * len(x))
    acf = np.fft.irfft(f * np.conj(f))[: max_lag + 1]
    below = np.flatnonzero(acf / acf[0] < cut_at)
    return int(below[0]) if len(below) else max_lag


@pytest.mark.slow
def test_interval_coverage_on_an_mm1_at_rho_09() -> None:
    """A/A pairs of an M/M/1 at rho = 0.9 with a 10 ms service time (90 rps; 60 000 customers a side,
    correlated over hundreds of them): the 95 % interval of the change of p50, p90 and p99 holds "no change"
    in at least 90 % of the pairs, each.  The blocks are longer than twice the lag where the rows'
    autocorrelation drops below 0.1; blocks of one second (90 rows, the rule before issue 33) are shorter
    than that and cover p99 in about 66 % of such pairs (benchmarks/RESULTS.md)."""
    rng = np.random.default_rng(2026)
    qs = (0.5, 0.9, 0.99)
    rate = 90.0  # rows per second: one second is 90 rows
    covered: dict[float, list[bool]] = {q: [] for q in qs}
    for trial in range(60):
        rows = [mm1(60_000, 0.9, rng) for _ in range(2)]
        sides = [cut([r], tails=qs) for r in rows]
        assert all(b.count >= MIN_BLOCKS for b in sides)
        if trial < 4:  # the block follows the correlation, which outlasts a second here
            lag = first_lag_below(rows[0])
            assert lag > rate and sides[0].lengths[0] >= 2 * lag, (lag, sides[0].lengths)
        for q in qs:
            b, n = (quantile_estimate(s, q, N_BOOT, 2 * trial + i) for i, s in enumerate(sides))
            c = change_of(b, n, absolute=False)
            covered[q].append(c.low <= 0 <= c.high)
    share = {q: float(np.mean(v)) for q, v in covered.items()}
    print("coverage", share)
    assert min(share.values()) >= 0.90, share


@pytest.mark.slow
def test_a_change_of_one_and_a_half_tolerances_is_found() -> None:
    """Every request 1.5 x the tolerance slower, on an M/M/1 at rho = 0.5 (40 000 rows a side at 500 rps,
    80 s), through the whole diff (Holm-adjusted over its metrics): +7.5 % is a p50 regression at the 5 %
    tolerance, +30 % a p90 and p99 regression at the 20 % tail tolerance, each in at least 80 % of the pairs.
    The old rule (ranges apart by more than the tolerance) needed the change to exceed the tolerance plus both
    half-widths."""
    power = power_by_metric(24, np.random.default_rng(7))
    print("power", power)
    assert all(p >= 0.8 for p in power.values()), power


def test_a_a_pairs_raise_no_false_regression_and_report_their_no_change() -> None:
    """The same process on both sides (M/M/1 at rho = 0.9, 54 000 rows a side, 60 s at 900 rps): no pair is
    a regression; every no_change rests on the whole interval of the change within the tolerance (the old
    rule called no_change from the point estimate, however wide the ranges); the share of no_change per
    metric is what a CI user can expect of a pair this noisy (printed, benchmarks/RESULTS.md)."""
    rng = np.random.default_rng(11)
    regressions, verdicts, docs = 0, [], []
    for _ in range(12):
        base, new = (stage(mm1(54_000, 0.9, rng) / 1000, 900.0) for _ in range(2))
        docs.append(doc := diff(base, new))
        regressions += doc.verdict == "regression"
        verdicts.append({m.metric: m.verdict for m in doc.metrics})
    share = {m: float(np.mean([v[m] == "no_change" for v in verdicts])) for m in verdicts[0]}
    print("A/A no_change share", share)
    assert regressions == 0
    # a no_change is backed by the whole interval of the change within the tolerance (equivalence)
    for m in (m for d in docs for m in d.metrics if m.verdict == "no_change"):
        assert m.change_low is not None and m.change_high is not None
        assert -m.tolerance <= m.change_low and m.change_high <= m.tolerance, m.text
    assert share["error_rate"] == 1.0 and share["throughput_rps"] == 1.0


def test_p50_up_12_percent_with_tight_intervals_is_a_regression() -> None:
    """Review H3: p50 10.0 ms [9.8, 10.2] -> 11.2 ms [10.7, 11.7], +12 % with the ranges 5 % apart: the old
    rule (apart by more than the 5 % tolerance) called it inconclusive and the gate passed."""
    rng = np.random.default_rng(3)
    base = stage(0.010 * np.exp(0.31 * rng.standard_normal(1500)), 100.0)
    new = stage(0.0112 * np.exp(0.62 * rng.standard_normal(1500)), 100.0)
    p50 = next(m for m in diff(base, new).metrics if m.metric == "latency_p50_ms")
    assert p50.base.low is not None and p50.new.low is not None and p50.base.high is not None
    assert p50.new.low - p50.base.high < 0.05 * 10.0  # apart by less than the tolerance
    assert p50.verdict == "regression", p50.text
    assert p50.change_low is not None and p50.change_low > 0 and p50.p_adjusted is not None


def test_error_rate_0_to_0_9_percent_over_enough_rows_is_a_regression() -> None:
    """Review H3: errors 0 % -> 0.9 % (in bursts of 9, so its range is wide, about [0.4, 1.4] %): the old rule
    needed the ranges 0.5 points apart and passed a version failing one request in 110."""
    rng = np.random.default_rng(5)
    n = 12_000
    errors = np.zeros(n)
    for start in rng.choice(n // 9, size=12, replace=False) * 9:
        errors[start : start + 9] = 1.0
    base = stage(np.full(n, 0.01) + rng.exponential(0.001, n), 200.0)
    new = stage(np.full(n, 0.01) + rng.exponential(0.001, n), 200.0, errors)
    err = next(m for m in diff(base, new).metrics if m.metric == "error_rate")
    assert err.new.value == pytest.approx(0.009)
    assert err.verdict == "regression", err.text


def test_p99_with_wide_intervals_is_inconclusive_not_no_change() -> None:
    """Review H3: p99 20 ms [16, 26] vs 21 ms [15, 34]: the data allow +70 %; a +5 % change within the 20 %
    tail tolerance is no reason for no_change."""
    ranges = judge(Side(value=20, low=16, high=26, n=1), Side(value=21, low=15, high=34, n=1), 0.20, "lower")
    assert ranges.verdict == "inconclusive"
    # the same spread as bootstrap estimates (standard errors of the log p99 giving those ranges)
    base = Estimate(0.020, 0.124, 20, 5000, 250, 0.016, 0.026)
    new = Estimate(0.021, 0.196, 20, 5000, 250, 0.015, 0.034)
    m = sampled_diff("latency_p99_ms", "r", "ms", "lower", base, new, ["b", "n"], 1000.0, 0.20, "bootstrap")
    assert m.verdict == "inconclusive" and m.change_high is not None and m.change_high > 0.5
    assert judge_change(0.05, -0.3, 0.6, 1.0, 0.20, "lower").verdict == "inconclusive"
    assert judge_change(0.05, -0.1, 0.15, 0.5, 0.20, "lower").verdict == "no_change"


def test_holm_adjusts_across_the_diffs_metrics() -> None:
    """One p-value of 0.02 is a change alone; among 8 judged metrics (Holm: x 8) it is not."""
    base = Estimate(10.0, 0.01, 30, 5000, 100, 9.8, 10.2)
    new = Estimate(10.0 * np.exp(0.034), 0.01, 30, 5000, 100, 10.1, 10.5)  # +3.5 %, z ~ 2.4
    alone = sampled_diff("latency_p50_ms", "r", "ms", "lower", base, new, ["b", "n"], 1.0, 0.03, "bootstrap")
    assert alone.p_value is not None and 0.01 < alone.p_value < 0.05
    assert make_doc("run", {}, {}, 0.03, 0.005, [alone], [], "0").metrics[0].verdict == "regression"
    flat = sampled_diff("service_p50_ms", "r", "ms", "lower", base, base, ["b", "n"], 1.0, 0.03, "bootstrap")
    doc = make_doc("run", {}, {}, 0.03, 0.005, [alone] + [flat] * 7, [], "0")
    m = doc.metrics[0]
    assert m.p_value is not None and m.p_adjusted == pytest.approx(min(1.0, 8 * m.p_value))
    assert m.verdict == "inconclusive"


def test_block_length_follows_the_correlation() -> None:
    """Blocks grow with the correlation in arrival order: independent rows get the shortest blocks the window
    allows (it is split into at most MAX_BLOCKS), a queue at rho = 0.9 blocks of hundreds of rows."""
    rng = np.random.default_rng(1)
    iid = cut([rng.exponential(1.0, 60_000)])
    queue = cut([mm1(60_000, 0.9, rng)])
    assert iid.lengths[0] == 3000 and queue.lengths[0] >= iid.lengths[0]
    short = cut([mm1(6_000, 0.9, rng)])
    assert short.count < MIN_BLOCKS  # too short a window for this correlation: no interval


def power_by_metric(pairs: int, rng: np.random.Generator) -> dict[str, float]:
    """Share of ``pairs`` M/M/1 pairs at rho = 0.5 (40 000 rows a side, 500 rps) that the whole diff calls a
    regression, per metric: half the pairs 7.5 % slower (judged on the p50s), half 30 % slower (the tails)."""
    found: dict[str, list[bool]] = {"latency_p50_ms": [], "service_p50_ms": [], "latency_p90_ms": [],
                                    "latency_p99_ms": []}  # fmt: skip
    for i in range(pairs):
        central = i % 2 == 0
        base = stage(mm1(40_000, 0.5, rng) / 1000, 500.0)
        new = stage(mm1(40_000, 0.5, rng) * (1.075 if central else 1.30) / 1000, 500.0)
        by = {m.metric: m.verdict for m in diff(base, new).metrics}
        for metric, hits in found.items():
            if central == ("p50" in metric):
                hits.append(by[metric] == "regression")
    return {m: float(np.mean(v)) for m, v in found.items()}
