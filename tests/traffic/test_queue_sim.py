"""The queue prediction: exact on toy cases, and equal to queueing theory where theory has answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from satpoint.traffic.queue_sim import _heap_done, fifo_sojourn, predict_percentiles, service_times, simulate


def erlang_c(c: int, a: float) -> float:
    """P(wait > 0) in M/M/c with offered load a = λ/μ (through Erlang B, numerically stable)."""
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    rho = a / c
    return b / (1 - rho * (1 - b))


def test_toy_queue_by_hand() -> None:
    # two slots; service 1 s each: r2 waits for the first free slot (t=1), r4 for the next (t=2)
    lat = fifo_sojourn([0.0, 0.0, 0.0, 1.0, 1.05], [1.0] * 5, slots=2)
    np.testing.assert_allclose(lat, [1.0, 1.0, 2.0, 1.0, 1.95])
    # varying service (the heap path): r2 takes r1's slot at 0.5, r4 takes r2's at 1.5
    lat = fifo_sojourn([0.0, 0.0, 0.0, 1.0, 1.05], [1.0, 0.5, 1.0, 1.0, 0.2], slots=2)
    np.testing.assert_allclose(lat, [1.0, 0.5, 1.5, 1.0, 0.65])
    # one slot (Lindley), epoch-sized times keep their precision
    lat = fifo_sojourn(1.8e9 + np.array([0.0, 0.1, 0.15, 5.0]), [0.2, 0.2, 0.2, 0.2], slots=1)
    np.testing.assert_allclose(lat, [0.2, 0.3, 0.45, 0.2], atol=1e-6)
    # as many slots as requests: nobody waits
    np.testing.assert_allclose(fifo_sojourn([0.0, 0.0], [0.3, 0.4], slots=5), [0.3, 0.4])


def test_every_path_agrees_with_the_heap() -> None:
    rng = np.random.default_rng(3)
    a = np.cumsum(rng.exponential(1 / 350, 20_000))
    for slots in (1, 3, 4):
        for s in (np.full(len(a), 0.01), rng.exponential(0.01, len(a))):
            expect = _heap_done(a - a[0], s, slots) - (a - a[0])
            np.testing.assert_allclose(fifo_sojourn(a, s, slots), expect, atol=1e-9)


def test_deterministic_arrivals_below_capacity_never_wait() -> None:
    a = np.arange(0, 10, 0.01)  # 100 rps into 4 x 30 ms (capacity 133 rps)
    np.testing.assert_allclose(simulate(a, 0.03, slots=4), 0.03)
    # above capacity (200 rps into 100 rps) the slot never rests: request i is done at (i + 1) x 10 ms
    a = np.arange(0, 10, 0.005)
    np.testing.assert_allclose(simulate(a, 0.01, slots=1), 0.01 * np.arange(1, 2001) - a, atol=1e-9)


def test_md1_mean_wait_is_pollaczek_khinchine() -> None:
    rng = np.random.default_rng(0)
    lam, s = 0.7, 1.0
    a = np.cumsum(rng.exponential(1 / lam, 200_000))
    wait = simulate(a, s, slots=1) - s
    expect = lam * s * s / (2 * (1 - lam * s))  # ρ/(2μ(1−ρ)) = 1.1667 s
    assert wait.mean() == pytest.approx(expect, rel=0.04)


def test_mmc_wait_matches_erlang_c() -> None:
    rng = np.random.default_rng(0)
    lam, mu, c = 2.4, 1.0, 4  # ρ = 0.6
    a = np.cumsum(rng.exponential(1 / lam, 400_000))
    s = rng.exponential(1 / mu, len(a))
    wait = fifo_sojourn(a, s, c) - s
    pw = erlang_c(c, lam / mu)
    assert np.mean(wait > 1e-9) == pytest.approx(pw, rel=0.03)
    assert wait.mean() == pytest.approx(pw / (c * mu - lam), rel=0.05)
    # the wait's tail: P(W > t) = C e^{-(cμ-λ)t}, so its p99 is ln(C/0.01)/(cμ-λ)
    assert np.percentile(wait, 99) == pytest.approx(math.log(pw / 0.01) / (c * mu - lam), rel=0.05)


def test_empirical_service_is_seeded_and_drawn_from_the_sample() -> None:
    sample = np.array([0.01, 0.02, 0.05])
    s1, s2 = service_times(1000, sample, seed=7), service_times(1000, sample, seed=7)
    np.testing.assert_array_equal(s1, s2)
    assert set(np.unique(s1)) == set(sample)
    assert not np.array_equal(s1, service_times(1000, sample, seed=8))
    a = np.cumsum(np.random.default_rng(1).exponential(1 / 100, 5000))
    p = predict_percentiles(a, sample, slots=4, qs=(50, 99), seed=7)
    lat = simulate(a, sample, slots=4, seed=7)
    assert p == {50.0: pytest.approx(np.percentile(lat, 50)), 99.0: pytest.approx(np.percentile(lat, 99))}
    assert min(sample) <= p[50.0] <= p[99.0]


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="sorted"):
        fifo_sojourn([1.0, 0.0], [0.1, 0.1], 1)
    with pytest.raises(ValueError, match="slots"):
        fifo_sojourn([0.0], [0.1], 0)
    with pytest.raises(ValueError):
        service_times(3, -1.0)
    with pytest.raises(ValueError):
        service_times(3, np.array([]))
    assert math.isnan(predict_percentiles(np.zeros(0), 0.1, 1)[50.0])
