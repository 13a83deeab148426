"""The seam between the dispatcher and a wire protocol.

The hot path is one method, ``try_send(idx, payload_idx)``: send request ``idx`` now with pre-encoded
payload ``payload_idx`` if a slot is free (a free keep-alive connection, a free stream), else return
False so the dispatcher queues it (and marks it as having waited).  The transport stamps the request's
``done``/``outcome``/``status`` in the shared :class:`~satpoint.metrics.records.Records` columns and
calls ``on_free()`` whenever a slot frees up.  All times are ``time.perf_counter()`` values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from satpoint.metrics.records import Records


class HotTransport(Protocol):
    async def prepare(self, warm_connections: int) -> None:
        """Open connections ahead of the schedule (errors surface here, before the run)."""

    def try_send(self, idx: int, payload_idx: int) -> bool:
        """Send now if a slot is free; False means the in-flight cap is reached."""

    def inflight(self) -> int:
        """Requests sent and not yet finished."""

    def expire(self, now: float, timeout_s: float) -> None:
        """The transport's housekeeping tick (four times a second): finish requests older than ``timeout_s``
        as timeouts, and any other upkeep (REST closes connections idle longer than the server keeps
        them)."""

    def abort_all(self, outcome: int) -> None:
        """Finish every outstanding request with ``outcome`` and close connections."""

    async def close(self) -> None: ...


TransportFactory = Callable[[Records, Callable[[], None]], HotTransport]


def transport_stats(transport: object) -> dict[str, Any]:
    """What a transport reports about itself (``stats()``: connections, retries, the effective in-flight
    cap...), or nothing if it reports nothing (a test's fake)."""
    stats = getattr(transport, "stats", None)
    return dict(stats()) if callable(stats) else {}


def merge_stats(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One transport report for several generator processes, each with its own pool: counts and caps add
    up, ``server_*`` facts (per connection) take the smallest, anything else is the first process's."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key not in out:
                out[key] = value
            elif isinstance(value, bool) or not isinstance(value, int) or not isinstance(out[key], int):
                continue
            elif key.startswith("server_"):
                out[key] = min(out[key], value)
            else:
                out[key] += value
    return out


def generator_resources_message(host: str, port: int, exc: BaseException) -> str:
    """Why none of the first connections could be opened when the generator ran out of its own resources."""
    what = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return (
        f"the generator cannot open a connection to {host}:{port}: {what} (a limit of the generator's "
        "process, not the server's: raise the open-files limit, `ulimit -n`, or lower --max-inflight)"
    )
