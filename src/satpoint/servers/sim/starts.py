"""Starts the waiting services of a metastable sim on time (``sim_model.MetastableScheduler``).

In metastable mode a waiting request's service time depends on the requests that arrive while it waits,
so its finish is settled only at its start: one loop timer, armed for the first waiting request's
(virtual) start time, calls ``advance`` there, which hands each started ticket to the scheduler's
``on_start`` (the server then releases the answer at the ticket's finish). The timer may fire up to
about a millisecond late (libuv's whole milliseconds); the start and finish times stay the virtual ones,
so only an answer due within that millisecond is late. Shared by the REST and gRPC sims.
"""

from __future__ import annotations

import asyncio
import math
import time

from satpoint.servers.sim.metastable import MetastableScheduler
from satpoint.servers.sim.release import arm_at


class StartTimer:
    """Calls ``scheduler.advance`` when the first waiting request's start time has come."""

    def __init__(self, scheduler: MetastableScheduler, loop: asyncio.AbstractEventLoop) -> None:
        self.scheduler = scheduler
        self._loop = loop
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._armed_for_s = math.inf

    def poke(self) -> None:
        """Arm for the next start if it is earlier than the armed one (after every admission)."""
        next_s = self.scheduler.next_start_s()
        if next_s is None or next_s >= self._armed_for_s:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for_s = next_s
        self._timer = arm_at(self._loop, next_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._armed_for_s = math.inf
        self.scheduler.advance(time.perf_counter())
        self.poke()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed_for_s = math.inf
