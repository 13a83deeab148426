"""The open-loop dispatcher against an in-test transport whose answers the test controls.

The transport follows the ``HotTransport`` contract (transports/base.py): it stamps ``sent`` on
``try_send``, stamps ``done``/``outcome``/``status`` when an answer comes (or when ``expire`` times a
request out) and calls ``on_free`` whenever a slot frees.  Most tests run through
``engine.runner.run_shard`` (a uvloop loop, the timerfd wake-up timer), the way a real run is wired;
tests that steer the answers by hand run the dispatcher and a controller on one uvloop loop.  Timing
assertions are loose lower/upper bounds: this is a shared machine, the tests check behaviour.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from satpoint.engine.dispatcher import DispatchOptions, Housekeeping, OpenLoopDispatcher, Progress
from satpoint.engine.runner import ShardStats, run_shard
from satpoint.engine.timer import WakeTimer
from satpoint.metrics.records import Outcome, Records
from satpoint.transports.base import HotTransport, TransportFactory

perf = time.perf_counter

#: what the transport does with request ``idx``: (answer after seconds | None = never, outcome, status)
Answer = tuple[float | None, Outcome, int]
Script = Callable[[int], Answer]


def answer_after(delay_s: float | None, outcome: Outcome = Outcome.OK, status: int = 200) -> Script:
    return lambda idx: (delay_s, outcome, status)


NEVER = answer_after(None)


class FakeTransport:
    """``cap`` slots; each request is answered as ``script(idx)`` says (or by :meth:`answer`)."""

    def __init__(self, rec: Records, on_free: Callable[[], None], script: Script, cap: int) -> None:
        self.rec = rec
        self.on_free = on_free
        self.script = script
        self.cap = cap
        self.loop = asyncio.get_running_loop()
        self.busy: dict[int, float] = {}  # idx -> sent time
        self.max_busy = 0
        self.sends: list[tuple[int, int, float]] = []  # (idx, payload_idx, perf time)
        self.refused = 0  # try_send calls that found every slot taken
        self.prepared: list[int] = []
        self.expire_calls: list[tuple[float, float]] = []
        self.aborted_with: list[int] = []
        self.closed = False
        self.sent_after_end = 0

    async def prepare(self, warm_connections: int) -> None:
        self.prepared.append(warm_connections)

    def try_send(self, idx: int, payload_idx: int) -> bool:
        if self.closed or self.aborted_with:
            self.sent_after_end += 1
        if len(self.busy) >= self.cap:
            self.refused += 1
            return False
        now = perf()
        self.rec.sent[idx] = now
        self.busy[idx] = now
        self.max_busy = max(self.max_busy, len(self.busy))
        self.sends.append((idx, payload_idx, now))
        delay, outcome, status = self.script(idx)
        if delay is not None:
            self.loop.call_later(delay, self.answer, idx, outcome, status)
        return True

    def answer(self, idx: int, outcome: Outcome = Outcome.OK, status: int = 200, notify: bool = True) -> None:
        """Finish ``idx``; ``notify=False`` frees the slot without telling the dispatcher yet."""
        if self.busy.pop(idx, None) is None:
            return  # timed out or aborted meanwhile
        self.rec.done[idx] = perf()
        self.rec.outcome[idx] = outcome
        self.rec.status[idx] = status
        if notify:
            self.on_free()

    def inflight(self) -> int:
        return len(self.busy)

    def expire(self, now: float, timeout_s: float) -> None:
        self.expire_calls.append((now, timeout_s))
        for idx, sent in list(self.busy.items()):
            if sent < now - timeout_s:
                del self.busy[idx]
                self.rec.done[idx] = now
                self.rec.outcome[idx] = Outcome.TIMEOUT
                self.on_free()

    def abort_all(self, outcome: int) -> None:
        self.aborted_with.append(outcome)
        for idx in self.busy:
            self.rec.done[idx] = perf()
            self.rec.outcome[idx] = outcome
        self.busy.clear()

    async def close(self) -> None:
        self.closed = True


@dataclass
class Made:
    """The transports a factory built (one per run)."""

    transports: list[FakeTransport] = field(default_factory=list)

    @property
    def one(self) -> FakeTransport:
        assert len(self.transports) == 1
        return self.transports[0]


def fake_factory(script: Script, cap: int = 1_000_000) -> tuple[TransportFactory, Made]:
    made = Made()

    def factory(rec: Records, on_free: Callable[[], None]) -> HotTransport:
        t = FakeTransport(rec, on_free, script, cap)
        made.transports.append(t)
        return t

    return factory, made


def shard(
    due_s: np.ndarray,
    script: Script,
    options: DispatchOptions,
    *,
    cap: int = 1_000_000,
    lead_s: float = 0.05,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[Records, ShardStats, FakeTransport, float]:
    """One shard through ``run_shard`` (uvloop + timerfd); returns rows, stats, the transport and t0."""
    factory, made = fake_factory(script, cap)
    t0 = perf() + lead_s
    rec, stats = run_shard(np.asarray(due_s, dtype=np.float64), t0, lambda: factory, options, None, stop)
    return rec, stats, made.one, t0


def on_uvloop(coro: Coroutine[Any, Any, Any], timeout_s: float = 5.0) -> Any:
    """Run ``coro`` on a fresh uvloop loop; a hang fails after ``timeout_s`` instead of blocking."""
    return uvloop.run(asyncio.wait_for(coro, timeout_s))


async def until(pred: Callable[[], bool], timeout_s: float = 2.0) -> None:
    deadline = perf() + timeout_s
    while not pred():
        assert perf() < deadline, "condition not reached in time"
        await asyncio.sleep(0.002)


# rows, order and timing ---------------------------------------------------------------------------------
def test_every_due_request_gets_a_row_and_leaves_at_its_due_time() -> None:
    due = np.arange(200, dtype=np.float64) / 400.0  # 400 rps for half a second
    opts = DispatchOptions(timeout_s=5.0, drain_s=2.0, warm_connections=3, payload_count=3)
    rec, stats, t, _ = shard(due, answer_after(0.002), opts)

    assert len(rec) == 200 and stats.requests == 200 and not stats.stopped_early
    assert np.array_equal(rec.intended, due)  # due times never move
    assert (rec.outcome == Outcome.OK).all() and (rec.status == 200).all()
    assert not rec.waited.any() and t.refused == 0
    # in schedule order, one send per row, payloads dealt round-robin
    assert [s[0] for s in t.sends] == list(range(200))
    assert [s[1] for s in t.sends] == [i % 3 for i in range(200)]
    assert t.prepared == [3]
    assert t.aborted_with == [Outcome.UNFINISHED] and t.closed and t.sent_after_end == 0
    # rows come back on the run clock: sent/done are relative to t0 like intended
    lag = rec.send_lag_s()
    assert lag.min() >= -1e-3  # never early (timerfd wakes at or after the due time)
    assert np.median(lag) < 0.01
    assert np.mean(lag < 0.05) > 0.9
    assert (rec.service_s() >= 0.002 - 1e-3).all()
    assert np.allclose(rec.latency_s(), rec.send_lag_s() + rec.service_s())
    # everything answered: the run ends without waiting out the drain time
    assert stats.wall_s < 0.05 + 0.5 + 1.5


def test_a_wake_window_sends_the_rows_due_within_it_in_one_wake_up_never_early() -> None:
    """Rows 2 ms apart, a 7 ms window: a wake-up waits for the last row due within 7 ms of the first one
    and sends the four together (every row still never early, its lag recorded)."""
    due = np.arange(40, dtype=np.float64) * 0.002
    opts = DispatchOptions(timeout_s=5.0, drain_s=2.0, wake_window_s=0.007)
    rec, _, t, _ = shard(due, answer_after(1.0), opts)

    assert (rec.outcome == Outcome.OK).all() and len(t.sends) == 40
    lag = rec.send_lag_s()
    assert lag.min() >= -1e-4  # never early
    sent = np.sort(rec.sent)
    wake_ups = 1 + int(np.count_nonzero(np.diff(sent) > 0.001))  # sends more than 1 ms apart: another wake-up
    assert wake_ups <= 12  # 10 windows of 4 rows (a late wake-up only merges more rows); without a window: 40
    assert lag.max() >= 0.005  # the first row of a window waited for the window's last one
    assert np.median(lag) < 0.5


def test_a_wake_window_never_delays_a_row_with_no_other_row_in_it() -> None:
    due = np.array([0.0, 0.3, 0.6])
    rec, _, _, _ = shard(due, answer_after(0.001), DispatchOptions(timeout_s=5.0, drain_s=1.0, wake_window_s=0.2))
    assert (rec.outcome == Outcome.OK).all()
    assert rec.send_lag_s().max() < 0.1  # each row alone in its window leaves at its own due time


def test_a_negative_wake_window_is_refused() -> None:
    with pytest.raises(ValueError, match="wake_window_s"):
        OpenLoopDispatcher(np.zeros(1), perf(), fake_factory(NEVER)[0], DispatchOptions(wake_window_s=-0.001))


def test_the_wake_timer_is_the_precise_timerfd_here() -> None:
    async def main() -> bool:
        timer = WakeTimer(asyncio.get_running_loop(), lambda: None)
        try:
            return timer.precise
        finally:
            timer.close()

    assert on_uvloop(main())


def test_never_waits_on_a_response() -> None:
    """A server that takes 0.5 s per answer: every request still leaves on schedule, before any answer."""
    due = np.arange(30, dtype=np.float64) / 100.0  # the last is due at 0.29 s
    rec, _, t, _ = shard(due, answer_after(0.5), DispatchOptions(timeout_s=5.0, drain_s=3.0))

    assert (rec.outcome == Outcome.OK).all()
    assert len(t.sends) == 30 and t.max_busy == 30
    assert np.nanmax(rec.sent) < np.nanmin(rec.done)  # all sent before the first answer came back
    assert np.median(rec.send_lag_s()) < 0.02
    assert (rec.service_s() >= 0.5 - 2e-3).all()
    assert not rec.waited.any()


def test_empty_schedule() -> None:
    rec, stats, t, _ = shard(np.empty(0), answer_after(0.0), DispatchOptions(drain_s=1.0))
    assert len(rec) == 0 and stats.requests == 0
    assert t.sends == [] and t.closed
    assert stats.wall_s < 1.0


# the in-flight cap and the backlog ---------------------------------------------------------------------
def test_full_cap_queues_in_a_fifo_backlog_marked_waited() -> None:
    """Two slots, six requests (three due at once, three more while the slots are still taken); the
    test answers out of order and the backlog still leaves in schedule order."""
    due = np.array([0.0, 0.0, 0.0, 0.05, 0.10, 0.15])
    factory, made = fake_factory(NEVER, cap=2)

    async def main() -> tuple[Records, list[bool]]:
        t0 = perf()
        disp = OpenLoopDispatcher(due, t0, factory, DispatchOptions(timeout_s=30.0, drain_s=3.0))
        run = asyncio.ensure_future(disp.run())
        await until(lambda: bool(made.transports) and perf() > t0 + 0.2)
        t = made.one
        assert [s[0] for s in t.sends] == [0, 1]  # the cap is full, the rest wait ...
        waited_while_full = disp.rec.waited.tolist()  # ... and were marked as they queued
        assert np.isnan(disp.rec.sent[2:]).all()
        for idx in (1, 0, 3, 2, 5, 4):  # out of order; each answer frees one slot
            await until(lambda idx=idx: idx in t.busy)  # type: ignore[misc]
            await asyncio.sleep(0.02)
            t.answer(idx)
        return await run, waited_while_full

    rec, waited_while_full = on_uvloop(main())
    t = made.one
    assert waited_while_full == [False, False, True, True, True, True]
    assert [s[0] for s in t.sends] == [0, 1, 2, 3, 4, 5]  # FIFO, whatever the answer order
    assert rec.waited.tolist() == [False, False, True, True, True, True]
    assert t.max_busy == 2
    assert (rec.outcome == Outcome.OK).all()
    # latency is measured from the intended time: waited rows carry their time in the backlog
    lag, service, latency = rec.send_lag_s(), rec.service_s(), rec.latency_s()
    assert np.allclose(latency, lag + service)
    assert (lag[2:] > 0.05).all()  # they left only when a slot freed, well after their due times
    assert (latency[2:] > service[2:] + 0.05).all()
    assert lag[2] >= 0.2 - 2e-3  # the first to wait left only after the test had held both slots 0.2 s


def test_newly_due_requests_never_overtake_the_backlog() -> None:
    """One slot; request 0 is answered but the transport reports the freed slot late (on_free need not
    be synchronous).  Request 2 comes due while request 1 still waits: it queues behind it, although
    the slot is free by then."""
    due = np.array([0.0, 0.0, 0.1])
    factory, made = fake_factory(NEVER, cap=1)

    async def main() -> Records:
        t0 = perf()
        disp = OpenLoopDispatcher(due, t0, factory, DispatchOptions(drain_s=3.0))
        run = asyncio.ensure_future(disp.run())
        await until(lambda: bool(made.transports) and perf() > t0 + 0.05)
        t = made.one
        t.answer(0, notify=False)  # the slot is free, the dispatcher does not know yet
        await until(lambda: perf() > t0 + 0.15)  # request 2 came due meanwhile
        assert [s[0] for s in t.sends] == [0]
        t.on_free()
        await until(lambda: 1 in t.busy)
        t.answer(1)
        await until(lambda: 2 in t.busy)
        t.answer(2)
        return await run

    rec = on_uvloop(main())
    assert [s[0] for s in made.one.sends] == [0, 1, 2]
    assert rec.waited.tolist() == [False, True, True]
    assert (rec.outcome == Outcome.OK).all()


def test_backlog_leaves_as_soon_as_a_slot_frees() -> None:
    """One slot, answers after 50 ms, five requests due at once: each leaves when the previous answers."""
    rec, _, t, _ = shard(np.zeros(5), answer_after(0.05), DispatchOptions(drain_s=3.0), cap=1)
    assert (rec.outcome == Outcome.OK).all()
    assert rec.waited.tolist() == [False, True, True, True, True]
    assert t.max_busy == 1
    order = np.argsort(rec.sent)
    assert order.tolist() == [0, 1, 2, 3, 4]
    # back to back: request k leaves when request k-1 is done (same callback), never before
    assert (rec.sent[1:] >= rec.done[:-1]).all()
    assert (rec.sent[1:] - rec.done[:-1] < 0.05).all()
    assert rec.latency_s()[4] >= 5 * 0.05 - 5e-3  # four answers waited for, plus its own


def test_requests_still_waiting_at_the_end_are_not_sent() -> None:
    """A server that never answers, two slots: after the drain time the two in flight are UNFINISHED,
    the three that never left are NOT_SENT with their due times and the end time (censored)."""
    opts = DispatchOptions(timeout_s=30.0, drain_s=0.3)
    rec, stats, t, _ = shard(np.zeros(5), NEVER, opts, cap=2)

    assert len(rec) == 5  # sent + not sent = due
    assert rec.outcome.tolist() == [Outcome.UNFINISHED] * 2 + [Outcome.NOT_SENT] * 3
    assert rec.waited.tolist() == [False, False, True, True, True]
    assert not np.isnan(rec.sent[:2]).any() and np.isnan(rec.sent[2:]).all()
    assert not np.isnan(rec.done).any()  # every row has a (censoring) end time
    assert (rec.latency_s() >= 0.3 - 5e-3).all()  # at least the drain time
    assert (rec.status == 0).all()
    assert t.aborted_with == [Outcome.UNFINISHED]
    assert [s[0] for s in t.sends] == [0, 1] and t.sent_after_end == 0
    assert 0.3 - 5e-3 <= stats.wall_s < 0.05 + 0.3 + 1.0


def test_timeouts_become_timeout_rows_and_free_their_slots() -> None:
    """One slot, a server that never answers, timeout 0.1 s: the housekeeping timer expires each
    request in turn; the freed slot sends the next one from the backlog."""
    opts = DispatchOptions(timeout_s=0.1, drain_s=3.0)
    rec, stats, t, _ = shard(np.zeros(3), NEVER, opts, cap=1)

    assert rec.outcome.tolist() == [Outcome.TIMEOUT] * 3
    assert rec.waited.tolist() == [False, True, True]
    assert not np.isnan(rec.sent).any() and not np.isnan(rec.done).any()
    assert (rec.service_s() >= 0.1).all()
    assert (np.diff(rec.sent) >= 0.1).all()  # each left only after the previous one timed out
    # the dispatcher asked the transport to expire with its own timeout, on a periodic timer
    assert t.expire_calls and {timeout for _, timeout in t.expire_calls} == {0.1}
    assert (np.diff([now for now, _ in t.expire_calls]) > 0.2).all()
    assert stats.wall_s < 0.05 + 3.0  # ended once nothing was outstanding, not after the drain


def test_error_outcomes_keep_their_class() -> None:
    """Outcomes and statuses the transport records survive the end of the run untouched."""
    kinds: list[Answer] = [
        (0.001, Outcome.OK, 200),
        (0.001, Outcome.HTTP_ERROR, 503),
        (0.0, Outcome.CONN_REFUSED, 0),
        (0.002, Outcome.CONN_RESET, 0),
        (0.001, Outcome.MALFORMED, 0),
        (0.001, Outcome.GRPC_ERROR, 14),
        (0.0, Outcome.CONN_ERROR, 0),
        (None, Outcome.OK, 0),  # never answers: times out
    ]
    due = np.arange(64, dtype=np.float64) / 400.0
    opts = DispatchOptions(timeout_s=0.05, drain_s=2.0)
    rec, _, _, _ = shard(due, lambda idx: kinds[idx % len(kinds)], opts, cap=4)

    want_outcome = [Outcome.TIMEOUT if d is None else o for d, o, _ in kinds] * 8
    want_status = [s for _, _, s in kinds] * 8
    assert rec.outcome.tolist() == want_outcome
    assert rec.status.tolist() == want_status
    assert not np.isnan(rec.done).any() and not np.isnan(rec.sent).any()


# stopping early ------------------------------------------------------------------------------------------
def test_stop_callback_ends_the_run_early() -> None:
    """A 10 s schedule stopped after 0.3 s: the run returns soon, keeps the rows it reached (those in
    flight become UNFINISHED) and nothing after the stop is sent or recorded."""
    due = np.arange(1000, dtype=np.float64) / 100.0
    holder: dict[str, float] = {}

    def stop() -> bool:
        return perf() >= holder["t0"] + 0.3

    factory, made = fake_factory(NEVER)
    holder["t0"] = t0 = perf() + 0.05
    wall0 = perf()
    rec, stats = run_shard(due, t0, lambda: factory, DispatchOptions(drain_s=5.0), None, stop)
    t = made.one

    assert perf() - wall0 < 2.0
    assert stats.stopped_early
    n = len(rec)
    assert 25 <= n < 1000
    assert rec.intended.max() < 0.3 + 0.75  # the stop is noticed within two housekeeping periods
    assert np.array_equal(rec.intended, due[:n])
    assert [s[0] for s in t.sends] == list(range(n))  # every kept row left, no other row did
    assert (rec.outcome == Outcome.UNFINISHED).all()
    assert not np.isnan(rec.done).any()
    assert t.sent_after_end == 0


def test_stop_keeps_backlog_rows_as_not_sent() -> None:
    due = np.arange(1000, dtype=np.float64) / 200.0
    holder: dict[str, float] = {}
    factory, made = fake_factory(NEVER, cap=5)
    holder["t0"] = t0 = perf() + 0.05
    rec, stats = run_shard(
        due, t0, lambda: factory, DispatchOptions(drain_s=5.0), None, lambda: perf() >= holder["t0"] + 0.2
    )
    assert stats.stopped_early and 30 <= len(rec) < 1000
    assert rec.outcome[:5].tolist() == [Outcome.UNFINISHED] * 5
    assert (rec.outcome[5:] == Outcome.NOT_SENT).all()
    assert rec.waited[5:].all() and not rec.waited[:5].any()
    assert np.isnan(rec.sent[5:]).all() and not np.isnan(rec.done).any()
    assert len(made.one.sends) == 5


# housekeeping and progress ------------------------------------------------------------------------------
class _Keeper(Housekeeping):
    def __init__(self, transport: HotTransport, stop: Callable[[], bool]) -> None:
        self._transport = transport
        self.progress: list[Progress] = []
        self._on_progress = lambda p, rec: self.progress.append(p)
        self._stop_requested = stop
        self._finished = None
        self.rec = Records.empty(np.zeros(1))
        self.stopped_early = False

    def _progress(self) -> Progress:
        return Progress(now_s=perf(), due=0, sent=0, backlog=0, inflight=0, total=1, t0=0.0)


def test_housekeeping_expires_reports_and_honours_a_stop() -> None:
    flag = {"stop": False}

    async def main() -> tuple[_Keeper, FakeTransport, float]:
        transport = FakeTransport(Records.empty(np.zeros(1)), lambda: None, NEVER, 1)
        keeper = _Keeper(transport, lambda: flag["stop"])
        keeper._finished = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(keeper._housekeeping(0.7))
        try:
            await until(lambda: len(keeper.progress) >= 2)
            assert not keeper.stopped_early and not keeper._finished.done()
            flag["stop"] = True
            t_stop = perf()
            await asyncio.wait_for(keeper._finished, 1.0)
            return keeper, transport, perf() - t_stop
        finally:
            task.cancel()

    keeper, transport, noticed_after = on_uvloop(main())
    assert keeper.stopped_early
    assert noticed_after < 0.6
    assert len(transport.expire_calls) >= 2 and {to for _, to in transport.expire_calls} == {0.7}
    assert len(keeper.progress) >= 2


def test_progress_reports_during_and_after_the_run() -> None:
    due = np.arange(120, dtype=np.float64) / 200.0  # 0.6 s
    seen: list[Progress] = []
    factory, _ = fake_factory(answer_after(0.001))

    async def main() -> Records:
        disp = OpenLoopDispatcher(
            due, perf() + 0.05, factory, DispatchOptions(drain_s=2.0), on_progress=lambda p, r: seen.append(p)
        )
        return await disp.run()

    rec = on_uvloop(main())
    assert len(rec) == 120
    assert len(seen) >= 2  # at least one live report and the final one
    dues = [p.due for p in seen]
    assert dues == sorted(dues)
    final = seen[-1]
    assert (final.due, final.sent, final.backlog, final.inflight, final.total) == (120, 120, 0, 0, 120)


def test_final_progress_does_not_count_not_sent_rows_as_sent() -> None:
    seen: list[Progress] = []
    factory, _ = fake_factory(NEVER, cap=2)

    async def main() -> Records:
        disp = OpenLoopDispatcher(
            np.zeros(5), perf(), factory, DispatchOptions(drain_s=0.1), on_progress=lambda p, r: seen.append(p)
        )
        return await disp.run()

    rec = on_uvloop(main())
    assert int(np.count_nonzero(rec.outcome == Outcome.NOT_SENT)) == 3
    assert seen[-1].sent == 2  # only two ever left


# invariants over many small runs --------------------------------------------------------------------------
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gaps_ms=st.lists(st.integers(0, 8), min_size=0, max_size=16),
    cap=st.integers(1, 4),
    service_ms=st.integers(0, 10),
)
def test_invariants_hold_for_any_schedule_and_cap(gaps_ms: list[int], cap: int, service_ms: int) -> None:
    due = np.cumsum(np.asarray(gaps_ms, dtype=np.float64)) / 1000.0
    factory, made = fake_factory(answer_after(service_ms / 1000.0), cap)

    async def main() -> Records:
        return await OpenLoopDispatcher(due, perf() + 0.01, factory, DispatchOptions(drain_s=1.0)).run()

    rec = on_uvloop(main())
    t = made.one
    assert len(rec) == len(due) and np.array_equal(rec.intended, due)
    assert (rec.outcome == Outcome.OK).all()  # everything answers well within the drain time
    assert [s[0] for s in t.sends] == list(range(len(due)))  # schedule order, backlog FIFO
    assert t.max_busy <= cap
    assert (rec.send_lag_s() >= -1e-3).all()
    assert (np.diff(rec.sent) >= 0).all()
    # a request waited only if every slot was taken when it came due
    if cap >= len(due):
        assert not rec.waited.any()
