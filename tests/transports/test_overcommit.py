"""The overcommit wrapper (at most K models resident, LRU eviction, load on demand) against a fake
transport with a few slots and a fake control client that records its calls."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
from collections.abc import Callable

import numpy as np
import pytest

from satpoint.metrics.records import Outcome, Records
from satpoint.transports.overcommit import (
    LOAD_FAILED_STATUS,
    OvercommitBuilder,
    OvercommitTransport,
    initial_resident,
    load_failed,
    settle,
)

MODELS = ("a", "b", "c")


class FakeInner:
    """``slots`` requests at a time; ``answer()`` finishes the oldest (OK) and frees its slot."""

    def __init__(self, rec: Records, on_free: Callable[[], None], slots: int = 8) -> None:
        self.rec, self.on_free, self.slots = rec, on_free, slots
        self.flying: list[tuple[int, int]] = []
        self.sent_order: list[int] = []

    async def prepare(self, warm_connections: int) -> None:
        pass

    def try_send(self, idx: int, payload_idx: int) -> bool:
        if len(self.flying) >= self.slots:
            return False
        self.rec.sent[idx] = 12345.0  # the inner transport stamps its own send time
        self.flying.append((idx, payload_idx))
        self.sent_order.append(idx)
        return True

    def answer(self) -> None:
        idx, _ = self.flying.pop(0)
        self.rec.done[idx] = 99999.0
        self.rec.outcome[idx] = Outcome.OK
        self.on_free()

    def inflight(self) -> int:
        return len(self.flying)

    def expire(self, now: float, timeout_s: float) -> None:
        pass

    def abort_all(self, outcome: int) -> None:
        self.flying.clear()

    async def close(self) -> None:
        pass


class FakeControl:
    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()

    def load(self, model: str) -> float:
        self.gate.wait(5)
        with self.lock:
            self.calls.append(f"load {model}")
        if model == self.fail:
            raise RuntimeError("no room")
        return 0.25

    def unload(self, model: str) -> float:
        with self.lock:
            self.calls.append(f"unload {model}")
        return 0.0


def _make(
    control: FakeControl,
    resident: int,
    slots: int = 8,
    n: int = 20,
    initial: tuple[int, ...] = (),
    protocol: str = "rest",
) -> tuple[OvercommitTransport, FakeInner, Records, list[int]]:
    rec = Records.empty(np.arange(n, dtype=np.float64))
    freed: list[int] = []
    holder: dict[str, FakeInner] = {}

    def inner(r: Records, on_free: Callable[[], None]) -> FakeInner:
        holder["t"] = FakeInner(r, on_free, slots)
        return holder["t"]

    t = OvercommitTransport(
        rec,
        lambda: freed.append(1),
        inner,
        control,
        MODELS,
        (0, 1, 2),
        resident,
        initial,
        keep_cold_rows=True,
        failed=load_failed(protocol),
    )
    return t, holder["t"], rec, freed


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0.002)


def test_the_least_recently_used_model_is_evicted_once_drained_and_held_requests_go_out_after_the_load() -> None:
    async def go() -> None:
        control = FakeControl()
        settle(control, MODELS, initial_resident(3, 2))
        assert control.calls == ["unload c", "load a", "load b"]  # the starting residency: a and b
        control.calls.clear()
        t, inner, rec, _ = _make(control, resident=2)
        await t.prepare(1)
        assert control.calls == []  # nothing on the run's clock
        assert t.try_send(0, 0) and t.try_send(1, 1) and t.try_send(2, 0)  # b is now the LRU
        assert t.try_send(3, 2) and t.try_send(4, 2)  # c is not resident: held, one load
        assert inner.sent_order == [0, 1, 2] and t.inflight() == 5
        held_sent = rec.sent[3]
        await _settle()
        assert control.calls == []  # the eviction of b waits for b's request in flight
        for _ in range(3):
            inner.answer()
        await _settle()
        assert control.calls == ["unload b", "load c"]
        assert inner.sent_order == [0, 1, 2, 3, 4] and t.inflight() == 2
        assert rec.sent[3] == held_sent != 12345.0  # the hold's stamp is kept: the held time is service time
        assert t.resident() == ["a", "c"] and t.cold_rows == [3, 4]
        stats = t.stats()["overcommit"]
        assert (stats["loads"], stats["evictions"], stats["cold_requests"]) == (1, 1, 2)
        assert stats["load_s"] == [0.25]
        await t.close()

    asyncio.run(go())


def test_all_models_resident_means_no_loads_and_no_cold_requests() -> None:
    async def go() -> None:
        control = FakeControl()
        t, inner, _, _ = _make(control, resident=3, slots=16)
        await t.prepare(1)
        control.calls.clear()
        for i in range(9):
            assert t.try_send(i, i % 3)
        await _settle()
        assert control.calls == [] and t.counters.cold_requests == 0 and len(inner.sent_order) == 9
        await t.close()

    asyncio.run(go())


def test_released_requests_wait_for_free_slots_and_later_ones_queue_behind_them() -> None:
    async def go() -> None:
        control = FakeControl()
        t, inner, _, freed = _make(control, resident=1, slots=2, initial=(0,))
        await t.prepare(1)
        control.gate.clear()  # the next load does not answer yet
        assert t.try_send(0, 1) and t.try_send(1, 1) and t.try_send(2, 1)  # b: held, loading
        await _settle()
        assert inner.sent_order == []
        control.gate.set()
        await _settle()
        assert inner.sent_order == [0, 1] and t.inflight() == 3  # two slots; the third waits in the wrapper
        assert not t.try_send(3, 1)  # the dispatcher must queue a later request behind it
        inner.answer()
        assert inner.sent_order == [0, 1, 2] and freed == []  # the slot went to the waiting request first
        inner.answer()
        assert freed == [1]
        await t.close()

    asyncio.run(go())


def test_a_failed_load_fails_its_held_requests_and_timeouts_reach_held_ones() -> None:
    async def go() -> None:
        control = FakeControl(fail="c")
        t, _, rec, _ = _make(control, resident=2)
        await t.prepare(1)
        assert t.try_send(0, 2) and t.try_send(1, 2)
        await _settle()
        assert list(rec.outcome[:2]) == [Outcome.HTTP_ERROR] * 2
        assert list(rec.status[:2]) == [LOAD_FAILED_STATUS] * 2
        assert t.stats()["overcommit"]["load_failures"] == 1 and "no room" in t.stats()["overcommit"]["errors"][0]
        control.fail, control.gate = None, threading.Event()  # the next load hangs
        assert t.try_send(2, 2)
        t.expire(rec.sent[2] + 31.0, 30.0)
        assert rec.outcome[2] == Outcome.TIMEOUT and t.inflight() == 0
        control.gate.set()
        await t.close()

    asyncio.run(go())


def test_a_failed_load_on_a_grpc_target_is_a_grpc_error() -> None:
    """Over gRPC the held requests of a failed load are GRPC_ERROR with UNAVAILABLE (14), not an HTTP 503."""

    async def go() -> None:
        t, _, rec, _ = _make(FakeControl(fail="c"), resident=2, protocol="grpc")
        await t.prepare(1)
        assert t.try_send(0, 2)
        await _settle()
        assert rec.outcome[0] == Outcome.GRPC_ERROR and rec.status[0] == 14
        await t.close()

    asyncio.run(go())


def test_builder_keeps_the_inner_cap_and_resizes_it() -> None:
    class Inner:
        max_inflight = 64

        def with_max_inflight(self, n: int) -> Inner:
            out = Inner()
            out.max_inflight = n
            return out

        def __call__(self) -> Callable[[Records, Callable[[], None]], FakeInner]:
            return FakeInner

    b = OvercommitBuilder(Inner(), FakeControl(), MODELS, (0, 1, 2), resident=2, max_inflight=64)
    assert b.max_inflight == 64 and b.with_max_inflight(8).max_inflight == 8
    assert dataclasses.replace(b, max_inflight=4)._inner_recipe().max_inflight == 4  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        OvercommitTransport(Records.empty(np.zeros(1)), lambda: None, FakeInner, FakeControl(), MODELS, (0,), 0)
    assert math.isnan(Records.empty(np.zeros(1)).sent[0])


def test_the_next_transport_of_a_recipe_starts_from_the_residency_the_last_one_left() -> None:
    async def go() -> None:
        control = FakeControl()
        builder = OvercommitBuilder(lambda: FakeInner, control, MODELS, (0, 1, 2), resident=1, initial=(0,))
        rec = Records.empty(np.arange(4, dtype=np.float64))
        first = builder()(rec, lambda: None)
        await first.prepare(1)
        assert first.try_send(0, 2)  # c: held, a evicted, c loaded
        await _settle()
        await first.close()
        second = builder()(Records.empty(np.arange(4, dtype=np.float64)), lambda: None)
        await second.prepare(1)
        assert second.resident() == ["c"]  # type: ignore[attr-defined]

    asyncio.run(go())


def test_a_load_that_answers_while_the_run_closes_stays_counted_as_resident() -> None:
    """A segment cut off under overload closes with a load under way: the model it loads is loaded on the
    server, so the next segment must count it (it counted K - 1 and loaded one more without an eviction)."""

    async def go() -> None:
        control = FakeControl()
        builder = OvercommitBuilder(lambda: FakeInner, control, MODELS, (0, 1, 2), resident=2, initial=(0, 1))
        first = builder()(Records.empty(np.arange(4, dtype=np.float64)), lambda: None)
        await first.prepare(1)
        control.gate.clear()  # c's load does not answer yet
        assert first.try_send(0, 2)
        await _settle()
        first.abort_all(Outcome.TIMEOUT)
        closing = asyncio.ensure_future(first.close())
        await _settle()
        control.gate.set()
        await closing
        assert control.calls == ["unload a", "load c"] and first.resident() == ["b", "c"]  # type: ignore[attr-defined]
        second = builder()(Records.empty(np.arange(4, dtype=np.float64)), lambda: None)
        await second.prepare(1)
        assert second.try_send(0, 0)  # a: b is evicted first, so two stay loaded
        await _settle()
        assert control.calls[2:] == ["unload b", "load a"] and second.resident() == ["c", "a"]  # type: ignore[attr-defined]
        await second.close()

    asyncio.run(go())


# -- M4: the victim's requests waiting here, recency of refused sends, asynchronous unloads ------------------


class LoggedInner(FakeInner):
    """``FakeInner`` that logs each send as ``send <model>`` into a log shared with the control, and can
    refuse every send (a connection being reopened)."""

    def __init__(self, rec: Records, on_free: Callable[[], None], slots: int, log: list[str]) -> None:
        super().__init__(rec, on_free, slots)
        self.log = log
        self.refuse = False

    def try_send(self, idx: int, payload_idx: int) -> bool:
        if self.refuse or not super().try_send(idx, payload_idx):
            return False
        self.log.append(f"send {MODELS[payload_idx]}")
        return True


class LoggedControl(FakeControl):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def load(self, model: str) -> float:
        took = super().load(model)
        self.log.append(f"load {model}")
        return took

    def unload(self, model: str) -> float:
        self.log.append(f"unload {model}")
        return super().unload(model)


def _logged(
    resident: int, slots: int, initial: tuple[int, ...]
) -> tuple[OvercommitTransport, LoggedInner, Records, list[str]]:
    log: list[str] = []
    rec = Records.empty(np.arange(20, dtype=np.float64))
    holder: dict[str, LoggedInner] = {}

    def inner(r: Records, on_free: Callable[[], None]) -> LoggedInner:
        holder["t"] = LoggedInner(r, on_free, slots, log)
        return holder["t"]

    t = OvercommitTransport(rec, lambda: None, inner, LoggedControl(log), MODELS, (0, 1, 2), resident, initial)
    return t, holder["t"], rec, log


def _never_sent_unloaded(log: list[str], initial: tuple[str, ...]) -> None:
    loaded = set(initial)
    for line in log:
        op, model = line.split()
        if op == "load":
            loaded.add(model)
        elif op == "unload":
            loaded.discard(model)
        else:
            assert model in loaded, f"a request was sent to {model} while it was unloaded: {log}"


def test_a_refused_send_is_no_use_and_a_victim_with_requests_waiting_here_is_not_unloaded_under_them() -> None:
    """K = 2, a pool of 2, three models: c's released requests wait here for a slot (none in flight) when
    b's load evicts; a refused request for a must not make c the least recently used (it was unloaded and
    its waiting requests then sent to it: the server's 404s counted as server errors)."""

    async def go() -> None:
        t, inner, rec, log = _logged(resident=2, slots=2, initial=(0, 1))
        await t.prepare(1)
        assert t.try_send(0, 0) and t.try_send(1, 0)  # a: the pool is full
        assert t.try_send(2, 2) and t.try_send(3, 2)  # c: held; b (LRU, idle) is evicted, c loaded
        await _settle()
        assert log == ["send a", "send a", "unload b", "load c"] and t.inflight() == 4
        assert rec.waited[2] and rec.waited[3]  # released, waiting here for a connection: the client's wait
        assert not t.try_send(4, 0)  # a refused: not a use
        assert t.try_send(5, 1)  # b: held; the LRU is a, not c
        await _settle()
        for _ in range(6):
            if inner.flying:
                inner.answer()
            await _settle()
        _never_sent_unloaded(log, ("a", "b"))
        assert log[4:] == ["send c", "send c", "unload a", "load b", "send b"]
        assert t.resident() == ["c", "b"] and not (rec.outcome[:4] != Outcome.OK).any()
        await t.close()

    asyncio.run(go())


def test_an_eviction_waits_for_the_victims_requests_waiting_here_then_holds_them_for_its_next_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """K = 1, a pool of 2, three models: a load completes while its requests cannot get a connection (all in
    ``_ready``, none in flight); the next load's eviction of that model waits for them, and those still
    waiting at the drain's limit go back to be held for the model's next load: none is sent to it unloaded."""
    monkeypatch.setattr("satpoint.transports.overcommit.DRAIN_WAIT_S", 0.4)

    async def go() -> None:
        t, inner, rec, log = _logged(resident=1, slots=2, initial=(0,))
        await t.prepare(1)
        inner.refuse = True
        assert t.try_send(0, 1) and t.try_send(1, 1)  # b: held, loaded, then no connection for them
        await _settle()
        assert log == ["unload a", "load b"] and rec.waited[0] and rec.waited[1] and t.inflight() == 2
        assert t.try_send(2, 2)  # c: held; b must be evicted, with its two requests still waiting here
        await _settle()
        assert log[2:] == []  # the eviction waits for them
        await asyncio.sleep(0.4)
        assert log[2:] == ["unload b", "load c"]  # at the limit they went back to be held for b's next load
        inner.refuse = False
        t._freed()  # a connection is back: c's request, then b's load (c evicted once idle)
        await _settle()
        inner.answer()
        await _settle()
        _never_sent_unloaded(log, ("a",))
        assert log[4:] == ["send c", "unload c", "load b", "send b", "send b"]
        assert list(rec.sent[:2]) != [12345.0, 12345.0]  # their hold's stamps
        await t.close()

    asyncio.run(go())


def test_a_released_request_that_waited_for_a_connection_is_stamped_on_by_that_wait() -> None:
    async def go() -> None:
        t, inner, rec, _ = _logged(resident=1, slots=1, initial=(0,))
        await t.prepare(1)
        assert t.try_send(0, 1) and t.try_send(1, 1)  # b: held; one slot, so the second waits here
        await _settle()
        held = rec.sent[1]
        assert rec.sent[0] != 12345.0 and not rec.waited[0] and rec.waited[1]
        await asyncio.sleep(0.05)
        inner.answer()
        assert rec.sent[1] >= held + 0.05  # the wait for a connection is the client's, not service time
        await t.close()

    asyncio.run(go())


class TritonControl(FakeControl):
    """Triton's repository API: an unload answers at once and the model goes away 50 ms later;
    ``wait_absent`` polls its readiness.  Records the most models resident at once."""

    def __init__(self, resident: set[str]) -> None:
        super().__init__()
        self.server = set(resident)
        self.most = len(self.server)

    def load(self, model: str) -> float:
        with self.lock:
            self.server.add(model)
            self.most = max(self.most, len(self.server))
        return super().load(model)

    def unload(self, model: str) -> float:
        def gone() -> None:
            with self.lock:
                self.server.discard(model)

        threading.Timer(0.05, gone).start()
        return super().unload(model)

    def ready(self, model: str) -> bool:
        with self.lock:
            return model in self.server

    def wait_absent(self, model: str, timeout_s: float = 30.0, poll_s: float = 0.005) -> float:
        from satpoint.transports.repository import wait_absent

        return wait_absent(self.ready, model, timeout_s, poll_s)


def test_an_asynchronous_unload_is_waited_for_before_the_next_load() -> None:
    async def go() -> None:
        control = TritonControl({"a"})
        t, inner, _, _ = _make(control, resident=1, slots=4, initial=(0,))
        await t.prepare(1)
        assert t.try_send(0, 1) and t.try_send(1, 2)  # b, then c: two evictions
        for _ in range(60):
            await asyncio.sleep(0.01)
            if inner.flying:
                inner.answer()
            if control.calls[-1:] == ["load c"]:
                break
        assert control.calls == ["unload a", "load b", "unload b", "load c"]
        assert control.most == 1  # never K + 1 resident on the server
        await t.close()

    asyncio.run(go())
