"""The bursty arrival processes (``gamma:CV``, ``onoff:ON_S,OFF_S,PEAK``): statistics, seeds, parsing."""

from __future__ import annotations

import numpy as np
import pytest

from satpoint.analysis.sweep.space import knob_for, parse_set
from satpoint.config import LoadOptions
from satpoint.engine.schedule import due_times, onoff_switches
from satpoint.plan import PlanError, RateCurve, Stage, parse_arrival


def _cv(due: np.ndarray) -> float:
    gaps = np.diff(due)
    return float(gaps.std() / gaps.mean())


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0, 4.0])
def test_gamma_gaps_have_the_asked_cv_and_the_plan_rate(cv: float) -> None:
    due = due_times([Stage(1000, 0, 200)], f"gamma:{cv:g}", seed=7)
    assert len(due) == pytest.approx(200_000, rel=0.02 * cv)  # the count's spread grows with CV
    assert _cv(due) == pytest.approx(cv, rel=0.05)
    assert np.all(np.diff(due) >= 0) and due[0] >= 0 and due[-1] < 200


def test_poisson_is_gamma_one_in_distribution_and_unchanged_by_the_new_code() -> None:
    due = due_times([Stage(500, 0, 100)], "poisson", seed=3)
    assert _cv(due) == pytest.approx(1.0, rel=0.03)
    # the Poisson stream is the one satpoint drew before the bursty processes existed (same seed, same rows)
    rng = np.random.default_rng(3)
    epochs = np.cumsum(rng.exponential(1.0, size=max(1024, 50_000 // 4 + 64)))
    expected = epochs[epochs < 50_000] / 500.0
    assert np.allclose(due[: len(expected)], expected)


def test_gamma_follows_a_ramp_through_the_time_change() -> None:
    stages = [Stage(400, 20, 20)]
    due = due_times(stages, "gamma:2", seed=1)
    total = RateCurve(stages).total  # 4 000 on the ramp, 8 000 on the hold
    assert len(due) == pytest.approx(total, rel=0.05)
    assert np.count_nonzero(due < 20) == pytest.approx(4000, rel=0.1)


def test_onoff_bursts_at_peak_during_on_and_keeps_the_mean() -> None:
    spec = parse_arrival("onoff:2,8,3")  # ON 20 % of the time at 3x, OFF at 0.5x: mean 1x
    assert spec.off_factor == pytest.approx(0.5)
    stages = [Stage(1000, 0, 600)]
    due = due_times(stages, spec.text, seed=11)
    # the same seed draws the same modulating chain first
    starts, factors = onoff_switches(spec, 600.0, np.random.default_rng(11))
    ends = np.append(starts[1:], 600.0)
    on = factors == spec.peak
    on_time = float(np.sum((ends - starts)[on]))
    assert on_time / 600 == pytest.approx(0.2, abs=0.05)  # ON share: ON_S / (ON_S + OFF_S)
    assert np.mean(ends[on] - starts[on]) == pytest.approx(2.0, rel=0.2)  # mean ON period
    period = np.searchsorted(starts, due, side="right") - 1
    n_on = int(np.count_nonzero(on[period]))
    assert n_on / on_time == pytest.approx(3000, rel=0.03)  # PEAK x the rate while ON
    assert (len(due) - n_on) / (600 - on_time) == pytest.approx(500, rel=0.03)  # off_factor x while OFF
    # the mean over the run is the plan's rate (up to the chance share of ON time)
    expected = 1000 * (3 * on_time + 0.5 * (600 - on_time)) / 600
    assert len(due) / 600 == pytest.approx(expected, rel=0.02)


def test_onoff_with_silent_off_periods_sends_nothing_while_off() -> None:
    spec = parse_arrival("onoff:1,4,5")  # the highest PEAK: OFF rate 0
    assert spec.off_factor == pytest.approx(0.0)
    due = due_times([Stage(200, 0, 100)], spec.text, seed=2)
    starts, factors = onoff_switches(spec, 100.0, np.random.default_rng(2))
    period = np.searchsorted(starts, due, side="right") - 1
    assert np.all(factors[period] == spec.peak)


@pytest.mark.parametrize("arrival", ["poisson", "gamma:3", "onoff:1,3,2"])
def test_seeded_and_reproducible(arrival: str) -> None:
    stages = [Stage(300, 5, 10)]
    a = due_times(stages, arrival, seed=5)
    assert np.array_equal(a, due_times(stages, arrival, seed=5))  # what every shard and host regenerates
    assert not np.array_equal(a[: min(len(a), 100)], due_times(stages, arrival, seed=6)[: min(len(a), 100)])


@pytest.mark.parametrize(
    "text", ["gamma", "gamma:0", "gamma:-1", "gamma:x", "onoff:1,2", "onoff:1,4,6", "onoff:1,4,0.5", "burst"]
)
def test_bad_arrivals_are_refused(text: str) -> None:
    with pytest.raises(PlanError):
        parse_arrival(text)
    with pytest.raises(ValueError):
        LoadOptions(arrival=text).validate()


def test_sweep_knob_arrival_keeps_onoff_commas_together() -> None:
    (dim,) = parse_set(["arrival=constant,poisson,gamma:2,onoff:1,9,5,gamma:4"], "sim")
    assert dim.values == ("constant", "poisson", "gamma:2", "onoff:1,9,5", "gamma:4")
    assert knob_for("arrival", "mlserver").client_side
    with pytest.raises(ValueError, match="arrival"):
        parse_set(["arrival=poisson,gamma:0"], "sim")
