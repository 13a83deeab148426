import math

import numpy as np
import pytest

from satpoint.engine.schedule import due_times
from satpoint.plan import PlanError, RateCurve, Stage, spans, validate_plan


def test_constant_hold_spacing_is_exact() -> None:
    due = due_times([Stage(100, 0, 10)])
    assert len(due) == 1000
    assert np.allclose(np.diff(due), 0.01)
    assert due[0] == pytest.approx(0.005)


def test_ramp_integrates_the_rate_curve() -> None:
    # ramp 0 -> 200 over 10 s (expected 1000 requests), then hold 200 for 5 s (1000 more)
    stages = [Stage(200, 10, 5)]
    due = due_times(stages)
    assert len(due) == 2000
    assert np.count_nonzero(due < 10) == 1000
    # in the ramp the count up to t is 10 t^2 (rate 20 t)
    assert np.count_nonzero(due < 5) == 250
    # spacing shrinks along the ramp and is constant on the hold
    gaps = np.diff(due)
    assert gaps[10] > gaps[500] > gaps[990]
    assert np.allclose(gaps[1100:], 1 / 200)


def test_multi_stage_ramps_from_previous_target() -> None:
    stages = [Stage(100, 0, 2), Stage(300, 2, 2)]
    curve = RateCurve(stages)
    assert curve.rate(1.0) == 100
    assert curve.rate(3.0) == pytest.approx(200)
    assert curve.rate(5.0) == 300
    due = due_times(stages)
    assert len(due) == (200 + 400 + 600)
    sp = spans(stages)
    assert [s.start_s for s in sp] == [0, 2]
    assert sp[1].hold_start_s == 4 and sp[1].end_s == 6


def test_poisson_is_seeded_and_has_the_right_rate() -> None:
    stages = [Stage(1000, 0, 20)]
    a = due_times(stages, "poisson", seed=7)
    b = due_times(stages, "poisson", seed=7)
    c = due_times(stages, "poisson", seed=8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[:100], c[:100])
    assert abs(len(a) - 20000) < 4 * math.sqrt(20000)
    gaps = np.diff(a)
    assert np.mean(gaps) == pytest.approx(1e-3, rel=0.03)
    assert np.std(gaps) == pytest.approx(1e-3, rel=0.05)  # exponential: std == mean
    assert np.all(gaps >= 0)


@pytest.mark.parametrize(
    "stages, message",
    [
        ([], "at least one stage"),
        ([Stage(100, 0, 5), Stage(50, 0, 5)], "rise monotonically"),
        ([Stage(-1, 0, 5)], ">= 0"),
        ([Stage(100, 0, 0)], "hold must be > 0"),
        ([Stage(float("nan"), 0, 1)], "finite"),
    ],
)
def test_invalid_plans_are_rejected(stages: list[Stage], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        validate_plan(stages)


def test_stage_parse() -> None:
    assert Stage.parse("100:5:10") == Stage(100, 5, 10)
    assert Stage.parse("100:10") == Stage(100, 0, 10)
    with pytest.raises(PlanError):
        Stage.parse("fast:1:2")
