"""The simulated server's HTTP/1.1 side: a raw ``asyncio.Protocol`` with ``httptools``, and timed release.

One ``_SimServer`` per running server holds all state (no module-level mutable state). Each connection
keeps its responses in request order (HTTP/1.1 pipelining); an inference response is computed when the
request arrives and released by a single loop timer once its virtual ``finish_s`` has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import math
import re
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import cast
from urllib.parse import unquote

import httptools

from satpoint.errors import SatpointError
from satpoint.servers.sim_model import SimConfig, SlotScheduler
from satpoint.servers.sim_tls import SimTls

SERVER_NAME = "satpoint-sim"
SERVER_VERSION = "0.1.0"

_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    500: b"Internal Server Error",
}
_ID_RE = re.compile(rb'"id"\s*:\s*"([^"\\]{0,512})"')
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
#: below this, wait for a response by re-checking each loop iteration rather than by a (ms) timer
_SPIN_S = 0.0005


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _response(status: int, body: bytes, *, close: bool = False, head: bool = False) -> bytes:
    """A complete HTTP/1.1 response (``head``: headers only, as HEAD requires)."""
    lines = [
        b"HTTP/1.1 %d %s" % (status, _REASONS[status]),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
    ]
    if close:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + (b"" if head else body)


class _Responses:
    """Precomputed response bodies for one configuration."""

    def __init__(self, config: SimConfig) -> None:
        model = config.model
        self.model = model
        self.model_b = model.encode()
        self.ok_empty = b""
        self.server_meta = _json({"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": []})
        self.model_meta = _json(
            {
                "name": model,
                "versions": [],
                "platform": SERVER_NAME,
                "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}],
                "outputs": [{"name": "output-0", "datatype": "FP32", "shape": [-1, 1]}],
            }
        )
        self.infer_head = b'{"model_name":' + _json(model) + b',"id":"'
        self.infer_tail = b'","outputs":[{"name":"output-0","datatype":"FP32","shape":[1,1],"data":[0.5]}]}'
        self.injected_error = _json({"error": f"{SERVER_NAME}: injected error (error_rate)"})
        self.not_found = _json({"error": "Not Found"})
        self.bad_request = _json({"error": "Bad Request"})
        self.method_not_allowed = _json({"error": "Method Not Allowed"})

    @staticmethod
    def model_not_found(name: str) -> bytes:
        return _json({"error": f"Model {name} not found"})


class _Entry:
    """One response slot in a connection's in-order queue."""

    __slots__ = ("close", "conn", "data", "ready")

    def __init__(self, conn: _SimProtocol, data: bytes, *, ready: bool, close: bool) -> None:
        self.conn = conn
        self.data = data
        self.ready = ready
        self.close = close


class _Release:
    """Releases timed responses once their virtual finish time has passed, with a single loop timer.

    The timer is armed for ``finish_s`` itself. libuv counts in whole milliseconds, so it may fire up
    to about 1 ms early: due-ness is always re-checked on ``perf_counter`` and, when the earliest response
    is less than ``_SPIN_S`` away, the release is retried on the next loop iteration (``call_soon``; the
    loop keeps serving I/O meanwhile) instead of by a timer that would round to whole ms. So responses
    are never written before ``finish_s`` and are late only by loop latency (tens of µs when idle).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, _Entry]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._armed_for_s = math.inf

    def schedule(self, finish_s: float, entry: _Entry) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (finish_s, self._seq, entry))
        if finish_s < self._armed_for_s:
            self._arm(finish_s)

    def _arm(self, at_s: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for_s = at_s
        delay_s = at_s - time.perf_counter()
        if delay_s <= _SPIN_S:
            self._timer = self._loop.call_soon(self._fire)
        else:
            self._timer = self._loop.call_later(delay_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._armed_for_s = math.inf
        heap = self._heap
        now_s = time.perf_counter()
        touched: dict[int, _SimProtocol] = {}
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


class _SimServer:
    """All state of one running simulated server."""

    def __init__(self, config: SimConfig, loop: asyncio.AbstractEventLoop, origin_s: float) -> None:
        self.config = config
        self.responses = _Responses(config)
        self.scheduler = SlotScheduler.from_config(config, origin_s)
        self.release = _Release(loop)
        self.connections: set[_SimProtocol] = set()
        self.answered = 0
        self.next_id = 0

    def new_protocol(self) -> _SimProtocol:
        return _SimProtocol(self)

    def close(self) -> None:
        self.release.close()
        for conn in list(self.connections):
            conn.abort()
        self.connections.clear()


# Routes (what a request is, decided once its headers are in).
_R_NOT_FOUND = 0
_R_LIVE = 1
_R_READY = 2
_R_SERVER_META = 3
_R_MODEL_META = 4
_R_MODEL_READY = 5
_R_INFER = 6
_R_UNKNOWN_MODEL = 7

_GET_ROUTES = {
    b"/v2/health/live": _R_LIVE,
    b"/v2/health/ready": _R_READY,
    b"/v2": _R_SERVER_META,
    b"/v2/": _R_SERVER_META,
}
_MODEL_ROUTES = {(): _R_MODEL_META, (b"ready",): _R_MODEL_READY, (b"infer",): _R_INFER}


class _SimProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection: parses with httptools, answers in request order."""

    def __init__(self, server: _SimServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._queue: deque[_Entry] = deque()
        self._closing = False
        self._url = b""
        self._route = _R_NOT_FOUND
        self._requested_model = ""
        self._method_ok = True
        self._head = False
        self._keep_alive = True
        self._body: list[bytes] = []

    # asyncio.Protocol ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._transport = None
        self._queue.clear()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reply(400, self._server.responses.bad_request, close=True)
        except httptools.HttpParserError:
            self._reply(400, self._server.responses.bad_request, close=True)

    # httptools callbacks -------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._body = []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if (
            not self._queue
            and name.lower() == b"expect"
            and value.lower() == b"100-continue"
            and self._transport is not None
        ):
            self._transport.write(_CONTINUE)

    def on_headers_complete(self) -> None:
        method = self._parser.get_method()
        self._keep_alive = self._parser.should_keep_alive()
        self._head = method == b"HEAD"
        path = self._url.split(b"?", 1)[0]
        route = _GET_ROUTES.get(path, _R_NOT_FOUND)
        if route != _R_NOT_FOUND:
            self._method_ok = method == b"GET"
        elif path.startswith(b"/v2/models/"):
            route = self._model_route(path)
            self._method_ok = method == (b"POST" if route == _R_INFER else b"GET")
            if route == _R_UNKNOWN_MODEL:
                self._method_ok = True
        else:
            self._method_ok = True
        self._route = route

    def _model_route(self, path: bytes) -> int:
        parts = path[len(b"/v2/models/") :].split(b"/")
        name = parts[0]
        rest = tuple(parts[1:])
        if len(rest) >= 2 and rest[0] == b"versions" and rest[1]:
            rest = rest[2:]
        route = _MODEL_ROUTES.get(rest)
        if route is None or not name:
            return _R_NOT_FOUND
        responses = self._server.responses
        if name != responses.model_b:
            decoded = unquote(name.decode("latin-1"))
            if decoded != responses.model:
                self._requested_model = decoded
                return _R_UNKNOWN_MODEL
        return route

    def on_body(self, body: bytes) -> None:
        if self._route == _R_INFER:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self._closing:
            return
        close = not self._keep_alive
        responses = self._server.responses
        route = self._route
        if not self._method_ok or self._head:
            self._reply(405, responses.method_not_allowed, close=close)
        elif route == _R_INFER:
            self._infer(time.perf_counter(), close)
        elif route in (_R_LIVE, _R_READY, _R_MODEL_READY):
            self._reply(200, responses.ok_empty, close=close)
        elif route == _R_SERVER_META:
            self._reply(200, responses.server_meta, close=close)
        elif route == _R_MODEL_META:
            self._reply(200, responses.model_meta, close=close)
        elif route == _R_UNKNOWN_MODEL:
            self._reply(404, responses.model_not_found(self._requested_model), close=close)
        else:
            self._reply(404, responses.not_found, close=close)

    # responses -----------------------------------------------------------------------------------
    def _infer(self, arrival_s: float, close: bool) -> None:
        server = self._server
        admission = server.scheduler.admit(arrival_s)
        if admission.error:
            data = _response(500, server.responses.injected_error, close=close)
        else:
            body = b"".join(self._body)
            match = _ID_RE.search(body) if body else None
            if match is not None:
                request_id = match.group(1)
            else:
                server.next_id += 1
                request_id = b"%d" % server.next_id
            responses = server.responses
            data = _response(200, responses.infer_head + request_id + responses.infer_tail, close=close)
        self._body = []
        entry = _Entry(self, data, ready=False, close=close)
        self._queue.append(entry)
        if close:
            self._closing = True
        server.release.schedule(admission.finish_s, entry)

    def _reply(self, status: int, body: bytes, *, close: bool) -> None:
        data = _response(status, body, close=close, head=self._head)
        self._queue.append(_Entry(self, data, ready=True, close=close))
        if close:
            self._closing = True
        self.flush()

    def flush(self) -> None:
        """Write the ready responses at the head of the queue (HTTP/1.1 answers in request order)."""
        transport = self._transport
        queue = self._queue
        if transport is None:
            return
        out: list[bytes] = []
        close = False
        while queue and queue[0].ready:
            entry = queue.popleft()
            out.append(entry.data)
            if entry.close:
                close = True
                break
        if not out:
            return
        self._server.answered += len(out)
        transport.write(out[0] if len(out) == 1 else b"".join(out))
        if close:
            queue.clear()
            transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def serve(
    config: SimConfig,
    *,
    stop: asyncio.Event | None = None,
    on_listening: Callable[[str, int], None] | None = None,
    handle_signals: bool = True,
    tls: SimTls | None = None,
) -> int:
    """Serve ``config`` until ``stop`` is set (or SIGTERM/SIGINT with ``handle_signals``).

    Calls ``on_listening(host, port)`` once listening (the real port, also when ``config.port`` is 0).
    ``tls`` serves HTTPS (with ``client_ca_file``: clients must present a certificate).  Returns the
    number of responses written.
    """
    loop = asyncio.get_running_loop()
    stop_event = stop if stop is not None else asyncio.Event()
    state = _SimServer(config, loop, time.perf_counter())
    ssl_context = tls.ssl_context() if tls is not None else None
    try:
        server = await loop.create_server(
            state.new_protocol, config.host, config.port, reuse_address=True, ssl=ssl_context
        )
    except OSError as exc:
        raise SatpointError(
            f"sim: cannot listen on {_url_host(config.host)}:{config.port}: {exc.strerror or exc}"
        ) from exc
    # Server start (t0 of the pause calendar) is when it listens; nothing was admitted before.
    state.scheduler = SlotScheduler.from_config(config, time.perf_counter())
    installed: list[signal.Signals] = []
    try:
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, stop_event.set)
                except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
                    continue
                installed.append(sig)
        port = int(server.sockets[0].getsockname()[1])
        if on_listening is not None:
            on_listening(config.host, port)
        await stop_event.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        server.close()
        state.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), timeout=2.0)
    return state.answered


def listening_line(host: str, port: int, config: SimConfig, *, tls: bool = False) -> str:
    scheme = "https" if tls else "http"
    return f"satpoint sim listening on {scheme}://{_url_host(host)}:{port} (capacity {config.capacity_rps:.10g} rps)"


def run(config: SimConfig, *, tls: SimTls | None = None) -> None:
    """Run the server on uvloop until SIGTERM/SIGINT, printing the listening line to stdout.

    Raises ``SatpointError`` if it cannot listen (e.g. the port is taken).
    """
    import uvloop

    def announce(host: str, port: int) -> None:
        print(listening_line(host, port, config, tls=tls is not None), flush=True)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            answered = runner.run(serve(config, on_listening=announce, tls=tls))
        except KeyboardInterrupt:  # a SIGINT that arrived before the handlers were installed
            return
    print(f"satpoint sim stopped after {answered} responses", file=sys.stderr, flush=True)
