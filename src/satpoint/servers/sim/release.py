"""The simulated HTTP server's timed release: responses written once their virtual finish time has passed.

Kept apart from the protocol (``satpoint.servers.sim.http_protocol``): one heap and one loop timer per server,
and the in-order response slots the connections queue.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections.abc import Callable
from typing import Protocol

#: below this, wait for a response by re-checking each loop iteration rather than by a (ms) timer
_SPIN_S = 0.0005


def arm_at(loop: asyncio.AbstractEventLoop, at_s: float, callback: Callable[[], None]) -> asyncio.Handle:
    """Call ``callback`` at ``at_s`` (``perf_counter``): by a loop timer, or on the next loop iteration
    when less than ``_SPIN_S`` is left (a timer would round to whole milliseconds); the callback re-checks
    due-ness, since a timer may fire up to about 1 ms early."""
    delay_s = at_s - time.perf_counter()
    return loop.call_soon(callback) if delay_s <= _SPIN_S else loop.call_later(delay_s, callback)


class Connection(Protocol):
    """What the release needs of a connection: write the responses that became ready, in order."""

    def flush(self) -> None: ...


class ResponseEntry:
    """One response slot in a connection's in-order queue; ``after`` says what follows its writing
    (``AFTER_*``: nothing, a close, a reset, or ``tail`` written ``slow_headers_s`` later)."""

    __slots__ = ("after", "conn", "data", "ready", "tail")

    def __init__(self, conn: Connection, data: bytes, ready: bool, after: int, tail: bytes = b"") -> None:
        self.conn = conn
        self.data = data
        self.ready = ready
        self.after = after
        self.tail = tail


class Release:
    """Releases timed responses once their virtual finish time has passed, with a single loop timer.

    The timer is armed for ``finish_s`` itself. libuv counts in whole milliseconds, so it may fire up
    to about 1 ms early: due-ness is always re-checked on ``perf_counter`` and, when the earliest response
    is less than ``_SPIN_S`` away, the release is retried on the next loop iteration (``call_soon``; the
    loop keeps serving I/O meanwhile) instead of by a timer that would round to whole ms. So responses
    are never written before ``finish_s`` and are late only by loop latency (tens of µs when idle).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, ResponseEntry]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._armed_for_s = math.inf

    def schedule(self, finish_s: float, entry: ResponseEntry) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (finish_s, self._seq, entry))
        if finish_s < self._armed_for_s:
            self._arm(finish_s)

    def _arm(self, at_s: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for_s = at_s
        self._timer = arm_at(self._loop, at_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._armed_for_s = math.inf
        heap = self._heap
        now_s = time.perf_counter()
        touched: dict[int, Connection] = {}
        while heap and heap[0][0] <= now_s:
            entry = heapq.heappop(heap)[2]
            entry.ready = True
            touched[id(entry.conn)] = entry.conn
        for conn in touched.values():
            conn.flush()
        if heap:
            self._arm(heap[0][0])

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()
