"""Falling targets (find --hysteresis's step-down): allowed only when asked, and due times that never move."""

from __future__ import annotations

import numpy as np
import pytest

from satpoint.engine.schedule import due_times
from satpoint.plan import PlanError, RateCurve, Stage, spans, validate_plan

STEPS = [Stage(200, 1.0, 3.0), Stage(100, 0.0, 2.0), Stage(50, 0.0, 2.0)]


def test_a_falling_plan_is_refused_unless_asked_for() -> None:
    with pytest.raises(PlanError, match="rise monotonically"):
        validate_plan(STEPS)
    with pytest.raises(PlanError, match="rise monotonically"):
        due_times(STEPS)
    validate_plan(STEPS, descending=True)
    sp = spans(STEPS, descending=True)
    assert [(s.start_s, s.hold_start_s, s.end_s) for s in sp] == [(0, 1, 4), (4, 4, 6), (6, 6, 8)]


def test_steps_down_with_no_ramp_keep_each_rate_and_never_burst() -> None:
    due = due_times(STEPS, descending=True)
    assert np.all(np.diff(due) > 0)
    # the ramp (100 requests), the overload hold (600), then each step at its own rate, none caught up
    counts = [np.count_nonzero((due >= a) & (due < b)) for a, b in ((0, 1), (1, 4), (4, 6), (6, 8))]
    assert counts == [100, 600, 200, 100]
    gaps = {round(float(g), 6) for g in np.diff(due[(due > 1.01) & (due < 3.99)])}
    assert gaps == {0.005}
    assert np.allclose(np.diff(due[(due > 4.0) & (due < 6.0)]), 0.01)
    assert np.allclose(np.diff(due[due > 6.0]), 0.02)
    assert float(np.min(np.diff(due[due > 1.0]))) >= 0.005 - 1e-9  # no gap shorter than the highest rate's
    curve = RateCurve(STEPS, descending=True)
    assert [curve.rate(t) for t in (2.0, 4.5, 7.0)] == [200, 100, 50]


def test_a_falling_ramp_integrates_to_its_mean_rate() -> None:
    due = due_times([Stage(100, 0.0, 1.0), Stage(50, 2.0, 1.0)], descending=True)
    ramp = np.count_nonzero((due >= 1.0) & (due < 3.0))
    assert ramp == pytest.approx(0.5 * (100 + 50) * 2.0, abs=1)
    assert np.all(np.diff(due[(due >= 1.0) & (due < 3.0)]) > 0)
    assert np.all(np.diff(np.diff(due[(due >= 1.0) & (due < 3.0)])) > -1e-12)  # gaps widen as the rate falls
