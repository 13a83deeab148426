"""Closed-loop mode: N virtual users, each sends, waits for its answer, thinks, and sends again.

This is how Locust, JMeter thread groups and ``perf_analyzer --concurrency-range`` drive a server, and
satpoint keeps it mainly to *show* what it hides (``satpoint demo co``).  A closed loop has no
schedule: a user's next request only exists once its previous one has been answered.  When the server
stalls, the users stall with it and simply stop sending, so the stall delays only the ``users``
requests that were in flight instead of every request real traffic would have sent meanwhile
(coordinated omission).  Its latencies therefore under-report what users of an open system see, and
its verdicts cannot see queueing: the load falls as the server slows down.

Rows are the requests actually sent, in send order.  ``intended == sent`` for every row: there is no
earlier time a closed-loop request "should" have left, and that is precisely the point of the
demonstration.  Rows are not known in advance, so the :class:`~satpoint.metrics.records.Records`
columns grow in chunks (the transport only keeps a reference to the ``Records`` object and indexes
its columns on each write, so they can be replaced while running).

The transport is the same :class:`~satpoint.transports.base.HotTransport` the open loop uses (e.g.
the REST pool) with ``max_inflight = users``: each user owns at most one request.  The transport calls
``on_free()`` whenever a request finished; the dispatcher then finds which users' requests finished
(their ``done`` is no longer NaN) and schedules their next request after the think time (precise
``timerfd`` wake-ups, as in the open loop).  After a connection-level error a user waits at least
``error_backoff_s`` before sending again, so a refused connection does not turn into a busy loop.

Users start staggered over one think time, send until ``duration_s`` has passed, then the run waits
at most ``drain_s`` for the last answers (still outstanding ones become ``UNFINISHED``).  The result is
an ordinary :class:`~satpoint.metrics.results.Segment` (purpose ``"closed_loop"``) with one stage whose
target is the achieved rate and whose hold is the duration, so summaries, CSV and reports work as for
open-loop runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import uvloop

from satpoint.engine.dispatcher import Housekeeping, Progress
from satpoint.engine.live import LiveSnapshot, snapshot
from satpoint.engine.runner import FactoryBuilder
from satpoint.engine.timer import WakeTimer
from satpoint.metrics.checkpoint import CheckpointSpec, RowCheckpoint
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import Segment
from satpoint.plan import Stage
from satpoint.transports.base import HotTransport, TransportFactory, transport_stats

perf = time.perf_counter

PURPOSE = "closed_loop"
ARRIVAL = "closed"
#: outcomes after which a user backs off (nothing was served; sending again at once would spin)
_BACKOFF_OUTCOMES = (Outcome.CONN_REFUSED, Outcome.CONN_ERROR, Outcome.CONN_RESET)


@dataclass(frozen=True, slots=True)
class ClosedLoopOptions:
    users: int
    duration_s: float
    think_s: float = 0.0
    timeout_s: float = 30.0
    drain_s: float = 10.0
    warm_connections: int = 16
    payload_count: int = 1
    error_backoff_s: float = 0.01
    chunk_rows: int = 8192

    def validate(self) -> None:
        if self.users < 1:
            raise ValueError(f"--users must be >= 1, got {self.users}")
        if not self.duration_s > 0 or not np.isfinite(self.duration_s):
            raise ValueError(f"--duration must be a finite number of seconds > 0, got {self.duration_s}")
        if not self.think_s >= 0 or not np.isfinite(self.think_s):
            raise ValueError(f"--think-ms must be >= 0, got {self.think_s * 1000:g}")
        if self.timeout_s <= 0 or self.drain_s < 0 or self.payload_count < 1 or self.chunk_rows < 1:
            raise ValueError("timeout must be > 0, drain >= 0, payload_count and chunk_rows >= 1")

    def describe(self) -> dict[str, object]:
        return {
            "users": self.users,
            "duration_s": self.duration_s,
            "think_ms": round(self.think_s * 1000, 6),
            "timeout_s": self.timeout_s,
            "drain_s": self.drain_s,
        }


def _grow(rec: Records, size: int) -> None:
    """Enlarge every column of ``rec`` in place (same object) to ``size`` rows, new rows empty."""
    n = len(rec)
    if size <= n:
        return
    extra = Records.empty(np.full(size - n, np.nan))
    for name, column in extra.columns().items():  # every column, so none is left shorter than the rest
        setattr(rec, name, np.concatenate([getattr(rec, name), column]))
    if len(rec.model) == n:  # the model column is left out of ``columns()`` while all 0
        rec.model = np.concatenate([rec.model, extra.model])


class ClosedLoopDispatcher(Housekeeping):
    """Drives ``users`` request loops through one transport for ``duration_s`` seconds."""

    def __init__(
        self,
        t0: float,  # perf_counter() value of the run clock's origin (the users' start)
        factory: TransportFactory,
        options: ClosedLoopOptions,
        on_progress: Callable[[Progress, Records], None] | None = None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> None:
        options.validate()
        self.t0 = t0
        self._opts = options
        self._end = t0 + options.duration_s
        self.rec = Records.empty(np.full(min(options.chunk_rows, 1 << 20), np.nan))
        self._n = 0  # rows used
        self._cur: npt.NDArray[np.int64] = np.full(options.users, -1, dtype=np.int64)  # user -> row in flight
        self._wake: list[tuple[float, int]] = []  # (perf time, user): thinking users
        self._waiting: deque[int] = deque()  # users ready to send, no free slot
        self._factory = factory
        self._on_progress = on_progress
        self._stop_requested = stop_requested or (lambda: False)
        self._timer: WakeTimer | None = None
        self._transport: HotTransport | None = None
        self._finished: asyncio.Future[None] | None = None
        self._closing = False
        self.stopped_early = False
        self.ended_at = t0
        self.transport_stats: dict[str, Any] = {}  # the transport's own report, once the run ended

    # hot path -------------------------------------------------------------------------------------------
    def _send(self, user: int, waited: bool = False) -> None:
        if self._closing or perf() >= self._end:
            return  # the user retires: the run's time is up
        idx = self._n
        if idx >= len(self.rec):
            _grow(self.rec, len(self.rec) + max(self._opts.chunk_rows, len(self.rec) // 2))
            rebind = getattr(self._transport, "rebind", None)
            if rebind is not None:
                rebind()  # the transport's views of the columns must follow the new arrays
        if not self._transport.try_send(idx, idx % self._opts.payload_count):  # type: ignore[union-attr]
            self._waiting.append(user)
            return
        rec = self.rec
        self._n = idx + 1
        rec.intended[idx] = rec.sent[idx] - self.t0  # a closed loop measures from the actual send
        if waited:
            rec.waited[idx] = True
        self._cur[user] = idx

    def _on_free(self) -> None:
        if self._closing:
            return
        cur = self._cur
        busy = np.flatnonzero(cur >= 0)
        if len(busy):
            rows = cur[busy]
            fin = ~np.isnan(self.rec.done[rows])
            if fin.any():
                now = perf()
                think = self._opts.think_s
                backoff = max(think, self._opts.error_backoff_s)
                outcome = self.rec.outcome
                ready: list[int] = []
                for user, row in zip(busy[fin].tolist(), rows[fin].tolist(), strict=True):
                    cur[user] = -1
                    delay = backoff if int(outcome[row]) in _BACKOFF_OUTCOMES else think
                    if delay > 0:
                        self._push(now + delay, user)
                    else:
                        ready.append(user)
                self._drain_waiting()
                for user in ready:
                    self._send(user)
                return
        self._drain_waiting()

    def _drain_waiting(self) -> None:
        waiting = self._waiting
        while waiting:
            user = waiting.popleft()
            before = len(waiting)
            self._send(user, waited=True)
            if len(waiting) > before:  # still no free slot: it went back to the end; keep FIFO order
                waiting.rotate(1)
                break

    def _push(self, at: float, user: int) -> None:
        wake = self._wake
        first = not wake or at < wake[0][0]
        heapq.heappush(wake, (at, user))
        if first:
            self._timer.arm(at)  # type: ignore[union-attr]

    def _tick(self) -> None:
        now = perf()
        wake = self._wake
        while wake and wake[0][0] <= now:
            _, user = heapq.heappop(wake)
            self._send(user)
        if wake:
            self._timer.arm(wake[0][0])  # type: ignore[union-attr]

    # housekeeping ------------------------------------------------------------------------------------------
    def _progress(self) -> Progress:
        return Progress(
            now_s=perf() - self.t0,
            due=self._n,
            sent=self._n,
            backlog=len(self._waiting),
            inflight=self._transport.inflight() if self._transport else 0,
            total=self._n,
            t0=self.t0,
        )

    def _due_rows(self) -> int:
        return self._n

    async def _wait_done(self) -> None:
        """Until the duration is over and every answer is in, or the drain time after the end ends."""
        while True:
            if self._finished is not None and self._finished.done():
                return
            now = perf()
            if now >= self._end and not bool((self._cur >= 0).any()):
                return
            if now > self._end + self._opts.drain_s:
                return
            await asyncio.sleep(0.02 if now >= self._end else min(0.25, max(0.005, self._end - now)))

    async def run(self) -> Records:
        """Run the users; returns their rows on the run clock (``intended == sent``)."""
        loop = asyncio.get_running_loop()
        self._finished = loop.create_future()
        self._transport = self._factory(self.rec, self._on_free)
        await self._transport.prepare(min(self._opts.warm_connections, self._opts.users))
        keeper = loop.create_task(self._housekeeping(self._opts.timeout_s))
        self._timer = WakeTimer(loop, self._tick)
        users = self._opts.users
        stagger = self._opts.think_s / users
        try:
            for u in range(users):
                heapq.heappush(self._wake, (self.t0 + u * stagger, u))
            self._timer.arm(self._wake[0][0])
            await self._wait_done()
        finally:
            self._closing = True
            self.ended_at = perf()
            self._timer.close()
            keeper.cancel()
            self._transport.abort_all(Outcome.UNFINISHED)
            self._checkpoint(perf(), final=True)
            await self._transport.close()
            self.transport_stats = transport_stats(self._transport)
            if self._on_progress is not None:
                self._on_progress(self._progress(), self.rec)
        return self._records()

    def _records(self) -> Records:
        rec = self.rec.select(np.arange(len(self.rec)) < self._n)
        rec.sent -= self.t0
        rec.done -= self.t0
        rec.intended = rec.sent.copy()  # exactly equal: the closed loop's own definition of latency
        return rec


@dataclass
class ClosedLoopOutput:
    records: Records
    started_unix: float
    elapsed_s: float  # run clock at the end of sending (the duration, or less if stopped)
    cpu_s: float
    wall_s: float
    interrupted: bool
    transport: dict[str, Any] = field(default_factory=dict)


def run_closed_loop(
    build: FactoryBuilder,
    options: ClosedLoopOptions,
    on_snapshot: Callable[[LiveSnapshot], None] | None = None,
    stop_event: threading.Event | None = None,
    lead_s: float = 0.2,
    checkpoint: CheckpointSpec | None = None,
) -> ClosedLoopOutput:
    """Run the closed loop in this process on a fresh uvloop event loop (its rows checkpointed to
    ``checkpoint`` while it runs, if given)."""
    options.validate()
    stop = stop_event or threading.Event()
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    started_unix = time.time()
    try:
        factory = build()

        def progress(p: Progress, rec: Records) -> None:
            if on_snapshot is not None:
                on_snapshot(snapshot(p, rec))

        t0 = perf() + lead_s
        disp = ClosedLoopDispatcher(t0, factory, options, progress, stop.is_set)
        if checkpoint is not None:
            with contextlib.suppress(OSError):  # no checkpoints then: the rows are still kept in memory
                disp.checkpoint = RowCheckpoint(checkpoint.path(0))
            disp.checkpoint_interval_s = checkpoint.interval_s
        cpu0, wall0 = time.process_time(), perf()
        try:
            rec = loop.run_until_complete(disp.run())
        finally:
            if disp.checkpoint is not None:
                disp.checkpoint.close()
        elapsed = min(options.duration_s, disp.ended_at - t0) if disp.stopped_early else options.duration_s
        return ClosedLoopOutput(
            records=rec,
            started_unix=started_unix,
            elapsed_s=max(elapsed, 1e-3),
            cpu_s=time.process_time() - cpu0,
            wall_s=perf() - wall0,
            interrupted=disp.stopped_early,
            transport=disp.transport_stats,
        )
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def closed_loop_segment(
    build: FactoryBuilder,
    options: ClosedLoopOptions,
    index: int = 0,
    on_snapshot: Callable[[LiveSnapshot], None] | None = None,
    stop_event: threading.Event | None = None,
    checkpoint: CheckpointSpec | None = None,
) -> Segment:
    """Run a closed loop and package it as a results segment (purpose ``closed_loop``).

    The segment has one stage: target = achieved send rate (rows / duration), no ramp, hold = the
    duration, so the usual steady-window metrics and verdicts apply (and are labelled closed-loop by
    the summary: they cannot see queueing).
    """
    out = run_closed_loop(build, options, on_snapshot, stop_event, checkpoint=checkpoint)
    n = len(out.records)
    rate = n / out.elapsed_s if n else 0.0
    generator = {
        "procs": 1,
        "mode": "closed_loop",
        "users": options.users,
        "think_ms": round(options.think_s * 1000, 6),
        "cpu_s": round(out.cpu_s, 4),
        "cpu_us_per_request": round(out.cpu_s / n * 1e6, 2) if n else None,
        "wall_s": round(out.wall_s, 4),
        "transport": out.transport,
    }
    notes = []
    if n == 0:
        notes.append("the closed loop sent no requests")
    return Segment(
        index=index,
        purpose=PURPOSE,
        stages=[Stage(target_rps=max(rate, 1e-6), ramp_s=0.0, hold_s=out.elapsed_s)],
        arrival=ARRIVAL,
        seed=0,
        started_unix=out.started_unix,
        records=out.records,
        generator=generator,
        interrupted=out.interrupted,
        stopped="interrupted" if out.interrupted else None,
        notes=notes,
    )
