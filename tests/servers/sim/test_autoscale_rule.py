"""``sim --autoscale``'s rule in virtual time: decisions at sync ticks, replicas ready a fixed delay later, the
scale-down held by the window, and the capacity that follows the ready replicas."""

from __future__ import annotations

import pytest

from satpoint.errors import ConfigError
from satpoint.servers.sim.autoscale.hpa import ScaledScheduler
from satpoint.servers.sim.autoscale.spec import AutoscaleSpec, parse_autoscale
from satpoint.servers.sim.model import SimConfig


def _feed(sched: ScaledScheduler, rate_rps: float, start_s: float, end_s: float) -> list[float]:
    """Arrivals at ``rate_rps`` over ``[start_s, end_s)``; returns each request's latency."""
    n = round((end_s - start_s) * rate_rps)
    out = []
    for i in range(n):
        a = start_s + i / rate_rps
        out.append(sched.admit(a).finish_s - a)
    return out


def _sched(**kw: float) -> ScaledScheduler:
    spec = AutoscaleSpec(**{"min_replicas": 1, "max_replicas": 4, "delay_s": 3.0, "target": 0.5, "sync_s": 1.0,
                            "down_window_s": 4.0, **kw})  # type: ignore[arg-type]  # fmt: skip
    return ScaledScheduler(SimConfig(slots=1, service_ms=20.0, autoscale=spec), spec, 0.0)  # 50 rps per replica


def test_a_step_asks_for_replicas_at_the_next_sync_and_they_serve_the_delay_later() -> None:
    s = _sched()
    _feed(s, 20.0, 0.0, 5.0)  # utilisation 0.4 of one replica: within reach of 0.5? 0.8 ratio -> ceil(0.8)=1
    assert s.desired == 1 and s.ready == 1
    _feed(s, 100.0, 5.0, 12.0)  # 2x one replica: ratio 4 -> 4 replicas
    first = next(e for e in s.events if e.kind == "desired")
    assert first.at_s == pytest.approx(6.0) and first.desired == 4 and first.utilisation == pytest.approx(2.0)
    readies = [e.at_s for e in s.events if e.kind == "ready"]
    assert readies == pytest.approx([9.0, 9.0, 9.0])
    assert s.ready == 4


def test_latency_grows_until_the_replicas_serve_then_recovers() -> None:
    s = _sched()
    lat = _feed(s, 100.0, 0.0, 12.0)
    # overloaded 2x from 0 until the replicas ready at 1 + 3 = 4 s: the backlog of ~200 requests drains after
    assert max(lat) > 1.0
    assert max(lat[-100:]) == pytest.approx(0.02, abs=1e-6)  # the last second: service time only


def test_scale_down_waits_for_the_window() -> None:
    s = _sched()
    _feed(s, 100.0, 0.0, 10.0)
    assert s.desired == 4
    _feed(s, 10.0, 10.0, 20.0)
    down = [e for e in s.events if e.kind == "desired" and e.desired < 4]
    assert down, s.events
    # the recommendations of high load leave the window 4 s after the last of them (at 10 s)
    assert down[0].at_s >= 14.0 - 1e-9
    assert s.ready == s.desired == 1
    removed = [e for e in s.events if e.kind == "removed"]
    assert len(removed) == 3


def test_within_tolerance_nothing_changes() -> None:
    s = _sched(min_replicas=2, max_replicas=4)
    _feed(s, 52.0, 0.0, 5.0)  # utilisation 0.52 of 2 replicas vs target 0.5: ratio 1.04
    assert [e for e in s.events if e.kind == "desired"] == []


def test_parse() -> None:
    assert parse_autoscale("1:4", delay_s=2.0) == AutoscaleSpec(1, 4, 2.0)
    assert parse_autoscale(None) is None
    for bad in ("4:1", "x", "0:2"):
        with pytest.raises(ConfigError):
            parse_autoscale(bad)
    with pytest.raises(ConfigError):
        SimConfig(autoscale=AutoscaleSpec(1, 2), metastable_high=5, metastable_factor=2.0)
