"""Open Inference Protocol over REST: the hot path.

A pool of HTTP/1.1 keep-alive connections, each a raw ``asyncio.Protocol`` with an ``httptools``
response parser.  Request bytes (request line, headers, body) are encoded once before the run, so
sending is one ``transport.write``.  One request per connection at a time (no pipelining), so the
in-flight cap is the connection cap.  HTTP client libraries cost 4-40x more CPU per request here
(see DESIGN.md §3), which is why this module speaks HTTP/1.1 itself.

Keep-alive hygiene (a request written to a connection the server has just closed fails before the
server read it: the client's fault, not the server's):

* the most recently used free connection is reused first (a stack), so a steady rate keeps a few
  connections hot and the rest go idle instead of every connection idling a little;
* the dispatcher's housekeeping tick (``expire``, four times a second) closes connections idle longer
  than the server keeps them: a little under its ``Keep-Alive: timeout=N`` when it sends one (read
  off the hot path, from the first bytes of an answer already received), else ``DEFAULT_IDLE_S``,
  below uvicorn's (MLServer's) 5 s and Node's 5 s;
* a request whose *reused* connection fails before any byte of its answer arrived (reset, or closed
  by the server) is sent once more on a fresh connection and marked in ``Records.retried``; its
  latency still counts from its intended time and its ``sent`` stays the first attempt.  A request on
  a fresh connection, or one that already got part of an answer, is never resent.

What remains is classed: a connection lost mid-answer -> CONN_RESET; an answer that cannot be parsed
-> MALFORMED; an answer the server delimits by closing the connection (no Content-Length, not
chunked: an HTTP/1.0 proxy's 503 page) -> its status; interim 1xx answers are skipped; an answer
nobody asked for drops its connection; a refused connect -> CONN_REFUSED, one that fails for want of
the generator's own descriptors or buffers (EMFILE, ENFILE, ENOBUFS) -> GENERATOR_RESOURCES, any
other -> CONN_ERROR.  Connects are bounded: ``prepare`` by ``PREPARE_CONNECT_S``, a
connect on demand by the request's timeout (``expire`` cancels it, so a late connect never sends a
request that has already timed out).

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

from satpoint.errors import RunFailed, TargetConnectFailed
from satpoint.metrics.records import Outcome, Records, connect_failure
from satpoint.transports.base import generator_resources_message
from satpoint.transports.rest.answer import AnswerHead, keep_alive_idle_s

perf = time.perf_counter
_OK, _HTTP_ERROR = int(Outcome.OK), int(Outcome.HTTP_ERROR)

#: close a connection idle this long when the server did not say how long it keeps idle connections
#: (uvicorn, hence MLServer, closes them after 5 s; gunicorn after 2 s; the sweep runs every 0.25 s)
DEFAULT_IDLE_S = 1.5
#: the longest ``prepare`` waits for its warm connections
PREPARE_CONNECT_S = 10.0


def infer_path(model: str, version: str | None = None) -> str:
    path = f"/v2/models/{model}"
    if version:
        path += f"/versions/{version}"
    return path + "/infer"


def host_header(host: str, port: int) -> str:
    """The ``Host`` field value for a connection to ``host:port`` (IPv6 literals in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def encode_request(host: str, port: int, path: str, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """One complete HTTP/1.1 POST, ready to write.  A ``Host`` among ``headers`` replaces the default one
    (ingress routing by virtual host)."""
    user_host = [v for k, v in headers if k.strip().lower() == "host"]
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {user_host[-1] if user_host else host_header(host, port)}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: keep-alive",
    ]
    lines += [f"{k}: {v}" for k, v in headers if k.strip().lower() != "host"]
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


class _Conn(asyncio.Protocol):
    __slots__ = (
        "busy_idx",
        "connected",
        "head",
        "idle_limit",
        "idle_since",
        "opener",
        "parser",
        "pending",
        "pool",
        "req",
        "sent_at",
        "transport",
    )

    def __init__(self, pool: RestPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.busy_idx = -1
        self.sent_at = 0.0
        self.pending: bytes | None = None  # the request to write once connected
        self.req: bytes | None = None  # the request in flight on a reused connection: resendable
        self.head: bytes | None = None  # first bytes of the current answer; None until one arrives
        self.connected = False
        self.idle_since = 0.0
        self.idle_limit = -1.0  # < 0: not learnt yet from the server's Keep-Alive header
        self.opener: asyncio.Task[None] | None = None

    # asyncio.Protocol ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pool = self.pool
        self.opener = None
        if self not in pool._all:  # given up on while connecting (timed out, pool closing)
            transport.abort()  # type: ignore[attr-defined]
            return
        self.transport = transport  # type: ignore[assignment]
        self.connected = True
        self.idle_since = perf()
        if self.pending is not None:
            self.transport.write(self.pending)  # type: ignore[union-attr]
            self.pending = None
        elif self.busy_idx < 0:
            pool._release(self)

    def data_received(self, data: bytes) -> None:
        if self.head is None:
            self.head = data
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._parse_error()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connected = False
        pool = self.pool
        if self.busy_idx >= 0:
            if self.head is None and self.req is not None and not pool._closing:
                pool._retry(self)  # a reused connection failed before any byte of its answer
            else:
                answer = AnswerHead(self.head) if exc is None and self.head is not None else None
                if answer is not None and answer.ends_at_close:  # the close ended a complete answer
                    self._finish(_OK if answer.status < 300 else _HTTP_ERROR, answer.status)
                else:
                    self._finish(Outcome.CONN_RESET, 0)
        pool._forget(self)

    # httptools callbacks --------------------------------------------------------------------------
    def on_message_complete(self) -> None:
        parser = self.parser
        status = parser.get_status_code()
        idx = self.busy_idx
        if idx < 0 or status < 200:
            self._not_final(idx, status)
            return
        pool = self.pool  # the hot path: _finish inlined
        self.busy_idx = -1
        now = perf()
        pool._done[idx] = now
        pool._outcome[idx] = _OK if status < 300 else _HTTP_ERROR
        pool._status[idx] = status
        pool._inflight -= 1
        self.idle_since = now
        if parser.should_keep_alive():
            if not pool._closing:  # RestPool._release, inline
                pool._free.append(self)
                pool.on_free()
        else:
            self._drop()

    # helpers -----------------------------------------------------------------------------------------
    def _not_final(self, idx: int, status: int) -> None:
        """An interim answer (1xx: skipped, the final one follows) or an answer nobody asked for."""
        if idx >= 0 and status != 101:
            return
        if idx >= 0:  # 101 Switching Protocols: we never ask to switch
            self._finish(_HTTP_ERROR, status)
        else:
            self.pool.stray_answers += 1  # the connection is out of step with its requests
        self._drop()

    def _parse_error(self) -> None:
        pool = self.pool
        pool.protocol_errors += 1
        if self.busy_idx >= 0 and self.head is None and self.req is not None and not pool._closing:
            # the bad bytes followed the previous answer in the same read (the request now in flight was
            # written after that answer completed): nothing of this request's answer has arrived
            pool._retry(self)
        else:
            self._finish(Outcome.MALFORMED, 0)
        self._drop()

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
        self.pending = None
        opener = self.opener
        if opener is not None:  # still connecting: never send once the request is given up
            self.opener = None
            opener.cancel()
        if self.transport is not None:
            self.transport.abort()


class RestPool:
    """Keep-alive connection pool implementing :class:`~satpoint.transports.base.HotTransport`."""

    #: the connection protocol the pool opens (a subclass reads answers differently: ``rest_stream``)
    conn_type: type[_Conn] = _Conn

    def __init__(
        self,
        rec: Records,
        on_free: Callable[[], None],
        host: str,
        port: int,
        requests: Sequence[bytes],
        max_inflight: int,
        idle_s: float = DEFAULT_IDLE_S,
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
        self.idle_s = idle_s
        self._free: list[_Conn] = []  # a stack: the most recently used connection is reused first
        self._all: set[_Conn] = set()
        self._inflight = 0
        self._loop = asyncio.get_event_loop()
        self._closing = False
        self.connect_errors = 0
        self.connections_opened = 0
        self.retries = 0
        self.idle_closed = 0
        self.protocol_errors = 0
        self.stray_answers = 0
        self.rebind()

    def rebind(self) -> None:
        """(Re)take views of the record columns (after they were replaced by larger arrays).

        memoryviews write straight into the numpy columns at a fraction of numpy's item-set cost."""
        rec = self.rec
        self._sent = _view(rec.sent)
        self._done = _view(rec.done)
        self._outcome = _view(rec.outcome)
        self._status = _view(rec.status)
        self._retried = _view(rec.retried)

    async def prepare(self, warm_connections: int) -> None:
        n = min(warm_connections, self.max_inflight)
        conns = [self.conn_type(self) for _ in range(n)]
        self._all.update(conns)
        self.connections_opened += n
        results = await asyncio.gather(
            *(asyncio.wait_for(self._connect(c), PREPARE_CONNECT_S) for c in conns), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        for c, r in zip(conns, results, strict=True):
            if isinstance(r, BaseException):
                self._all.discard(c)
        if errors and len(errors) == len(results):
            err = errors[0]
            if connect_failure(err) is Outcome.GENERATOR_RESOURCES:
                raise RunFailed(generator_resources_message(self.host, self.port, err))
            reason = f"no connection within {PREPARE_CONNECT_S:g} s" if isinstance(err, TimeoutError) else err
            raise TargetConnectFailed(f"cannot connect to {self.host}:{self.port}: {reason}")

    def try_send(self, idx: int, payload_idx: int) -> bool:
        free = self._free
        while free:
            conn = free.pop()
            if not conn.connected:
                continue
            conn.busy_idx = idx
            req = self.requests[payload_idx]
            conn.req = req
            conn.head = None
            self._inflight += 1
            now = perf()
            self._sent[idx] = now
            conn.sent_at = now
            conn.transport.write(req)  # type: ignore[union-attr]
            return True
        if len(self._all) >= self.max_inflight:
            return False
        conn = self.conn_type(self)
        self._all.add(conn)
        self._inflight += 1
        conn.busy_idx = idx
        now = perf()
        self._sent[idx] = now
        conn.sent_at = now
        conn.pending = self.requests[payload_idx]
        self._start_open(conn)
        return True

    def _start_open(self, conn: _Conn) -> None:
        """Open a connection for ``conn`` in the background (its request is written once connected)."""
        self.connections_opened += 1
        task = self._loop.create_task(self._open(conn))
        task.add_done_callback(_quiet)
        conn.opener = task

    def _connect(self, conn: _Conn) -> Coroutine[Any, Any, Any]:
        if self.ssl is None:
            return self._loop.create_connection(lambda: conn, self.host, self.port)
        hostname = self.server_hostname or self.host
        return self._loop.create_connection(lambda: conn, self.host, self.port, ssl=self.ssl, server_hostname=hostname)

    async def _open(self, conn: _Conn) -> None:
        try:
            await self._connect(conn)
        except OSError as e:  # refused: CONN_REFUSED; out of descriptors: GENERATOR_RESOURCES; else CONN_ERROR
            self._fail_open(conn, connect_failure(e))

    def _fail_open(self, conn: _Conn, outcome: Outcome) -> None:
        conn.opener = None
        if conn not in self._all:
            return  # already given up on (timed out)
        self.connect_errors += 1
        conn._finish(outcome, 0)
        self._forget(conn)

    def _retry(self, old: _Conn) -> None:
        """Send ``old``'s request once more on a fresh connection; it keeps its slot and its times."""
        idx = old.busy_idx
        old.busy_idx = -1
        self.retries += 1
        self._retried[idx] = True
        conn = self.conn_type(self)
        conn.busy_idx = idx
        conn.sent_at = old.sent_at
        conn.pending = old.req
        self._all.add(conn)
        self._start_open(conn)

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
        """The housekeeping tick: time out old requests (a pending connect is cancelled with them), then
        close connections idle longer than the server keeps them."""
        limit = now - timeout_s
        for conn in [c for c in self._all if c.busy_idx >= 0 and c.sent_at < limit]:
            conn._finish(Outcome.TIMEOUT, 0)
            conn._drop()
        self._close_idle(now)

    def _close_idle(self, now: float) -> None:
        free = self._free
        keep: list[_Conn] = []
        for conn in free:
            limit = conn.idle_limit
            if limit < 0:
                if conn.head is None:
                    limit = self.idle_s  # no answer yet to read the server's Keep-Alive from
                else:
                    ka = AnswerHead(conn.head).keep_alive_timeout_s
                    limit = conn.idle_limit = self.idle_s if ka is None else keep_alive_idle_s(ka)
            if now - conn.idle_since > limit and conn.connected:
                self._all.discard(conn)
                self.idle_closed += 1
                conn.transport.close()  # type: ignore[union-attr]
            else:
                keep.append(conn)
        if len(keep) != len(free):
            free[:] = keep  # the order (most recently used last) is kept

    def abort_all(self, outcome: int) -> None:
        self._closing = True
        self._free.clear()
        for conn in [c for c in self._all if c.busy_idx >= 0]:
            conn._finish(outcome, 0)
        for conn in list(self._all):
            conn._drop()
        self._all.clear()

    async def close(self) -> None:
        self._closing = True
        for conn in list(self._all):
            if conn.opener is not None:
                conn._drop()
            elif conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._free.clear()

    def stats(self) -> dict[str, Any]:
        """What the pool did, for the results file (``generator.transport``)."""
        return {
            "kind": "rest",
            "connections_opened": self.connections_opened,
            "retries": self.retries,
            "idle_closed": self.idle_closed,
            "connect_errors": self.connect_errors,
            "protocol_errors": self.protocol_errors,
            "stray_answers": self.stray_answers,
            "idle_s": self.idle_s,
        }


def _view(column: Any) -> Any:
    """A writable memoryview of a numpy column (its format follows the dtype: d, b, i, ?)."""
    return memoryview(column)


def _quiet(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()
