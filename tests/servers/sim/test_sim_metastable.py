"""The sim's metastable mode: degraded once more than HIGH requests wait, until fewer than LOW do; the services
that *start* degraded take FACTOR x. The model in virtual time, its known rates, then the gRPC servicer on a
real loop and (slow) the REST server as a subprocess."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np
import pytest
import uvloop

from satpoint.errors import ConfigError
from satpoint.servers.sim.metastable import MetastableScheduler, Ticket
from satpoint.servers.sim.model import (
    ErrorDraws,
    ServiceDraws,
    SimConfig,
    SlotScheduler,
    metastable_line,
)
from satpoint.servers.sim.rates import metastable_figures, parse_metastable

S = 0.010  # service time of the model tests


def _scheduler(slots: int, high: int, low: int, factor: float) -> MetastableScheduler:
    rng = np.random.default_rng(0)
    return MetastableScheduler(
        slots=slots,
        service=ServiceDraws("const", S, rng),
        errors=ErrorDraws(0.0, rng),
        high=high,
        low=low,
        factor=factor,
    )


def _finish(t: Ticket) -> float:
    assert t.finish_s is not None
    return t.finish_s


# --------------------------------------------------------------------------------------------------
# The model, in virtual time
# --------------------------------------------------------------------------------------------------


def test_degraded_from_the_arrival_that_makes_more_than_high_wait() -> None:
    sched = _scheduler(1, high=3, low=1, factor=2.0)
    first = sched.admit(0.0)
    assert first.start_s == 0.0 and first.finish_s == pytest.approx(S)  # a free slot: started at once
    for _ in range(3):
        sched.admit(0.0)
    assert (sched.waiting, sched.degraded) == (3, False)  # 3 waiting: not more than HIGH
    sched.admit(0.001)
    assert (sched.waiting, sched.degraded, sched.collapses) == (4, True, 1)
    assert not first.slow  # in service when it tipped over: not slowed down


def test_stays_degraded_until_fewer_than_low_wait_and_only_later_starts_are_slow() -> None:
    sched = _scheduler(1, high=3, low=2, factor=2.0)
    tickets = [sched.admit(0.0) for _ in range(6)]  # 1 in service, 5 waiting: degraded
    assert sched.degraded
    started: list[Ticket] = []
    sched.on_start = started.append
    sched.advance(0.0299)  # #2 started at 0.01, slow (4 left waiting)
    assert [t.slow for t in started] == [True] and (sched.waiting, sched.degraded) == (4, True)
    sched.advance(0.0699)  # #3 (3 left), #4 (2 left: fewer than HIGH, not fewer than LOW): still degraded
    assert [t.slow for t in started] == [True, True, True] and (sched.waiting, sched.degraded) == (2, True)
    sched.advance(1.0)  # #5 leaves 1 waiting (< LOW): recovered, and its own service is a normal one
    assert not sched.degraded and (sched.collapses, sched.recoveries) == (1, 1)
    # arrival order does not decide it: #2-#4 arrived before it tipped and are slow, #6 arrived degraded
    # and is not; only where each service started counts
    assert [t.slow for t in tickets] == [False, True, True, True, False, False]
    assert [_finish(t) for t in tickets] == pytest.approx([0.01, 0.03, 0.05, 0.07, 0.08, 0.09])
    assert started == tickets[1:]  # on_start: every waiting request, in start order


def test_a_request_that_arrives_while_others_wait_keeps_it_degraded() -> None:
    # The state at a service's start counts the requests that arrived while it waited.
    alone = _scheduler(1, high=3, low=2, factor=2.0)
    tickets = [alone.admit(0.0) for _ in range(5)]  # 4 waiting: degraded
    alone.advance(1.0)  # #2 (3 left) and #3 (2 left) slow, #4 leaves 1: recovered
    assert [t.slow for t in tickets] == [False, True, True, False, False]

    joined = _scheduler(1, high=3, low=2, factor=2.0)
    tickets = [joined.admit(0.0) for _ in range(5)]
    late = joined.admit(0.04)  # before #4 starts (0.05): it still leaves 2 waiting
    joined.advance(1.0)
    assert [t.slow for t in tickets] == [False, True, True, True, False]
    assert not late.slow and not joined.degraded


def test_a_waiting_request_is_settled_only_when_it_starts() -> None:
    sched = _scheduler(2, high=1, low=1, factor=3.0)
    a, b, c = sched.admit(0.0), sched.admit(0.0), sched.admit(0.002)
    assert c.start_s is None and c.finish_s is None  # both slots busy: waiting
    assert sched.next_start_s() == pytest.approx(S)
    d = sched.admit(0.003)  # 2 waiting > HIGH: degraded
    assert sched.degraded and d.finish_s is None
    sched.advance(0.5)
    assert c.start_s == pytest.approx(S) and c.slow  # 1 left waiting, not < LOW: a 3x service
    assert _finish(c) == pytest.approx(S + 3 * S)
    assert not d.slow and _finish(d) == pytest.approx(2 * S)  # leaves none waiting: recovered first
    assert [a.slow, b.slow] == [False, False]


def _run_at(sched: MetastableScheduler, rate_rps: float, start_s: float, duration_s: float) -> list[Ticket]:
    n = round(rate_rps * duration_s)
    return [sched.admit(start_s + i / rate_rps) for i in range(n)]


def _completion_rate(tickets: list[Ticket], from_s: float, to_s: float) -> float:
    finishes = [t.finish_s for t in tickets]
    return sum(1 for f in finishes if f is not None and from_s <= f < to_s) / (to_s - from_s)


def test_collapse_goodput_and_recovery_rates_are_the_known_ones() -> None:
    # 2 slots x 10 ms: collapses above 200 rps, serves 80 rps degraded (2.5x), recovers below 80 rps
    config = SimConfig(slots=2, service_ms=10, metastable_high=20, metastable_low=2, metastable_factor=2.5)
    figures = config.metastable_figures()
    assert figures is not None
    assert figures == pytest.approx((200.0, 80.0, 80.0))
    sched = MetastableScheduler.from_config(config, 0.0)
    _run_at(sched, 190.0, 0.0, 5.0)  # just below the collapse rate: never tips
    assert sched.collapses == 0
    over = _run_at(sched, 220.0, 5.0, 3.0)  # just above: tips over (about 6 s), goodput falls to 80 rps
    assert sched.collapses == 1 and sched.degraded
    between = _run_at(sched, 150.0, 8.0, 3.0)  # under the collapse rate, above recovery: stays degraded
    assert sched.degraded and sched.recoveries == 0
    _run_at(sched, 75.0, 11.0, 150.0)  # just under the recovery rate the queue (~500) drains: recovered
    sched.advance(161.0)
    assert not sched.degraded and (sched.collapses, sched.recoveries) == (1, 1)
    assert _completion_rate(over + between, 7.0, 11.0) == pytest.approx(80.0, rel=0.02)


def test_never_degraded_it_is_the_plain_scheduler() -> None:
    config = SimConfig(
        slots=3, service_ms=10, dist="exp", error_rate=0.2, seed=4, metastable_high=10**6, metastable_factor=2.0
    )
    plain = SlotScheduler.from_config(SimConfig(slots=3, service_ms=10, dist="exp", error_rate=0.2, seed=4), 0.0)
    meta = MetastableScheduler.from_config(config, 0.0)
    arrivals = [i / 400.0 for i in range(2000)]  # above capacity (300 rps): a queue builds
    expected = [plain.admit(a) for a in arrivals]
    got = [meta.admit(a) for a in arrivals]
    meta.advance(float("inf"))
    assert [(t.start_s, t.finish_s, t.error) for t in got] == [tuple(a) for a in expected]


# --------------------------------------------------------------------------------------------------
# Configuration and known figures
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"metastable_high": 2, "metastable_low": 2, "metastable_factor": 2.0},  # HIGH > LOW
        {"metastable_high": 2, "metastable_low": -1, "metastable_factor": 2.0},  # LOW >= 0
        {"metastable_high": 2, "metastable_low": 1, "metastable_factor": 1.0},  # FACTOR > 1
        {"metastable_high": 2, "metastable_low": 1, "metastable_factor": float("inf")},
        {"metastable_high": 2.5, "metastable_low": 1, "metastable_factor": 2.0},  # integers
        {"metastable_low": 1},  # needs HIGH
        {"metastable_factor": 2.0},
    ],
)
def test_config_rejects_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="metastable"):
        SimConfig(**kwargs)


@pytest.mark.parametrize("text", ["20,2", "20,2,2.5,1", "a,2,2.5", "20.5,2,2", ""])
def test_flag_value_must_be_high_low_factor(text: str) -> None:
    with pytest.raises(ConfigError, match="HIGH,LOW,FACTOR"):
        parse_metastable(text)


def test_known_figures_and_the_start_line() -> None:
    assert parse_metastable(" 20, 2 ,2.5") == (20, 2, 2.5)
    assert metastable_figures(4, 10.0, 2.0, 1) == pytest.approx((400.0, 200.0, 200.0))
    assert metastable_figures(4, 10.0, 2.0, 0).recovery_rps == 0.0  # fewer than 0 never wait: no recovery
    assert SimConfig().metastable_figures() is None and metastable_line(SimConfig()) is None
    line = metastable_line(
        SimConfig(slots=2, service_ms=10, metastable_high=20, metastable_low=2, metastable_factor=2.5)
    )
    assert line is not None
    assert line.endswith("collapse_rps=200 degraded_capacity_rps=80 recovery_rps=80")


def test_sim_server_passes_the_flag_and_knows_the_figures() -> None:
    from satpoint.servers.sim.process import SimServer

    s = SimServer(slots=2, service_ms=10, metastable=(20, 2, 2.5))
    assert s.argv[s.argv.index("--metastable") + 1] == "20,2,2.5"
    assert (s.collapse_rps, s.degraded_capacity_rps, s.recovery_rps) == pytest.approx((200.0, 80.0, 80.0))
    assert SimServer().recovery_rps is None
    with pytest.raises(ValueError, match="HIGH > LOW"):
        SimServer(metastable=(2, 3, 2.0))


# --------------------------------------------------------------------------------------------------
# Real time: the gRPC servicer on a loop, the REST server as a subprocess
# --------------------------------------------------------------------------------------------------


def test_grpc_servicer_applies_it_in_real_time() -> None:
    from satpoint.servers.sim.grpc_server import _SimServicer
    from satpoint.transports.grpc.grpc_proto import message

    # 2 slots x 10 ms; 30 calls at once: 28 wait (> HIGH 3), so all but the very last start take 25 ms:
    # the last answer comes at 10 + 14 x 25 = 360 ms (150 ms without the mode)
    config = SimConfig(slots=2, service_ms=10, metastable_high=3, metastable_low=1, metastable_factor=2.5)
    request = message("ModelInferRequest")(model_name="sim", id="x").SerializeToString()

    async def main() -> tuple[list[float], _SimServicer]:
        t0 = time.perf_counter()
        servicer = _SimServicer(config, t0)
        done: list[float] = []

        async def call() -> None:
            await servicer.model_infer(request, None)
            done.append(time.perf_counter() - t0)

        await asyncio.wait_for(asyncio.gather(*(call() for _ in range(30))), 5.0)
        servicer.close()
        return done, servicer

    done, servicer = uvloop.run(main())
    assert servicer.metastable is not None
    assert (servicer.metastable.collapses, servicer.metastable.recoveries) == (1, 1)
    assert len(done) == 30
    assert 0.355 <= max(done) <= 0.45


@pytest.mark.slow
def test_rest_server_overloaded_answers_at_capacity_over_factor() -> None:
    import http.client

    from satpoint.servers.sim.process import SimServer

    n, slots = 60, 2
    body = b'{"inputs":[{"name":"input-0","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'
    with SimServer(slots=slots, service_ms=10, metastable=(5, 1, 2.5)) as sim:
        assert sim.degraded_capacity_rps == pytest.approx(80.0)
        assert "degraded_capacity_rps=80 " in sim.log_text()
        conns = [http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10) for _ in range(n)]
        for c in conns:
            c.connect()
        barrier = threading.Barrier(n)
        done: list[float] = []

        def one(c: http.client.HTTPConnection) -> None:
            barrier.wait()
            c.request("POST", "/v2/models/sim/infer", body=body)
            r = c.getresponse()
            r.read()
            if r.status == 200:
                done.append(time.perf_counter())

        threads = [threading.Thread(target=one, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        for c in conns:
            c.close()
    assert len(done) == n
    done.sort()
    # the burst keeps far more than 5 waiting: completions at 80 rps (200 rps without the mode)
    rate = (40 - 10) / (done[39] - done[9])
    assert rate == pytest.approx(sim.degraded_capacity_rps, rel=0.15)
