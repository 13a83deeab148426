"""The closed-loop mode: against an in-process fake transport (fast) and against the sim subprocess."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from satpoint.analysis.summary.build import build_summary
from satpoint.config import RunConfig
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.engine.closed_loop import ClosedLoopOptions, closed_loop_segment, run_closed_loop
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import Results, new_header
from satpoint.servers.sim.process import SimServer
from satpoint.transports.base import TransportFactory

perf = time.perf_counter


class FakeTransport:
    """c slots, constant service time; or every request refused at once (``refuse``)."""

    def __init__(
        self, rec: Records, on_free: Callable[[], None], service_s: float, cap: int, refuse: bool = False
    ) -> None:
        self.rec = rec
        self.on_free = on_free
        self.service_s = service_s
        self.cap = cap
        self.refuse = refuse
        self.busy: set[int] = set()
        self.max_busy = 0
        self.loop = asyncio.get_event_loop()

    async def prepare(self, warm_connections: int) -> None:
        return None

    def try_send(self, idx: int, payload_idx: int) -> bool:
        if len(self.busy) >= self.cap:
            return False
        self.rec.sent[idx] = perf()
        self.busy.add(idx)
        self.max_busy = max(self.max_busy, len(self.busy))
        self.loop.call_later(0.0 if self.refuse else self.service_s, self._finish, idx)
        return True

    def _finish(self, idx: int) -> None:
        if idx not in self.busy:
            return
        self.busy.discard(idx)
        self.rec.done[idx] = perf()  # columns are looked up on every write: they may have grown
        self.rec.outcome[idx] = Outcome.CONN_REFUSED if self.refuse else Outcome.OK
        self.on_free()

    def inflight(self) -> int:
        return len(self.busy)

    def expire(self, now: float, timeout_s: float) -> None:
        return None

    def abort_all(self, outcome: int) -> None:
        for idx in self.busy:
            self.rec.done[idx] = perf()
            self.rec.outcome[idx] = outcome
        self.busy.clear()

    async def close(self) -> None:
        return None


def fake(
    service_s: float, cap: int, refuse: bool = False, seen: list[FakeTransport] | None = None
) -> Callable[[], TransportFactory]:
    def factory(rec: Records, on_free: Callable[[], None]) -> FakeTransport:
        t = FakeTransport(rec, on_free, service_s, cap, refuse)
        if seen is not None:
            seen.append(t)
        return t

    return lambda: factory


def max_overlap(rec: Records) -> int:
    events = sorted([(float(t), 1) for t in rec.sent] + [(float(t), -1) for t in rec.done], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    return peak


def test_users_loop_with_think_time_and_growing_columns() -> None:
    seen: list[FakeTransport] = []
    opts = ClosedLoopOptions(users=3, duration_s=1.0, think_s=0.005, chunk_rows=16)
    out = run_closed_loop(fake(0.010, cap=3, seen=seen), opts, lead_s=0.02)
    rec = out.records
    # 3 users x 1 s / (10 ms service + 5 ms think) = 200 requests; columns grew from 16 rows.  The fake's
    # service uses the loop's millisecond timers (late by up to ~1 ms), hence the measured service time.
    svc = float(np.mean(rec.service_s()))
    assert svc == pytest.approx(0.010, abs=0.003)
    assert len(rec) == pytest.approx(3 * 1.0 / (svc + 0.005), rel=0.1)
    assert np.array_equal(rec.intended, rec.sent)  # a closed loop measures from the actual send
    assert np.all(np.diff(rec.intended) >= 0)
    assert np.all(rec.outcome == Outcome.OK)
    assert not rec.waited.any()
    assert seen[0].max_busy <= 3 and max_overlap(rec) <= 3  # never more than one request per user
    assert float(rec.sent.max()) < 1.0  # nobody sends after the duration
    assert not out.interrupted and out.elapsed_s == 1.0


def test_without_think_time_throughput_is_users_over_service_time() -> None:
    out = run_closed_loop(fake(0.020, cap=8), ClosedLoopOptions(users=4, duration_s=1.0), lead_s=0.02)
    svc = float(np.mean(out.records.service_s()))  # 20 ms, plus the fake's timer lateness
    assert svc == pytest.approx(0.020, abs=0.006)
    assert len(out.records) == pytest.approx(4 * 1.0 / svc, rel=0.1)  # about 200 requests in 1 s


def test_refused_connections_back_off_instead_of_spinning() -> None:
    opts = ClosedLoopOptions(users=2, duration_s=0.5, error_backoff_s=0.01)
    rec = run_closed_loop(fake(0.0, cap=2, refuse=True), opts, lead_s=0.02).records
    assert 0 < len(rec) <= 2 * (0.5 / 0.01) + 4
    assert np.all(rec.outcome == Outcome.CONN_REFUSED)


def test_stop_event_ends_the_run_early() -> None:
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    t = perf()
    seg = closed_loop_segment(fake(0.005, cap=2), ClosedLoopOptions(users=2, duration_s=10.0), stop_event=stop)
    assert perf() - t < 2.0
    assert seg.interrupted and seg.stopped == "interrupted"
    assert seg.stages[0].hold_s < 1.0


@pytest.mark.parametrize(
    "kwargs",
    [{"users": 0, "duration_s": 1.0}, {"users": 1, "duration_s": 0.0}, {"users": 1, "duration_s": 1.0, "think_s": -1}],
)
def test_options_are_validated(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ClosedLoopOptions(**kwargs).validate()  # type: ignore[arg-type]


# against the synthetic server --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    # 8 slots x 20 ms: a user never waits for a slot, so each answer takes S = 20 ms (+ timer jitter)
    with SimServer(slots=8, service_ms=20) as sim:
        yield sim.url


@pytest.mark.slow
@pytest.mark.parametrize(("users", "think_ms"), [(4, 0.0), (2, 20.0)])
def test_closed_loop_against_sim_reaches_users_over_cycle_time(sim_url: str, users: int, think_ms: float) -> None:
    target = prepare(Target(url=sim_url, model="sim"), users)
    opts = ClosedLoopOptions(
        users=users, duration_s=3.0, think_s=think_ms / 1000, payload_count=len(target.payload_docs)
    )
    seg = closed_loop_segment(target.builder, opts)
    rec = seg.records
    assert seg.purpose == "closed_loop" and seg.arrival == "closed"
    assert np.array_equal(rec.intended, rec.sent)
    assert np.all(rec.outcome == Outcome.OK)
    svc = rec.service_s()
    assert float(np.median(svc)) == pytest.approx(0.020, abs=0.004)
    expected = users / (0.020 + think_ms / 1000)  # users / (S + think)
    (stage,) = seg.stages
    assert stage.ramp_s == 0 and stage.hold_s == 3.0
    assert stage.target_rps == pytest.approx(len(rec) / 3.0)
    # a shared CI machine adds scheduling delays: allow 20 % below, none meaningfully above
    assert 0.8 * expected <= stage.target_rps <= 1.05 * expected
    # Little's law on the measured cycle: throughput = users / (mean service + mean think)
    assert stage.target_rps == pytest.approx(users / (float(np.mean(svc)) + think_ms / 1000), rel=0.1)


@pytest.mark.slow
def test_closed_loop_summary_is_labelled(sim_url: str) -> None:
    target = prepare(Target(url=sim_url, model="sim"), 2)
    opts = ClosedLoopOptions(users=2, duration_s=2.0, payload_count=len(target.payload_docs))
    seg = closed_loop_segment(target.builder, opts)
    config = {"mode": "closed_loop", "closed_loop": opts.describe(), "thresholds": ["p99<1s", "throughput_rps>1"]}
    results = Results(
        new_header(
            RunConfig.from_header({"kind": "run", "config": config}),
            {"url": sim_url, "model": "sim", "protocol": "rest"},
            time.time(),
        )
    )
    results.segments.append(seg)
    s = build_summary(results)
    assert s["mode"] == "closed_loop"
    assert s["closed_loop"]["users"] == 2
    assert s["warnings"][0].startswith("CLOSED LOOP (2 users)")
    assert "UNDER-REPORT" in s["warnings"][0]
    (st,) = s["stages"]
    assert st["verdict"] == "stable"  # still judged, but labelled: a closed loop cannot see queueing
    assert [t["passed"] for t in s["thresholds"]] == [True, True]
