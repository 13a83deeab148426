"""The seam between the dispatcher and a wire protocol.

The hot path is one method, ``try_send(idx, payload_idx)``: send request ``idx`` now with pre-encoded
payload ``payload_idx`` if a slot is free (a free keep-alive connection, a free stream), else return
False so the dispatcher queues it (and marks it as having waited).  The transport stamps the request's
``done``/``outcome``/``status`` in the shared :class:`~satpoint.metrics.records.Records` columns and
calls ``on_free()`` whenever a slot frees up.  All times are ``time.perf_counter()`` values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from satpoint.metrics.records import Records


class HotTransport(Protocol):
    async def prepare(self, warm_connections: int) -> None:
        """Open connections ahead of the schedule (errors surface here, before the run)."""

    def try_send(self, idx: int, payload_idx: int) -> bool:
        """Send now if a slot is free; False means the in-flight cap is reached."""

    def inflight(self) -> int:
        """Requests sent and not yet finished."""

    def expire(self, now: float, timeout_s: float) -> None:
        """Finish requests older than ``timeout_s`` as timeouts."""

    def abort_all(self, outcome: int) -> None:
        """Finish every outstanding request with ``outcome`` and close connections."""

    async def close(self) -> None: ...


TransportFactory = Callable[[Records, Callable[[], None]], HotTransport]
