"""``scale-test``'s figures from rows and replica readings: failures count as over the objective, a peak that ends
over it is not a recovery, a replica count that never rose is said, and the margin check's two answers."""

from __future__ import annotations

import numpy as np
import pytest

from satpoint.analysis.scale import ReplicaPoint, ScalePhases, margin_check, request_latency, scale_block

PHASES = ScalePhases(step_s=5.0, down_s=15.0, end_s=20.0, from_rps=10.0, to_rps=50.0, ramp_s=0.0)


def _rows(latency_of: dict[int, float], rate: int = 10, end: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """``rate`` requests per second; the second ``s`` answers in ``latency_of.get(s, 0.01)`` seconds."""
    intended = np.arange(end * rate, dtype=np.float64) / rate
    lat = np.array([latency_of.get(int(t), 0.01) for t in intended])
    return intended, lat


def _points(ready_at: float | None, end: int = 20) -> list[ReplicaPoint]:
    return [ReplicaPoint(t + 0.5, 3.0 if ready_at is not None and t + 0.5 >= ready_at else 1.0, None)
            for t in range(end)]  # fmt: skip


def test_seconds_over_and_recovery_follow_the_rows_and_the_readings() -> None:
    intended, lat = _rows({5: 2.0, 6: 1.5, 7: 0.9})
    b = scale_block(intended, lat, PHASES, "p99", 500.0, _points(8.0), source="test")
    assert b["seconds_over_slo"] == 3 and b["requests_over_slo"] == 30
    assert b["time_to_recover_s"] == 3.0 and b["recovered"] is True
    assert b["scaled"] and b["replicas_before"] == 1.0 and b["replicas_peak"] == 3.0
    # first seen by the reading at 8.5, the one before at 7.5: placed at 8.0, 3 s after the step
    assert b["time_to_replicas_s"] == pytest.approx(3.0) and b["replica_ready_s"] == [3.0, 3.0]


def test_failed_requests_are_over_the_objective_and_a_failing_peak_is_not_a_recovery() -> None:
    intended = np.arange(200, dtype=np.float64) / 10
    ok = intended < 5.0  # the server stops answering at the step: errors, never a latency
    done = intended + 0.01
    lat = request_latency(intended, done, ok)
    b = scale_block(intended, lat, PHASES, "p99", 500.0, _points(None), source="test")
    assert b["recovered"] is False and b["time_to_recover_s"] is None
    assert b["requests_failed"] == 150 and b["requests_over_slo"] == 150
    assert b["seconds_over_slo"] == 15
    assert not b["scaled"] and any("did not scale" in n for n in b["notes"])
    assert any("no request of the peak" in n for n in b["notes"])


def test_one_failed_request_in_a_hundred_puts_its_second_over_p99() -> None:
    intended, lat = _rows({}, rate=100)
    lat[100 * 12 + 7] = np.inf  # one failure in second 12
    b = scale_block(intended, lat, PHASES, "p99", 500.0, _points(6.0), source="test")
    assert b["seconds_over_slo"] == 1 and b["time_to_recover_s"] == 8.0
    rows = b["timeline"]
    assert rows[12]["over"] and rows[12]["failed"] == 1 and rows[12]["p99_ms"] is None


def test_a_server_that_holds_without_scaling_is_said_so() -> None:
    intended, lat = _rows({})
    b = scale_block(intended, lat, PHASES, "p99", 500.0, _points(None), source="test")
    assert b["recovered"] is True and b["time_to_recover_s"] == 0.0 and b["scaled"] is False
    assert b["time_to_replicas_s"] is None


def test_margin_check() -> None:
    ramp = ScalePhases(5.0, 25.0, 30.0, from_rps=60.0, to_rps=160.0, ramp_s=20.0)  # 5 rps/s
    tight = margin_check(ramp, 100.0, 10.0, 1.0)  # 50 rps arrive in the delay; 40 % headroom in use
    assert tight["needed"] == pytest.approx(0.5) and tight["in_use"] == pytest.approx(0.4) and not tight["enough"]
    enough = margin_check(ramp, 100.0, 6.0, 1.0)  # 30 rps in the delay
    assert enough["enough"] is True
    assert margin_check(ramp, 100.0, None, 1.0)["enough"] is None


def test_the_prediction_grows_with_the_delay_and_shrinks_with_headroom() -> None:
    from satpoint.analysis.scale_predict import predict

    intended = np.concatenate([np.arange(0, 5, 1 / 20), np.arange(5, 15, 1 / 100), np.arange(15, 20, 1 / 20)])
    kw = {"capacity_rps": 50.0, "max_replicas": 4, "target": 0.5, "sync_s": 1.0, "down_window_s": 2.0}
    slow = predict(intended, PHASES, "p99", 200.0, replicas_before=1, delay_s=4.0, **kw)  # type: ignore[arg-type]
    fast = predict(intended, PHASES, "p99", 200.0, replicas_before=1, delay_s=1.0, **kw)  # type: ignore[arg-type]
    roomy = predict(intended, PHASES, "p99", 200.0, replicas_before=2, delay_s=4.0, **kw)  # type: ignore[arg-type]
    assert slow["seconds_over_slo"] > fast["seconds_over_slo"] > 0
    assert roomy["seconds_over_slo"] < slow["seconds_over_slo"]
    lo, hi = slow["seconds_over_slo_range"]
    assert lo <= slow["seconds_over_slo"] <= hi and slow["time_to_replicas_s"] >= 4.0


def test_a_gap_in_the_readings_places_the_change_at_the_later_reading_and_the_base_is_judged() -> None:
    intended, lat = _rows({2: 0.9})  # over at the base already
    points = [p for p in _points(8.0) if not 5.0 < p.t_s < 12.0]  # readings fail from 5 to 12 s
    b = scale_block(intended, lat, PHASES, "p99", 500.0, points, source="test")
    assert b["time_to_replicas_s"] == pytest.approx(12.5 - 5.0)  # not mid-way through the gap
    assert any("already at the base rate" in n for n in b["notes"])
