"""The open-loop dispatcher: fires requests at their due times, never waits on a response.

The dispatcher sleeps on a precise wake-up timer (``engine.timer``) armed for the next due time and
also checks the schedule whenever the transport reports a freed slot.  A request
whose due time has passed is sent at once; if the in-flight cap is full it waits in a FIFO backlog
(marked ``waited``) and leaves as soon as a slot frees.  Nothing is skipped: requests still waiting
when the run ends are recorded as ``NOT_SENT`` with their due times.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.engine.timer import WakeTimer
from satpoint.metrics.checkpoint import RowCheckpoint
from satpoint.metrics.records import Outcome, Records
from satpoint.plan import FloatArray
from satpoint.transports.base import HotTransport, TransportFactory, transport_stats

perf = time.perf_counter
#: the most rows one wake-up looks ahead for its window
_WINDOW_ROWS = 1 << 16


@dataclass(frozen=True, slots=True)
class DispatchOptions:
    timeout_s: float = 30.0
    drain_s: float = 10.0  # after the last due time, wait at most this long for outstanding requests
    warm_connections: int = 8
    payload_count: int = 1
    #: each row's payload (an index into the prepared payloads), e.g. a replayed trace's ``payload`` column;
    #: None: the payloads in turn (row ``i`` sends payload ``i % payload_count``)
    payload_index: npt.NDArray[np.int64] | None = None
    #: wake-up window: a wake-up due at t waits for the rows due up to ``t + wake_window_s`` and sends them
    #: together (the first one up to this late; its lag is recorded like any other).  0: every row at its
    #: own due time.  Fewer wake-ups per request: the generator's main cost at a few thousand requests/s.
    wake_window_s: float = 0.0
    #: the event loop's thread at SCHED_FIFO this priority while it runs (``engine.realtime``); 0: unchanged
    realtime_priority: int = 0
    #: each row's model in a model mix (``payloads.mix``), recorded in ``Records.model``; None: one model
    model_index: npt.NDArray[np.int16] | None = None


@dataclass(slots=True)
class Progress:
    """A cheap snapshot for live display, taken by the dispatcher's housekeeping timer."""

    now_s: float  # run clock
    due: int  # requests due so far
    sent: int
    backlog: int
    inflight: int
    total: int
    t0: float  # perf_counter() of the run clock's origin (sent/done columns are raw until the end)


class Housekeeping:
    """What the open- and closed-loop dispatchers share: four times a second, time out old requests,
    report progress, checkpoint the rows to disk (every ``checkpoint_interval_s``) and honour a stop
    request (the run then ends early, keeping its rows)."""

    _transport: HotTransport | None
    _on_progress: Callable[[Progress, Records], None] | None
    _stop_requested: Callable[[], bool]
    _finished: asyncio.Future[None] | None
    rec: Records
    t0: float
    stopped_early: bool
    checkpoint: RowCheckpoint | None = None
    checkpoint_interval_s: float = 1.0

    def _progress(self) -> Progress:
        raise NotImplementedError

    def _due_rows(self) -> int:
        """How many leading rows are due (or, in a closed loop, sent) so far."""
        raise NotImplementedError

    def _checkpoint(self, now: float, final: bool = False) -> None:
        if self.checkpoint is not None:
            self.checkpoint.write(self.rec, self._due_rows(), self.t0, now, final=final)

    async def _housekeeping(self, timeout_s: float) -> None:
        assert self._transport is not None
        next_checkpoint = perf() + self.checkpoint_interval_s
        while True:
            await asyncio.sleep(0.25)
            now = perf()
            self._transport.expire(now, timeout_s)
            if self.checkpoint is not None and now >= next_checkpoint:
                self._checkpoint(now)
                next_checkpoint = now + self.checkpoint_interval_s
            if self._on_progress is not None:
                self._on_progress(self._progress(), self.rec)
            if self._stop_requested():
                self.stopped_early = True
                if self._finished is not None and not self._finished.done():
                    self._finished.set_result(None)


def _not_started(idx: int, payload_idx: int) -> bool:
    raise RuntimeError("the dispatcher sends only while it runs")


class OpenLoopDispatcher(Housekeeping):
    """Drives one shard's schedule through one transport."""

    def __init__(
        self,
        due_s: FloatArray,  # run-clock due times for this shard, sorted
        t0: float,  # perf_counter() value of the run clock's origin
        factory: TransportFactory,
        options: DispatchOptions,
        on_progress: Callable[[Progress, Records], None] | None = None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> None:
        self.rec = Records.empty(np.asarray(due_s, dtype=np.float64))
        if options.model_index is not None:  # a model mix: each row's model, drawn when the plan was made
            self.rec.model[:] = options.model_index
        self.t0 = t0
        self._due = array("d", (self.rec.intended + t0).tobytes())
        self._n = len(self._due)
        self._next = 0
        self._backlog: deque[int] = deque()
        self._never_sent = 0  # backlog rows still unsent when the run ended (set once, at the end)
        self._opts = options
        self._factory = factory
        self._npay = options.payload_count
        #: each row's payload (``payload_index``), else None: row ``i`` sends payload ``i % payload_count``
        self._rows: array[int] | None = None
        if options.payload_index is not None:
            self._rows = array("q", np.asarray(options.payload_index, dtype=np.int64).tobytes())
        self._waited: Any = memoryview(self.rec.waited)  # type: ignore[arg-type]  # item stores through a memoryview: a fraction of numpy's
        if options.wake_window_s < 0:
            raise ValueError("wake_window_s must be >= 0")
        self._window = options.wake_window_s
        self._send: Callable[[int, int], bool] = _not_started
        self._on_progress = on_progress
        self._stop_requested = stop_requested or (lambda: False)
        self._timer: WakeTimer | None = None
        self._finished: asyncio.Future[None] | None = None
        self._transport: HotTransport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stopped_early = False
        self.transport_stats: dict[str, Any] = {}  # the transport's own report, once the run ended

    # hot path -------------------------------------------------------------------------------------------
    def _fire_due(self) -> float | None:
        """Send everything that is due, in order; returns the next due time (None: every row is due).

        The wake-up timer's callback (the timer re-arms itself for the time returned), also called when a
        slot frees.  One wake-up sends every request due by then."""
        i = self._next
        n = self._n
        if i >= n:
            return None
        due = self._due
        t = due[i]
        now = perf()
        if t > now:
            return t
        backlog = self._backlog
        send = self._send
        rows = self._rows
        npay = self._npay
        waited = self._waited
        window = self._window
        while True:
            if backlog or not send(i, i % npay if rows is None else rows[i]):
                backlog.append(i)
                waited[i] = True
            i += 1
            if i >= n:
                self._next = i
                return None
            t = due[i]
            if t > now:
                self._next = i
                if window:  # wake when the last row due within the window is due: one wake-up for all of them
                    return due[bisect_right(due, t + window, i, min(n, i + _WINDOW_ROWS)) - 1]
                return t

    def _first_wake(self) -> float:
        due, first = self._due, self._due[0]
        if not self._window:
            return first
        return due[bisect_right(due, first + self._window, 0, min(self._n, _WINDOW_ROWS)) - 1]

    def _on_free(self) -> None:
        """A slot freed (called for every response): waiting requests first, then anything now due."""
        backlog = self._backlog
        if backlog:
            send = self._send
            rows = self._rows
            npay = self._npay
            while backlog:
                i = backlog[0]
                if not send(i, i % npay if rows is None else rows[i]):
                    break
                backlog.popleft()
        i = self._next
        if i < self._n and self._due[i] <= perf():
            # the timer stays armed for the row just sent and wakes once for nothing: re-arming it here
            # instead costs a system call per answer, which at tens of thousands of answers a second is more
            self._fire_due()

    # housekeeping ------------------------------------------------------------------------------------------
    def _progress(self) -> Progress:
        return Progress(
            now_s=perf() - self.t0,
            due=self._next,
            sent=self._next - len(self._backlog) - self._never_sent,
            backlog=len(self._backlog),
            inflight=self._transport.inflight() if self._transport else 0,
            total=self._n,
            t0=self.t0,
        )

    def _due_rows(self) -> int:
        return self._next

    async def _wait_done(self) -> None:
        """Until every request is due and finished, or the drain time after the last due time ends."""
        last_due = self._due[self._n - 1] if self._n else perf()
        while True:
            if self._finished is not None and self._finished.done():
                return
            now = perf()
            if self._next >= self._n and not self._backlog and self._transport.inflight() == 0:  # type: ignore[union-attr]
                return
            if now > last_due + self._opts.drain_s:
                return
            await asyncio.sleep(0.02 if now > last_due else min(0.25, max(0.02, last_due - now)))

    async def run(self) -> Records:
        """Run the shard; returns its records on the run clock."""
        self._loop = asyncio.get_running_loop()
        self._finished = self._loop.create_future()
        self._transport = self._factory(self.rec, self._on_free)
        self._send = self._transport.try_send
        await self._transport.prepare(self._opts.warm_connections)
        keeper = self._loop.create_task(self._housekeeping(self._opts.timeout_s))
        self._timer = WakeTimer(self._loop, self._fire_due)
        try:
            if self._n:
                self._timer.arm(self._first_wake())
            await self._wait_done()
        finally:
            self._timer.close()
            keeper.cancel()
            self._finish_rows()
            self._checkpoint(perf(), final=True)
            await self._transport.close()
            self.transport_stats = transport_stats(self._transport)
            if self._on_progress is not None:
                self._on_progress(self._progress(), self.rec)
        return self._records()

    def _finish_rows(self) -> None:
        assert self._transport is not None
        self._transport.abort_all(Outcome.UNFINISHED)
        # rows that were due but never left keep NOT_SENT; their done column gets the end time, so
        # their latency is a lower bound (censored), like UNFINISHED rows
        reached = self._next
        self._never_sent = len(self._backlog)  # the final progress must not count them as sent
        if self._backlog:
            idx = np.fromiter(self._backlog, dtype=np.int64, count=len(self._backlog))
            self.rec.done[idx] = perf()
            self._backlog.clear()
        if reached < self._n:
            self.rec.waited[reached:] = False

    def _records(self) -> Records:
        rec = self.rec
        rec.sent -= self.t0
        rec.done -= self.t0
        if rec.stream is not None:  # a stream transport's chunk times (metrics.stream_records), raw until now
            rec.stream = rec.stream.shifted(-self.t0)
        # rows that were never reached (stopped early) are dropped: they were never due
        if self.stopped_early and self._next < self._n:
            keep = np.zeros(self._n, dtype=np.bool_)
            keep[: self._next] = True
            rec = rec.select(keep)
        # UNFINISHED rows: their done column holds the abort time (a lower bound for latency)
        return rec
