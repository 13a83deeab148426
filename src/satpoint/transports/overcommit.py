"""An overcommitting scheduler's policy, emulated around the hot transport: at most K models resident.

Seldon Core 2's agent (``EnsureLoadModel`` / ``makeRoomIfNeeded`` in its ``state_manager.go``) keeps the
models a server replica cannot hold at once "evicted to disk": a request for an evicted model makes the
agent evict the least recently used models until there is room, load the model through the server's
repository API, then forward the request.  This module does the same from the client's side, so the cost
of overcommit shows in satpoint's own numbers: :class:`OvercommitTransport` wraps any
:class:`~satpoint.transports.base.HotTransport`; a request whose model is resident goes straight through
(and marks the model used); a request for a model that is not resident is held (its ``sent`` stamped
now: from here on the time is the "server side's", as it is behind a real agent), one load of that model
is queued, and once the load has answered the held requests go out in order.  Loads run one at a time
(with their evictions first), on a worker thread, never blocking the event loop.  Latency still counts
from each request's intended time, so the held time is in it.

An eviction waits until the evicted model's requests in flight, and its released requests still waiting
here for a connection, have finished (its later requests are held for its next load); any of those still
waiting after ``DRAIN_WAIT_S`` go back to be held for its next load.  An unload is followed by the
control's ``wait_absent`` where it has one (Triton answers an unload before it is done), so at most K
models are resident and no request is sent to a model that is being unloaded.  A released request that
waits here for a free connection is marked ``waited`` (the client's wait, as in the dispatcher's backlog)
and its ``sent`` stamp moves on by that wait, so its service time is the load and the answer only.

It emulates the policy; it is not Seldon's code: no memory accounting (K models, not bytes) and no retry
of a request the server answers 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Self

from satpoint.errors import ConfigError
from satpoint.metrics.records import Outcome, Records
from satpoint.transports.base import HotTransport, TransportFactory, transport_stats

perf = time.perf_counter

#: the HTTP status written for requests whose model failed to load (the agent answers an error too)
LOAD_FAILED_STATUS = 503
#: the gRPC status written for them on a gRPC target (UNAVAILABLE, what an agent's proxy answers)
LOAD_FAILED_GRPC_STATUS = 14


def load_failed(protocol: str) -> tuple[int, int]:
    """The outcome and status a request whose model failed to load is recorded with, on a ``protocol`` target."""
    if protocol == "grpc":
        return int(Outcome.GRPC_ERROR), LOAD_FAILED_GRPC_STATUS
    return int(Outcome.HTTP_ERROR), LOAD_FAILED_STATUS


#: ``close`` waits at most this long for a load or unload under way
CLOSE_WAIT_S = 120.0
#: an eviction waits at most this long for its model's requests in flight
DRAIN_WAIT_S = 30.0
_PRUNE_AT = 4096
_KEEP_LOAD_TIMES = 5000  # the load times kept (the first ones) for the results


class ModelControl(Protocol):
    """Loads and unloads models (a ``transports.repository.RepositoryClient``, or a test's fake);
    blocking calls, run on a worker thread."""

    def load(self, model: str) -> float: ...

    def unload(self, model: str) -> float: ...


@dataclass
class OvercommitCounters:
    loads: int = 0
    evictions: int = 0
    cold_requests: int = 0  # requests that arrived for a model that was not resident (held for a load)
    load_failures: int = 0
    load_s: list[float] = field(default_factory=list)  # each load call's answer time
    errors: list[str] = field(default_factory=list)  # the first few load/unload failures


def initial_resident(models: int, resident: int, initial: Sequence[int] = ()) -> list[int]:
    """The models resident when a run starts: ``initial`` (else the first ones), at most ``resident``."""
    return list(dict.fromkeys(initial or range(min(resident, models))))[:resident]


def settle(control: ModelControl, models: Sequence[str], resident: Sequence[int]) -> None:
    """Before a run (not on its clock): unload every model but the ``resident`` ones, load those.  An
    unload of a model that is not loaded may fail (MLServer: 404): it is already where it should be.
    A control with ``wait_absent`` (Triton unloads in the background) is waited on for each unload."""
    wait = getattr(control, "wait_absent", None)
    for m, name in enumerate(models):
        if m not in resident:
            with contextlib.suppress(Exception):
                control.unload(name)
                if callable(wait):
                    wait(name)
    for m in resident:
        control.load(models[m])


class OvercommitTransport:
    """A :class:`HotTransport` that keeps at most ``resident`` models loaded, loading on demand and
    evicting the least recently used (see the module's docstring)."""

    def __init__(
        self,
        rec: Records,
        on_free: Callable[[], None],
        inner: TransportFactory,
        control: ModelControl,
        models: Sequence[str],
        payload_model: Sequence[int],
        resident: int,
        initial: Sequence[int] = (),
        *,
        keep_cold_rows: bool = False,
        residency: list[int] | None = None,
        failed: tuple[int, int] = (int(Outcome.HTTP_ERROR), LOAD_FAILED_STATUS),
    ) -> None:
        if resident < 1:
            raise ValueError(f"resident must be >= 1, got {resident}")
        self.rec = rec
        self._on_free = on_free
        self._control = control
        self._models = list(models)
        self._payload_model = list(payload_model)
        self._k = resident
        # ``residency``: the resident models as the previous transport of the same recipe left them (a
        # search's next segment starts where the last one ended), written back by ``close``
        self._residency = residency
        start = residency if residency else initial
        self._initial = initial_resident(len(self._models), resident, start)
        self._lru: OrderedDict[int, None] = OrderedDict()  # resident models, least recently used first
        self._held: dict[int, list[tuple[int, int]]] = {}  # model -> requests waiting for its load
        self._queue: deque[int] = deque()  # models waiting for a load, in order of first demand
        # loaded models' requests waiting for a free slot: (row, payload, when it began to wait)
        self._ready: deque[tuple[int, int, float]] = deque()
        self._ready_n: dict[int, int] = {}  # model -> its requests in ``_ready``
        self._flying: dict[int, list[int]] = {}  # model -> requests sent to it (finished ones pruned)
        self._worker: asyncio.Task[None] | None = None
        self._closing = False
        self._keep_cold_rows = keep_cold_rows
        self._failed = failed  # (outcome, status) of a request whose model failed to load: ``load_failed``
        self.cold_rows: list[int] = []
        self.counters = OvercommitCounters()
        self._inner: HotTransport = inner(rec, self._freed)

    # -- the hot path ----------------------------------------------------------------------------------
    def try_send(self, idx: int, payload_idx: int) -> bool:
        model = self._payload_model[payload_idx]
        lru = self._lru
        if model in lru:
            if self._ready:  # earlier requests are still waiting for a slot: this one waits too
                return False
            if not self._inner.try_send(idx, payload_idx):
                return False  # refused: not a use (it must not shield the model from eviction)
            lru.move_to_end(model)
            self._track(model, idx)
            return True
        self.rec.sent[idx] = perf()
        self.counters.cold_requests += 1
        if self._keep_cold_rows:
            self.cold_rows.append(idx)
        held = self._held.get(model)
        if held is None:
            self._held[model] = [(idx, payload_idx)]
            self._queue.append(model)
            self._kick()
        else:
            held.append((idx, payload_idx))
        return True

    def inflight(self) -> int:
        return self._inner.inflight() + sum(len(h) for h in self._held.values()) + len(self._ready)

    def _send_released(self, idx: int, payload_idx: int, since: float | None = None) -> bool:
        """Send a released request; ``since``: when it began to wait here for a slot (its stamp moves on
        by that wait: the client's, not the server's)."""
        sent = self.rec.sent[idx]  # the hold's stamp stays: the inner transport would overwrite it
        ok = self._inner.try_send(idx, payload_idx)
        if ok:
            self.rec.sent[idx] = sent if since is None else sent + (perf() - since)
            model = self._payload_model[payload_idx]
            if model in self._lru:
                self._lru.move_to_end(model)
            self._track(model, idx)
        return ok

    def _count_ready(self) -> None:
        counts: dict[int, int] = {}
        for _, pay, _ in self._ready:
            m = self._payload_model[pay]
            counts[m] = counts.get(m, 0) + 1
        self._ready_n = counts

    def _track(self, model: int, idx: int) -> None:
        """Remember a request sent to ``model`` (an eviction waits for its model's requests in flight)."""
        flying = self._flying.get(model)
        if flying is None:
            self._flying[model] = [idx]
            return
        flying.append(idx)
        if len(flying) > _PRUNE_AT:
            done = self.rec.done
            flying[:] = [i for i in flying if done[i] != done[i]]  # NaN: not finished

    async def _drain(self, model: int) -> None:
        """Until every request sent to ``model`` has finished (at most ``DRAIN_WAIT_S``): unloading a
        model under its requests would fail them (the server answers 404 once it is gone)."""
        done = self.rec.done
        end = perf() + DRAIN_WAIT_S
        flying = self._flying.setdefault(model, [])
        while not self._closing:
            flying[:] = [i for i in flying if done[i] != done[i]]
            if not flying and not self._ready_n.get(model):
                return
            if perf() > end:
                break
            await asyncio.sleep(0.002)
        self._hold_again(model)

    def _hold_again(self, model: int) -> None:
        """``model``'s released requests still waiting here for a slot go back to be held for its next load
        (they must not be sent to it once it is unloaded)."""
        if not self._ready_n.get(model):
            return
        pm = self._payload_model
        back = [(i, p) for i, p, _ in self._ready if pm[p] == model]
        self._ready = deque(r for r in self._ready if pm[r[1]] != model)
        self._ready_n.pop(model, None)
        held = self._held.get(model)
        if held is None:
            self._held[model] = back
            self._queue.append(model)
        else:
            held[:0] = back

    def _freed(self) -> None:
        """A slot freed: it goes to the oldest released request waiting here, else to the dispatcher."""
        ready = self._ready
        if ready:
            idx, pay, since = ready[0]
            if self._send_released(idx, pay, since):
                ready.popleft()
                m = self._payload_model[pay]
                self._ready_n[m] -= 1
            return
        if not self._closing:
            self._on_free()

    # -- loads -----------------------------------------------------------------------------------------
    def _kick(self) -> None:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._load_queued())

    async def _load_queued(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue and not self._closing:
            model = self._queue[0]
            error: str | None = None
            try:
                while len(self._lru) >= self._k:
                    victim, _ = self._lru.popitem(last=False)
                    self.counters.evictions += 1
                    await self._drain(victim)  # its later requests are held: only finished ones remain
                    try:
                        await loop.run_in_executor(None, self._unload, self._models[victim])
                    except Exception as e:  # an eviction that failed still frees the slot in our count
                        self._note(f"unload {self._models[victim]}: {e}")
                took = await loop.run_in_executor(None, self._control.load, self._models[model])
                self.counters.loads += 1
                if len(self.counters.load_s) < _KEEP_LOAD_TIMES:
                    self.counters.load_s.append(took)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                error = f"load {self._models[model]}: {e}"
            self._queue.popleft()
            held = self._held.pop(model, [])
            if error is None:  # loaded on the server: resident, also when the run closed meanwhile (the next
                self._lru[model] = None  # segment starts from this residency: K loaded, not K - 1 counted)
                self._lru.move_to_end(model)
            if self._closing:
                return
            if error is not None:
                self.counters.load_failures += 1
                self._note(error)
                self._finish(held, *self._failed)
                self._on_free()
                continue
            self._release(held)

    def _unload(self, name: str) -> None:
        """Unload ``name`` and, where the control can tell (``wait_absent``: Triton answers before the
        unload is done), wait until it is gone: the next load must not make K + 1 resident."""
        self._control.unload(name)
        wait = getattr(self._control, "wait_absent", None)
        if callable(wait):
            wait(name)

    def _release(self, held: list[tuple[int, int]]) -> None:
        for i, (idx, pay) in enumerate(held):
            if self._ready or not self._send_released(idx, pay):
                now = perf()
                waited = self.rec.waited
                for j, p in held[i:]:
                    self._ready.append((j, p, now))
                    waited[j] = True  # it waits for a connection: the client's wait
                    m = self._payload_model[p]
                    self._ready_n[m] = self._ready_n.get(m, 0) + 1
                return

    def _note(self, error: str) -> None:
        if len(self.counters.errors) < 10:
            self.counters.errors.append(error)

    def _finish(self, rows: Sequence[tuple[int, int]], outcome: int, status: int = 0) -> None:
        if not rows:
            return
        now = perf()
        rec = self.rec
        for idx, _ in rows:
            rec.done[idx] = now
            rec.outcome[idx] = outcome
            rec.status[idx] = status

    # -- HotTransport ------------------------------------------------------------------------------------
    async def prepare(self, warm_connections: int) -> None:
        """The starting residency (``initial``, as ``settle`` left the server before the run), then the
        inner transport's own preparation."""
        for m in self._initial:
            self._lru[m] = None
        await self._inner.prepare(warm_connections)

    def expire(self, now: float, timeout_s: float) -> None:
        self._inner.expire(now, timeout_s)
        limit = now - timeout_s
        sent = self.rec.sent
        for model, held in list(self._held.items()):
            old = [r for r in held if sent[r[0]] < limit]
            if old:
                self._finish(old, Outcome.TIMEOUT)
                self._held[model] = [r for r in held if sent[r[0]] >= limit]
        if self._ready and sent[self._ready[0][0]] < limit:
            old = [(r[0], r[1]) for r in self._ready if sent[r[0]] < limit]
            self._finish(old, Outcome.TIMEOUT)
            self._ready = deque(r for r in self._ready if sent[r[0]] >= limit)
            self._count_ready()

    def abort_all(self, outcome: int) -> None:
        self._closing = True
        self._finish([r for held in self._held.values() for r in held], outcome)
        self._finish([(r[0], r[1]) for r in self._ready], outcome)
        self._held.clear()
        self._ready.clear()
        self._ready_n.clear()
        self._inner.abort_all(outcome)  # a load under way finishes: ``close`` waits for it

    async def close(self) -> None:
        """Wait for a load or unload under way (a worker thread cannot be cancelled: the next run's
        residency must not race with it), at most ``CLOSE_WAIT_S``, then close the inner transport."""
        self._closing = True
        worker = self._worker
        if worker is not None and not worker.done():
            try:
                await asyncio.wait_for(asyncio.shield(worker), CLOSE_WAIT_S)
            except (TimeoutError, asyncio.CancelledError, Exception):
                worker.cancel()
        if self._residency is not None:
            self._residency[:] = list(self._lru)
        await self._inner.close()

    def resident(self) -> list[str]:
        """The resident models now, least recently used first."""
        return [self._models[m] for m in self._lru]

    def stats(self) -> dict[str, Any]:
        c = self.counters
        out = transport_stats(self._inner)
        out["overcommit"] = {
            "resident_max": self._k,
            "models": len(self._models),
            "loads": c.loads,
            "evictions": c.evictions,
            "cold_requests": c.cold_requests,
            "load_failures": c.load_failures,
            "load_s": [round(s, 6) for s in c.load_s],
            "errors": list(c.errors),
            "resident_at_end": self.resident(),
        }
        if self._keep_cold_rows:
            out["overcommit"]["cold_rows"] = list(self.cold_rows)
        return out


@dataclass(frozen=True)
class OvercommitBuilder:
    """Picklable recipe for :class:`OvercommitTransport` around another transport's builder (the engine's
    ``FactoryBuilder``): built inside the process that runs the shard."""

    inner: Callable[[], TransportFactory]
    control: ModelControl
    models: tuple[str, ...]
    payload_model: tuple[int, ...]
    resident: int
    initial: tuple[int, ...] = ()
    keep_cold_rows: bool = False
    #: the resident models between segments (one scheduler: built and run in this process only)
    residency: list[int] = field(default_factory=list, compare=False)
    origin_pid: int = field(default_factory=os.getpid, compare=False)
    #: the in-flight cap handed to the inner recipe (a session sets it per segment); None: the inner's own
    max_inflight: int | None = None
    #: (outcome, status) of a request whose model failed to load (``load_failed(protocol)``)
    failed: tuple[int, int] = (int(Outcome.HTTP_ERROR), LOAD_FAILED_STATUS)

    def with_max_inflight(self, max_inflight: int) -> Self:
        return replace(self, max_inflight=max_inflight)

    def probe_model(self) -> int:
        """A model loaded now (the most recently used one as the last segment left them, else the most popular):
        what a probe outside the runs (the baseline, a cool-down's "idle again" test) asks, without a load; the
        mix's first model may have been evicted (the server answers 404 for it)."""
        return self.residency[-1] if self.residency else self.initial[0] if self.initial else 0

    def _inner_recipe(self) -> Callable[[], TransportFactory]:
        resize = getattr(self.inner, "with_max_inflight", None)
        if self.max_inflight is None or not callable(resize):
            return self.inner
        recipe: Callable[[], TransportFactory] = resize(self.max_inflight)
        return recipe

    def __call__(self) -> TransportFactory:
        if os.getpid() != self.origin_pid:
            raise ConfigError(
                "--resident emulates one scheduler and runs in one generator process: --procs 1, no --ray"
            )
        inner = self._inner_recipe()()

        def factory(rec: Records, on_free: Callable[[], None]) -> HotTransport:
            return OvercommitTransport(
                rec,
                on_free,
                inner,
                self.control,
                self.models,
                self.payload_model,
                self.resident,
                self.initial,
                keep_cold_rows=self.keep_cold_rows,
                residency=self.residency,
                failed=self.failed,
            )

        return factory
