"""Open Inference Protocol over REST: the hot path.

A pool of HTTP/1.1 keep-alive connections, each a raw ``asyncio.Protocol`` with an ``httptools``
response parser.  Request bytes (request line, headers, body) are encoded once before the run, so
sending is one ``transport.write``.  One request per connection at a time (no pipelining), so the
in-flight cap is the connection cap.  HTTP client libraries cost 4-40x more CPU per request here
(see DESIGN.md §3), which is why this module speaks HTTP/1.1 itself.

``https://``: the pool opens its connections with ``ssl=`` (an ``ssl.SSLContext``, see
``transports.tls``); sending and parsing are the same code, so plain HTTP pays nothing for it.
"""

from __future__ import annotations

import asyncio
import json
import ssl as _ssl
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httptools

from satpoint.metrics.records import Outcome, Records

perf = time.perf_counter
_OK, _HTTP_ERROR = int(Outcome.OK), int(Outcome.HTTP_ERROR)


def infer_path(model: str, version: str | None = None) -> str:
    path = f"/v2/models/{model}"
    if version:
        path += f"/versions/{version}"
    return path + "/infer"


def encode_request(host: str, port: int, path: str, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """One complete HTTP/1.1 POST, ready to write."""
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: keep-alive",
    ]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def encode_json_body(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(frozen=True)
class RestAddress:
    """Where a REST base URL points: host, port, TLS, the path prefix and the query every request keeps."""

    host: str
    port: int
    tls: bool = False
    prefix: str = ""  # the base URL's path without its trailing slash (a gateway's route)
    query: str = ""  # kept on every request (e.g. a gateway's ?token=)

    def path(self, path: str) -> str:
        """The request target for ``path`` (e.g. ``/v2/models/m/infer``) under this base."""
        return self.prefix + path + (f"?{self.query}" if self.query else "")


def parse_url(url: str) -> RestAddress:
    """``http[s]://[userinfo@]host[:port][/prefix][?query]`` (scheme optional: http)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} for REST (use http:// or https://)")
    tls = parts.scheme == "https"
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError:
        raise ValueError(f"bad port in the URL ({parts.hostname})") from None
    return RestAddress(parts.hostname or "127.0.0.1", port, tls, parts.path.rstrip("/"), parts.query)


def split_url(url: str) -> tuple[str, int]:
    """(host, port) of a REST base URL."""
    address = parse_url(url)
    return address.host, address.port


class _Conn(asyncio.Protocol):
    __slots__ = ("busy_idx", "connected", "parser", "pending", "pool", "sent_at", "status", "transport")

    def __init__(self, pool: RestPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.busy_idx = -1
        self.sent_at = 0.0
        self.pending: bytes | None = None
        self.connected = False
        self.status = 0

    # asyncio.Protocol ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.connected = True
        if self.pending is not None:
            self.transport.write(self.pending)  # type: ignore[union-attr]
            self.pending = None
        elif self.busy_idx < 0:
            self.pool._release(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._finish(Outcome.MALFORMED, 0)
            self._drop()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connected = False
        self.pool._forget(self)
        if self.busy_idx >= 0:
            self._finish(Outcome.CONN_RESET, 0)

    # httptools callbacks --------------------------------------------------------------------------
    def on_message_complete(self) -> None:
        parser = self.parser
        status = parser.get_status_code()
        idx = self.busy_idx
        if idx >= 0:  # the hot path: _finish inlined
            pool = self.pool
            self.busy_idx = -1
            pool._done[idx] = perf()
            pool._outcome[idx] = _OK if 200 <= status < 300 else _HTTP_ERROR
            pool._status[idx] = status
            pool._inflight -= 1
        if parser.should_keep_alive():
            self.pool._release(self)
        else:
            self._drop()

    # helpers -----------------------------------------------------------------------------------------
    def _finish(self, outcome: int, status: int) -> None:
        idx = self.busy_idx
        if idx < 0:
            return
        self.busy_idx = -1
        pool = self.pool
        pool._done[idx] = perf()
        pool._outcome[idx] = int(outcome)
        pool._status[idx] = status
        pool._inflight -= 1

    def _drop(self) -> None:
        self.pool._forget(self)
        if self.transport is not None:
            self.transport.abort()


class RestPool:
    """Keep-alive connection pool implementing :class:`~satpoint.transports.base.HotTransport`."""

    def __init__(
        self,
        rec: Records,
        on_free: Callable[[], None],
        host: str,
        port: int,
        requests: Sequence[bytes],
        max_inflight: int,
        *,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        self.rec = rec
        self.on_free = on_free
        self.host = host
        self.port = port
        self.ssl = ssl
        self.server_hostname = server_hostname
        self.requests = list(requests)
        self.max_inflight = max_inflight
        self._free: list[_Conn] = []
        self._all: set[_Conn] = set()
        self._inflight = 0
        self.rebind()

    def rebind(self) -> None:
        """(Re)take views of the record columns (after they were replaced by larger arrays).

        memoryviews write straight into the numpy columns at a fraction of numpy's item-set cost."""
        rec = self.rec
        self._sent = _view(rec.sent)
        self._done = _view(rec.done)
        self._outcome = _view(rec.outcome)
        self._status = _view(rec.status)
        self._loop = asyncio.get_event_loop()
        self._closing = False
        self.connect_errors = 0

    async def prepare(self, warm_connections: int) -> None:
        n = min(warm_connections, self.max_inflight)
        conns = [_Conn(self) for _ in range(n)]
        self._all.update(conns)
        results = await asyncio.gather(*(self._connect(c) for c in conns), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for c, r in zip(conns, results, strict=True):
            if isinstance(r, BaseException):
                self._all.discard(c)
        if errors and len(errors) == len(results):
            raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {errors[0]}")

    def try_send(self, idx: int, payload_idx: int) -> bool:
        free = self._free
        while free:
            conn = free.pop()
            if not conn.connected:
                continue
            conn.busy_idx = idx
            self._inflight += 1
            now = perf()
            self._sent[idx] = now
            conn.sent_at = now
            conn.transport.write(self.requests[payload_idx])  # type: ignore[union-attr]
            return True
        if len(self._all) >= self.max_inflight:
            return False
        conn = _Conn(self)
        self._all.add(conn)
        self._inflight += 1
        conn.busy_idx = idx
        now = perf()
        self._sent[idx] = now
        conn.sent_at = now
        conn.pending = self.requests[payload_idx]
        task = self._loop.create_task(self._open(conn))
        task.add_done_callback(_quiet)
        return True

    def _connect(self, conn: _Conn) -> Coroutine[Any, Any, Any]:
        if self.ssl is None:
            return self._loop.create_connection(lambda: conn, self.host, self.port)
        hostname = self.server_hostname or self.host
        return self._loop.create_connection(lambda: conn, self.host, self.port, ssl=self.ssl, server_hostname=hostname)

    async def _open(self, conn: _Conn) -> None:
        try:
            await self._connect(conn)
        except ConnectionRefusedError:
            self._fail_open(conn, Outcome.CONN_REFUSED)
        except OSError:
            self._fail_open(conn, Outcome.CONN_ERROR)

    def _fail_open(self, conn: _Conn, outcome: Outcome) -> None:
        self.connect_errors += 1
        conn._finish(outcome, 0)
        self._forget(conn)

    def _release(self, conn: _Conn) -> None:
        if self._closing:
            return
        self._free.append(conn)
        self.on_free()

    def _forget(self, conn: _Conn) -> None:
        was_known = conn in self._all
        self._all.discard(conn)
        if conn in self._free:
            self._free.remove(conn)
        if was_known and not self._closing:
            self.on_free()

    def inflight(self) -> int:
        return self._inflight

    def expire(self, now: float, timeout_s: float) -> None:
        limit = now - timeout_s
        for conn in [c for c in self._all if c.busy_idx >= 0 and c.sent_at < limit]:
            conn._finish(Outcome.TIMEOUT, 0)
            conn._drop()

    def abort_all(self, outcome: int) -> None:
        self._closing = True
        for conn in [c for c in self._all if c.busy_idx >= 0]:
            conn._finish(outcome, 0)
        for conn in list(self._all):
            if conn.transport is not None:
                conn.transport.abort()
        self._all.clear()
        self._free.clear()

    async def close(self) -> None:
        self._closing = True
        for conn in list(self._all):
            if conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._free.clear()


def _view(column: Any) -> Any:
    """A writable memoryview of a numpy column (its format follows the dtype: d, b, i)."""
    return memoryview(column)


def _quiet(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()
