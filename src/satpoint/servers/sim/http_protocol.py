"""The simulated server's HTTP/1.1 side: a raw ``asyncio.Protocol`` with ``httptools``, and timed release.

One ``_SimServer`` per running server holds all state (no module-level mutable state). Each connection
keeps its responses in request order (HTTP/1.1 pipelining); an inference response is computed when the
request arrives and released by a single loop timer once its virtual ``finish_s`` has passed.

Faults (``SimConfig.fault``, see ``satpoint.servers.sim.server``) change only what is written and when the
connection ends, never the queueing model; without a fault the hot path pays one attribute test per
inference request and per message.

Why this module is long: ``_SimProtocol`` is one connection, and its unary answers, faulty answers and
streamed answers all go through the same per-connection response queue and release timer (HTTP/1.1 keeps
answers in request order); splitting them would spread one connection's state over modules.  What is
written (bodies, faults, the server-sent event framing) lives in ``sim_wire``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import cast
from urllib.parse import unquote

import httptools

from satpoint.errors import SatpointError
from satpoint.servers.sim.autoscale.hpa import ScaledScheduler
from satpoint.servers.sim.autoscale.http import SCALE_PATHS, scale_response
from satpoint.servers.sim.metastable import MetastableScheduler, Ticket
from satpoint.servers.sim.model import FaultDraws, SimConfig, SlotScheduler
from satpoint.servers.sim.pipeline import PipelineRunner, SimPipeline
from satpoint.servers.sim.release import Release as _Release
from satpoint.servers.sim.release import ResponseEntry as _Entry
from satpoint.servers.sim.starts import StartTimer
from satpoint.servers.sim.tls import SimTls
from satpoint.servers.sim.wire import (
    AFTER_CLOSE,
    AFTER_NOTHING,
    AFTER_RESET,
    AFTER_SLOW_CLOSE,
    RESET_AFTER_S,
    STREAM_END,
    STREAM_ERROR,
    Responses,
    faulty_answer,
    send_reset,
    sse_piece,
    stream_head,
)
from satpoint.servers.sim.wire import response as _response

_ID_RE = re.compile(rb'"id"\s*:\s*"([^"\\]{0,512})"')
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class _SimServer:
    """All state of one running simulated server."""

    def __init__(
        self, config: SimConfig, loop: asyncio.AbstractEventLoop, origin_s: float, pipeline: SimPipeline | None = None
    ) -> None:
        self.config = config
        #: ``--pipeline``: each step's model its own queue, and the pipeline run through them
        self.pipeline = pipeline
        self.runner: PipelineRunner | None = None
        self.loop = loop
        self.responses = Responses(config)
        self.release = _Release(loop)
        self.scheduler: SlotScheduler
        #: ``--autoscale``: the scheduler is a ``ScaledScheduler``; Unix time minus ``perf_counter`` at start
        self.scaler: ScaledScheduler | None = None
        self.unix_offset_s = time.time() - time.perf_counter()
        self.model_schedulers: dict[bytes, SlotScheduler] | None = None
        #: metastable mode: the scheduler that takes the place of ``scheduler``, and its start timer
        self.metastable: MetastableScheduler | None = None
        self.starts: StartTimer | None = None
        self.reset_scheduler(origin_s)
        self.connections: set[_SimProtocol] = set()
        self.answered = 0
        self.next_id = 0
        #: the per-request fault and its draws (None: no such fault, the hot path's only test)
        self.fault = config.request_fault
        self.fault_draws = FaultDraws.from_config(config)
        self.close_after = config.close_after or 0
        self.idle_timeout_s = config.idle_timeout_s
        self._sweeper: asyncio.TimerHandle | None = None
        if self.idle_timeout_s is not None:
            self._sweep_every_s = min(max(self.idle_timeout_s / 20, 0.001), 0.25)
            self._sweeper = loop.call_later(self._sweep_every_s, self._sweep)

    def reset_scheduler(self, origin_s: float) -> None:
        """A fresh scheduler whose time (pauses, free slots) starts at ``origin_s``."""
        if self.config.autoscale is not None:
            self.scheduler = self.scaler = ScaledScheduler(self.config, self.config.autoscale, origin_s)
        else:
            self.scheduler = SlotScheduler.from_config(self.config, origin_s)
        if self.pipeline is not None:
            self.runner = PipelineRunner(self.pipeline, self.config, self.loop, origin_s, self._started)
        self.model_schedulers = (  # --model-queues: a queue (and slots, and draws) per model
            {
                m.encode(): SlotScheduler.from_config(replace(self.config, seed=self.config.seed + k), origin_s)
                for k, m in enumerate(self.config.served_models)
            }
            if self.config.model_queues
            else None
        )
        if self.config.metastable:
            if self.starts is not None:
                self.starts.close()
            self.metastable = MetastableScheduler.from_config(self.config, origin_s, on_start=self._started)
            self.starts = StartTimer(self.metastable, self.loop)

    def _started(self, ticket: Ticket) -> None:
        """Metastable mode: a waiting request's service started; its answer is due at its finish."""
        if ticket.payload is not None:  # None: a stalled request, never answered
            assert ticket.finish_s is not None
            self.release.schedule(ticket.finish_s, ticket.payload)

    def admit(self, arrival_s: float, model: bytes = b"") -> tuple[float | None, bool, Ticket | None]:
        """Admit an inference request (for ``model``: its own queue with ``--model-queues``): its finish (None
        while it waits in metastable mode), whether it fails, and its metastable ticket (to hand its answer to
        with ``release_at``)."""
        if self.runner is not None:  # --pipeline: a step's model alone, or the pipeline through its steps
            queue = self.runner.queue(model)
            if queue is not None:
                return queue.admit(arrival_s).finish_s, False, None
            if self.runner.is_pipeline(model):
                return None, False, self.runner.run(arrival_s)
        if self.metastable is None:
            sched = (
                self.scheduler if self.model_schedulers is None else self.model_schedulers.get(model, self.scheduler)
            )
            admission = sched.admit(arrival_s)
            return admission.finish_s, admission.error, None
        ticket = self.metastable.admit(arrival_s)
        if ticket.finish_s is None and self.starts is not None:
            self.starts.poke()
        return ticket.finish_s, ticket.error, ticket

    def release_at(self, finish_s: float | None, entry: _Entry, ticket: Ticket | None) -> None:
        """Release ``entry`` at ``finish_s``, or, for a metastable request still waiting, once it started."""
        if finish_s is not None:
            self.release.schedule(finish_s, entry)
        elif ticket is not None:
            ticket.payload = entry

    def new_protocol(self) -> _SimProtocol:
        return _SimProtocol(self)

    def _sweep(self) -> None:
        """``idle-timeout``: close (FIN) every connection idle for ``idle_timeout_s`` (nothing received and
        nothing to answer since), like a server's keep-alive timeout; checked every 1/20 of it."""
        assert self.idle_timeout_s is not None
        limit_s = time.perf_counter() - self.idle_timeout_s
        for conn in list(self.connections):
            conn.close_if_idle(limit_s)
        self._sweeper = self.loop.call_later(self._sweep_every_s, self._sweep)

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self.release.close()
        if self.starts is not None:
            self.starts.close()
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
_R_REPOSITORY_INDEX = 9
_R_INFER_STREAM = 8
_R_SCALE = 10  # --autoscale: /replicas, /metrics, /events

_GET_ROUTES = {
    b"/v2/health/live": _R_LIVE,
    b"/v2/health/ready": _R_READY,
    b"/v2": _R_SERVER_META,
    b"/v2/": _R_SERVER_META,
}
_MODEL_ROUTES = {
    (): _R_MODEL_META,
    (b"ready",): _R_MODEL_READY,
    (b"infer",): _R_INFER,
    (b"infer_stream",): _R_INFER_STREAM,
    (b"generate_stream",): _R_INFER_STREAM,
}
_POST_ROUTES = (_R_INFER, _R_INFER_STREAM)


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
        self._meta_name = b""  # the served model a model route named
        self._method_ok = True
        self._head = False
        self._keep_alive = True
        self._body: list[bytes] = []
        self._blocked = False  # slow-headers: the rest of a response is still to come
        self._close_after = server.close_after  # close-after: N (0: no such fault)
        self._requests = 0  # close-after: requests parsed on this connection
        self._track_idle = server.idle_timeout_s is not None
        self._active_s = 0.0  # idle-timeout: when something was last received or written

    # asyncio.Protocol ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self._server.connections.add(self)
        if self._track_idle:
            self._active_s = time.perf_counter()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._transport = None
        self._queue.clear()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._track_idle:
            self._active_s = time.perf_counter()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reply(400, self._server.responses.bad_request, True, AFTER_CLOSE)
        except httptools.HttpParserError:
            self._reply(400, self._server.responses.bad_request, True, AFTER_CLOSE)

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
        elif path in SCALE_PATHS and self._server.scaler is not None:
            route, self._method_ok = _R_SCALE, method == b"GET"
        elif path == b"/v2/repository/index":
            route, self._method_ok = _R_REPOSITORY_INDEX, method == b"POST"
        elif path.startswith(b"/v2/models/"):
            route = self._model_route(path)
            self._method_ok = method == (b"POST" if route in _POST_ROUTES else b"GET")
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
        if name != responses.model_b and name not in responses.served:
            decoded = unquote(name.decode("latin-1"))
            if decoded.encode() not in responses.served and decoded != responses.model:
                self._requested_model = decoded
                return _R_UNKNOWN_MODEL
            name = decoded.encode()
        self._meta_name = name
        return route

    def on_body(self, body: bytes) -> None:
        if self._route in _POST_ROUTES:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self._closing:
            return
        close = not self._keep_alive
        after = AFTER_CLOSE if close else AFTER_NOTHING
        if self._close_after:  # the N-th request's answer is the connection's last, without Connection: close
            self._requests += 1
            if self._requests >= self._close_after:
                after = AFTER_CLOSE
        responses = self._server.responses
        route = self._route
        if not self._method_ok or self._head:
            self._reply(405, responses.method_not_allowed, close, after)
        elif route == _R_INFER:
            self._infer(time.perf_counter(), close, after)
        elif route == _R_INFER_STREAM:
            self._infer_stream(time.perf_counter(), close, after)
        elif route in (_R_LIVE, _R_READY, _R_MODEL_READY):
            self._reply(200, responses.ok_empty, close, after)
        elif route == _R_SERVER_META:
            self._reply(200, responses.server_meta, close, after)
        elif route == _R_MODEL_META:
            self._reply(200, responses.model_metas.get(self._meta_name, responses.model_meta), close, after)
        elif route == _R_REPOSITORY_INDEX:
            self._reply(200, responses.repository_index, close, after)
        elif route == _R_SCALE and self._server.scaler is not None:
            path = self._url.split(b"?", 1)[0]
            now_s, offset_s = time.perf_counter(), self._server.unix_offset_s
            data = scale_response(self._server.scaler, path, now_s, offset_s, close=close, head=self._head)
            self._reply_data(data, after)
        elif route == _R_UNKNOWN_MODEL:
            self._reply(404, responses.model_not_found(self._requested_model), close, after)
        else:
            self._reply(404, responses.not_found, close, after)

    # responses -----------------------------------------------------------------------------------
    def _infer(self, arrival_s: float, close: bool, after: int) -> None:
        """``close``: the request asked for Connection: close; ``after``: AFTER_CLOSE if the connection ends
        with this answer (asked for, or close-after), else AFTER_NOTHING."""
        server = self._server
        finish_s, error, ticket = server.admit(arrival_s, self._meta_name)
        if server.fault_draws is not None and server.fault_draws.next():
            self._faulty_infer(finish_s, ticket, close)
            return
        if error:
            data = _response(500, server.responses.injected_error, close=close)
        else:
            data = _response(200, self._infer_body(), close=close)
        self._body = []
        entry = _Entry(self, data, False, after)
        self._queue.append(entry)
        if after:
            self._closing = True
        server.release_at(finish_s, entry, ticket)

    def _infer_stream(self, arrival_s: float, close: bool, after: int) -> None:
        """A streamed answer (``infer_stream``): ``stream_chunks`` server-sent events, the first
        ``stream_first_ms`` after service starts and one every ``stream_gap_ms`` after it
        (``sim_model.stream_chunk_offsets``); the request holds its slot until its last chunk.  An injected
        error (``error_rate``) replaces the last event with ``{"error": ...}`` (as Triton reports a failure
        mid-stream).  Faults do not apply to streams; the metastable mode does not stream (501)."""
        server = self._server
        if server.metastable is not None:
            self._body = []
            self._reply(501, server.responses.not_found, close, after)
            return
        offsets = server.config.stream_offsets_s
        admission = server.scheduler.admit(arrival_s, offsets[-1])
        piece = sse_piece(b"data: " + self._infer_body() + b"\n\n")
        self._body = []
        last = len(offsets) - 1
        for i, offset_s in enumerate(offsets):
            data = sse_piece(STREAM_ERROR) if admission.error and i == last else piece
            if i == 0:
                data = stream_head(close) + data
            if i == last:
                data += STREAM_END
            entry = _Entry(self, data, False, after if i == last else AFTER_NOTHING)
            self._queue.append(entry)
            server.release.schedule(admission.start_s + offset_s, entry)
        server.answered -= last  # one answer, however many pieces ``flush`` writes
        if after:
            self._closing = True

    def _infer_body(self) -> bytes:
        """The OIP answer to the request whose body is in ``self._body``."""
        server = self._server
        body = b"".join(self._body)
        match = _ID_RE.search(body) if body else None
        if match is not None:
            request_id = match.group(1)
        else:
            server.next_id += 1
            request_id = b"%d" % server.next_id
        responses = server.responses
        return responses.infer_head + request_id + responses.infer_tail

    def _faulty_infer(self, finish_s: float | None, ticket: Ticket | None, close: bool) -> None:
        """An inference request the fault hits: admitted like any other (it holds its slot for its service
        time, so capacity is unchanged), answered the faulty way at the time its answer was due."""
        server = self._server
        if server.fault == "stall":  # never answered: it blocks the connection's later answers too
            self._body = []
            self._queue.append(_Entry(self, b"", False, AFTER_CLOSE))
            return
        assert server.fault is not None
        data, after, tail = faulty_answer(server.fault, server.config, server.responses, self._infer_body(), close)
        self._body = []
        entry = _Entry(self, data, False, after, tail)
        self._queue.append(entry)
        if close or after in (AFTER_CLOSE, AFTER_RESET):
            self._closing = True
        server.release_at(finish_s, entry, ticket)

    def _reply(self, status: int, body: bytes, close: bool, after: int) -> None:
        self._reply_data(_response(status, body, close=close, head=self._head), after)

    def _reply_data(self, data: bytes, after: int) -> None:
        self._queue.append(_Entry(self, data, True, after))
        if after:
            self._closing = True
        self.flush()

    def flush(self) -> None:
        """Write the ready responses at the head of the queue (HTTP/1.1 answers in request order)."""
        transport = self._transport
        queue = self._queue
        if transport is None or self._blocked:
            return
        out: list[bytes] = []
        last: _Entry | None = None
        while queue and queue[0].ready:
            entry = queue.popleft()
            out.append(entry.data)
            if entry.after:
                last = entry
                break
        if not out:
            return
        self._server.answered += len(out)
        transport.write(out[0] if len(out) == 1 else b"".join(out))
        if self._track_idle:
            self._active_s = time.perf_counter()
        if last is not None:
            self._after(last)

    def _after(self, entry: _Entry) -> None:
        """What follows a response that is not simply followed by the next one."""
        transport = self._transport
        assert transport is not None
        after = entry.after
        if after == AFTER_CLOSE:
            self._queue.clear()
            transport.close()
        elif after == AFTER_RESET:
            self._queue.clear()
            self._server.loop.call_later(RESET_AFTER_S, self.reset)
        else:  # slow headers: nothing more on this connection until the tail is written
            self._blocked = True
            self._server.loop.call_later(self._server.config.slow_headers_s, self._write_tail, entry)

    def _write_tail(self, entry: _Entry) -> None:
        self._blocked = False
        transport = self._transport
        if transport is None:
            return
        transport.write(entry.tail)
        if self._track_idle:
            self._active_s = time.perf_counter()
        if entry.after == AFTER_SLOW_CLOSE:
            self._queue.clear()
            transport.close()
        else:
            self.flush()

    def close_if_idle(self, limit_s: float) -> None:
        """``idle-timeout``: close (FIN) if nothing was received or written since ``limit_s`` and nothing
        is waiting for an answer."""
        if self._active_s <= limit_s and not self._queue and not self._closing and self._transport is not None:
            self._closing = True
            self._transport.close()

    def reset(self) -> None:
        """Close with a TCP RST, what a crashing worker or a killed proxy leaves behind."""
        if self._transport is not None:
            send_reset(self._transport)

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
    pipeline: SimPipeline | None = None,
) -> int:
    """Serve ``config`` until ``stop`` is set (or SIGTERM/SIGINT with ``handle_signals``).

    Calls ``on_listening(host, port)`` once listening (the real port, also when ``config.port`` is 0).
    ``tls`` serves HTTPS (with ``client_ca_file``: clients must present a certificate); ``pipeline`` serves a
    pipeline of models (``satpoint.servers.sim.pipeline``; ``config`` from its ``configure``).  Returns the
    number of responses written.
    """
    loop = asyncio.get_running_loop()
    stop_event = stop if stop is not None else asyncio.Event()
    state = _SimServer(config, loop, time.perf_counter(), pipeline)
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
    state.reset_scheduler(time.perf_counter())
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
