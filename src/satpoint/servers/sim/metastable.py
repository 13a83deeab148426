"""The metastable sim's scheduler, in virtual time: slots and a FIFO queue whose service time grows while
too many requests wait (``SimConfig.metastable_high``) and returns only once few do (``metastable_low``).

Kept apart from ``satpoint.servers.sim.model`` (the plain scheduler and the configuration): services here
start when a slot frees, not on arrival, so a waiting request's finish is known only once it starts.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

from satpoint.errors import ConfigError
from satpoint.servers.sim.model import ErrorDraws, PauseCalendar, ServiceDraws, SimConfig, _draws_and_pauses


class Ticket:
    """A request admitted by a ``MetastableScheduler``: its service start and finish are known (not None)
    once it has started. ``payload`` is the server's (what to answer once the finish is known)."""

    __slots__ = ("arrival_s", "error", "finish_s", "payload", "slow", "start_s")

    def __init__(self, arrival_s: float, error: bool) -> None:
        self.arrival_s = arrival_s
        self.error = error
        self.start_s: float | None = None
        self.finish_s: float | None = None
        #: started while degraded: its service took ``factor`` x its draw
        self.slow = False
        self.payload: Any = None


class MetastableScheduler:
    """``SlotScheduler``'s slots and FIFO queue, in virtual time, with a metastable service time.

    The server is *degraded* from the moment the number of requests waiting for a slot (admitted, not yet
    in service) exceeds ``high``, and stays degraded until that number falls below ``low`` (a start makes
    it fall; the service that start begins is then already a normal one). Every service that *starts*
    while degraded takes ``factor`` x its draw (and holds its slot that long).

    Whether a service starts degraded depends on the requests that arrive while it waits, so a waiting
    request's start and finish are settled only when its start time is reached: ``admit`` settles every
    start up to the arrival, ``advance(now_s)`` every start up to ``now_s``, each calling ``on_start``
    with the ticket that started (``next_start_s`` says when the next start is due). A request that finds
    a free slot starts at once (``admit`` returns it started, without ``on_start``). The draws (errors in
    arrival order, service times in start order, which is arrival order) are those of ``SlotScheduler``.
    """

    def __init__(
        self,
        *,
        slots: int,
        service: ServiceDraws,
        errors: ErrorDraws,
        high: int,
        low: int,
        factor: float,
        pauses: PauseCalendar | None = None,
        origin_s: float = 0.0,
        on_start: Callable[[Ticket], None] | None = None,
    ) -> None:
        self._free_at_s: list[float] = [origin_s] * slots  # a min-heap of started services' finishes
        self._waiting: deque[Ticket] = deque()
        self._service = service
        self._errors = errors
        self._high = high
        self._low = low
        self._factor = factor
        self._pauses = pauses
        self.on_start = on_start
        self.admitted = 0
        self.degraded = False
        #: how many times it tipped over and how many times it recovered
        self.collapses = 0
        self.recoveries = 0

    @classmethod
    def from_config(
        cls, config: SimConfig, origin_s: float, on_start: Callable[[Ticket], None] | None = None
    ) -> MetastableScheduler:
        """The scheduler ``config`` (with ``metastable_high`` set) describes, from ``origin_s``."""
        if config.metastable_high is None:
            raise ConfigError("sim: a metastable scheduler needs metastable_high")
        service, errors, pauses = _draws_and_pauses(config, origin_s)
        return cls(
            slots=config.slots,
            service=service,
            errors=errors,
            high=config.metastable_high,
            low=config.metastable_low,
            factor=config.metastable_factor,
            pauses=pauses,
            origin_s=origin_s,
            on_start=on_start,
        )

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot (as of the last ``admit`` or ``advance``)."""
        return len(self._waiting)

    def _start_time(self, ticket: Ticket) -> float:
        free_s = self._free_at_s[0]
        start_s = free_s if free_s > ticket.arrival_s else ticket.arrival_s
        return self._pauses.defer(start_s) if self._pauses is not None else start_s

    def next_start_s(self) -> float | None:
        """When the first waiting request starts (None if none waits)."""
        return self._start_time(self._waiting[0]) if self._waiting else None

    def _start(self, ticket: Ticket, start_s: float) -> None:
        if self.degraded and len(self._waiting) < self._low:
            self.degraded = False
            self.recoveries += 1
        draw_s = self._service.next()
        if self.degraded:
            draw_s *= self._factor
            ticket.slow = True
        finish_s = start_s + draw_s
        if self._pauses is not None:
            finish_s = self._pauses.defer(finish_s)
        heapq.heapreplace(self._free_at_s, finish_s)
        ticket.start_s = start_s
        ticket.finish_s = finish_s

    def advance(self, now_s: float) -> None:
        """Start every waiting request whose start time is at or before ``now_s``."""
        waiting = self._waiting
        while waiting:
            start_s = self._start_time(waiting[0])
            if start_s > now_s:
                return
            ticket = waiting.popleft()
            self._start(ticket, start_s)
            if self.on_start is not None:
                self.on_start(ticket)

    def admit(self, arrival_s: float) -> Ticket:
        """Admit a request arriving at ``arrival_s`` (non-decreasing): started at once if a slot is free."""
        self.advance(arrival_s)
        ticket = Ticket(arrival_s, self._errors.next())
        self.admitted += 1
        if not self._waiting and self._start_time(ticket) <= arrival_s:
            self._start(ticket, arrival_s)
        else:
            self._waiting.append(ticket)
            if not self.degraded and len(self._waiting) > self._high:
                self.degraded = True
                self.collapses += 1
        return ticket

    def free_at_s(self) -> list[float]:
        """The slots' free times, sorted (for tests and diagnostics)."""
        return sorted(self._free_at_s)
