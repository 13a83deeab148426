"""Open Inference Protocol streaming over gRPC: ``ModelStreamInfer`` on satpoint's own HTTP/2 client.

Built on :mod:`satpoint.transports.grpc.wire` (the unary hot path): the connection, flow control and the
receive loop are its own, which hands this module every DATA payload (``_Conn._on_data``); the request
side is the same, one HTTP/2 stream per request, HEADERS then the request's DATA with END_STREAM (the
client half-closes at once: one request per stream), only the ``:path`` is
``/inference.GRPCInferenceService/ModelStreamInfer``. That is what MLServer needs (it serves exactly one
request per stream: it reads the first request, selects the model from it, and ends the stream with the
status when the model's ``predict_stream`` is done) and what Triton accepts (a stream may carry many
requests; after the client half-closes and the last response went out, Triton ends it with OK).

The receive side parses the DATA frames into gRPC messages (``[compressed:1][length:4][message]``, a
message may span frames and a frame may hold several: the bytes of an incomplete message wait in one buffer
per stream that grows in place, so a message over many frames is copied once); each complete message is a
chunk, stamped through the stream seam (:class:`~satpoint.metrics.stream_records.StreamStamper`:
``chunk(idx, now)``, ``now`` the read of the bytes that completed it: the messages of one read share it and
count as ``coalesced``). Two decoders, by server kind:

* ``mlserver`` (and Seldon Core 2): each message is a bare ``ModelInferResponse``, every one a chunk; its
  content is not parsed. Errors come as the final gRPC status.
* ``triton``: each message is a ``ModelStreamInferResponse {string error_message = 1; ModelInferResponse
  infer_response = 2}``. A message with ``error_message`` is the server's error, not a chunk; one whose
  ``infer_response`` carries no outputs (Triton's empty final response) is not a chunk either; the
  response parameter ``triton_final_response`` marks the request's last response. Decoded here by a small
  protobuf reader (:func:`triton_stream_message`), as satpoint's descriptor has no Triton-only messages.
  Requests to Triton carry ``triton_enable_empty_final_response=true`` (:func:`ask_final_response`), so
  every complete request ends with a final response.

Outcomes (DESIGN: a stream is judged as a whole; ``done`` is the end of the stream):

* OK: grpc-status 0 after the messages (Triton: and no ``triton_final_response`` false left open);
* ``STREAM_ERROR``: the server said "error" after at least one chunk: a non-OK grpc-status (MLServer's
  ``context.abort`` mid-stream) or a Triton ``error_message``;
* ``STREAM_CUT``: the HTTP/2 stream (RST_STREAM) or the connection was lost after at least one chunk;
* ``STREAM_BROKEN``: the stream ended without an error but incomplete: DATA with END_STREAM and no
  trailers, a truncated last message, or (Triton) no final response after a non-final one;
* ``TIMEOUT``: the stream did not end within ``--timeout`` (its chunks so far kept; the gap under way
  kept as a lower bound); before any chunk, every outcome is the unary one (``GRPC_ERROR`` ...), and a Triton
  ``error_message`` before any chunk is ``GRPC_ERROR`` with status 2 (UNKNOWN: Triton gives no code).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ssl as _ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.stream_records import StreamStamper, attach
from satpoint.transports.grpc.stream_codec import TritonMessage, ask_final_response, triton_stream_message
from satpoint.transports.grpc.wire import PADDED, RST_STREAM, GrpcPool, _Conn

__all__ = [
    "STREAM_METHOD",
    "Decoder",
    "GrpcStreamPool",
    "StreamAnswer",
    "TritonMessage",
    "ask_final_response",
    "grpc_stream_factory",
    "stream_once",
    "stream_outcome",
    "triton_stream_message",
]

STREAM_METHOD = "ModelStreamInfer"
Decoder = Literal["mlserver", "triton"]
DECODERS: tuple[Decoder, ...] = ("mlserver", "triton")
_UNKNOWN = 2  # gRPC UNKNOWN: a Triton error_message carries no code
_CUT_OUTCOMES = (Outcome.CONN_RESET, Outcome.CONN_ERROR, Outcome.MALFORMED)
perf = time.perf_counter


# the connection ----------------------------------------------------------------------------------------------
class _StreamConn(_Conn):
    """One HTTP/2 connection carrying many ``ModelStreamInfer`` calls (one request each)."""

    def __init__(self, pool: GrpcStreamPool) -> None:
        super().__init__(pool)
        self.spool = pool
        self.partial: dict[int, bytearray] = {}  # stream id -> bytes of a message not complete yet
        self.got: dict[int, int] = {}  # stream id -> chunks received
        self.errors: dict[int, str] = {}  # stream id -> Triton error_message
        self.open_final: set[int] = set()  # Triton: streams with a non-final response and no final one yet
        self.cut: set[int] = set()  # streams reset by the server (RST_STREAM)
        self.reads_data = True  # grpc_wire's receive loop hands every DATA payload to _on_data

    # the receive loop is grpc_wire's: its DATA payloads are parsed into messages here (``_on_data``), the
    # other frames go to its handlers, an RST_STREAM after a chunk marked first (``_on_control``)

    def _on_data(self, sid: int, data: bytes, start: int, end: int, flags: int) -> None:
        if sid not in self.streams:
            return
        if flags & PADDED:
            end -= data[start]
            start += 1
        buf = self.partial.get(sid)
        if buf is not None:
            buf += data[start:end]
            chunk: bytes | bytearray = buf
            start, end = 0, len(buf)
        else:
            chunk = data
        idx = self.streams[sid]
        while end - start >= 5:
            length = int.from_bytes(chunk[start + 1 : start + 5], "big")
            if end - start - 5 < length:
                break
            self._on_message(sid, idx, chunk, start + 5, start + 5 + length)
            start += 5 + length
        if buf is None:
            if start < end:  # the rest of a message: copied once, then grown in place
                self.partial[sid] = bytearray(chunk[start:end])
        elif start < end:
            del buf[:start]  # the consumed prefix only: a message over N frames costs O(its size), not O(N x size)
        else:
            del self.partial[sid]

    def _on_control(self, ftype: int, flags: int, sid: int, payload: bytes) -> int:
        if ftype == RST_STREAM and self.got.get(sid):
            self.cut.add(sid)
        return super()._on_control(ftype, flags, sid, payload)

    def _on_message(self, sid: int, idx: int, chunk: bytes | bytearray, start: int, end: int) -> None:
        if self.spool.decoder == "triton":
            msg = triton_stream_message(bytes(chunk[start:end]))
            if msg.error:
                self.errors.setdefault(sid, msg.error)
                return
            if msg.final is False:
                self.open_final.add(sid)
            elif msg.final:
                self.open_final.discard(sid)
            if not msg.has_outputs:
                return
        self.got[sid] = self.got.get(sid, 0) + 1
        self.spool.stamp.chunk(idx, self.now)

    def _finish(self, sid: int, outcome: int, status: int) -> int:
        idx = self.streams.get(sid)
        if idx is None:
            return 0
        got = self.got.pop(sid, 0)
        truncated = self.partial.pop(sid, None) is not None
        error = self.errors.pop(sid, None)
        unfinished = sid in self.open_final
        self.open_final.discard(sid)
        cut = sid in self.cut
        self.cut.discard(sid)
        outcome, status = stream_outcome(outcome, status, got, error=error, truncated=truncated, cut=cut)
        if outcome == Outcome.OK and unfinished:
            outcome = Outcome.STREAM_BROKEN
        done = super()._finish(sid, outcome, status)
        self.spool.stamp.end(idx, self.now, open_gap=outcome == Outcome.TIMEOUT)
        return done

    def fail_all(self, outcome: int, status: int = 0) -> None:
        """Every stream of the connection ends with ``outcome``; those with chunks, when the connection was
        lost, as ``STREAM_CUT``; the gap under way kept when the run gave them up (``UNFINISHED``...)."""
        chunked = [idx for sid, idx in self.streams.items() if self.got.get(sid)]
        super().fail_all(outcome, status)
        rec = self.pool.rec
        now = rec.done[chunked[0]] if chunked else perf()
        lost = outcome in _CUT_OUTCOMES
        for idx in chunked:
            if lost:
                rec.outcome[idx] = Outcome.STREAM_CUT
            self.spool.stamp.end(idx, float(now), open_gap=not lost)
        self.partial.clear()
        self.got.clear()
        self.errors.clear()
        self.open_final.clear()
        self.cut.clear()


def stream_outcome(
    outcome: int, status: int, chunks: int, *, error: str | None = None, truncated: bool = False, cut: bool = False
) -> tuple[int, int]:
    """The outcome of a stream that ended as the unary path judged it (``outcome``, ``status``) after
    ``chunks`` chunks: with no chunk, the unary outcome (a Triton ``error`` then ``GRPC_ERROR`` UNKNOWN); after
    chunks, the stream's error classes (module doc)."""
    if outcome == Outcome.TIMEOUT:
        return outcome, status
    if chunks == 0:
        if error is not None and outcome == Outcome.OK:
            return Outcome.GRPC_ERROR, _UNKNOWN
        return outcome, status
    if cut:
        return Outcome.STREAM_CUT, status
    if error is not None:
        return Outcome.STREAM_ERROR, status
    if outcome == Outcome.OK:
        return (Outcome.STREAM_BROKEN, 0) if truncated else (outcome, status)
    if outcome == Outcome.GRPC_ERROR:
        return Outcome.STREAM_ERROR, status
    if outcome in (Outcome.MALFORMED, Outcome.HTTP_ERROR):
        return Outcome.STREAM_BROKEN, status
    if outcome in _CUT_OUTCOMES:
        return Outcome.STREAM_CUT, status
    return outcome, status


class GrpcStreamPool(GrpcPool):
    """``ModelStreamInfer`` calls (one request per HTTP/2 stream) over a few HTTP/2 connections, every
    message stamped as a chunk; implements :class:`~satpoint.transports.base.HotTransport` like
    :class:`~satpoint.transports.grpc.wire.GrpcPool`, whose connection handling it keeps."""

    conn_type = _StreamConn

    def __init__(
        self,
        rec: Records,
        on_free: Callable[[], None],
        host: str,
        port: int,
        messages: Sequence[bytes],
        max_inflight: int,
        *,
        decoder: Decoder = "mlserver",
        connections: int | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        authority: str | None = None,
    ) -> None:
        if decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, got {decoder!r}")
        super().__init__(
            rec,
            on_free,
            host,
            port,
            [ask_final_response(m) for m in messages] if decoder == "triton" else messages,
            max_inflight,
            connections=connections,
            metadata=metadata,
            ssl=ssl,
            server_hostname=server_hostname,
            authority=authority,
            method=STREAM_METHOD,
        )
        self.decoder: Decoder = decoder
        self.stamp: StreamStamper = attach(rec)

    def rebind(self) -> None:
        super().rebind()
        if self.rec.stream is None or len(self.rec.stream) != len(self.rec):
            self.stamp = attach(self.rec)  # the closed loop grew the columns
        else:
            self.stamp.rebind()

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "kind": "grpc_stream", "decoder": self.decoder}


def grpc_stream_factory(
    host: str,
    port: int,
    messages: Sequence[bytes],
    max_inflight: int,
    *,
    decoder: Decoder = "mlserver",
    connections: int | None = None,
    metadata: Sequence[tuple[str, str]] = (),
    ssl: _ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> Callable[[Records, Callable[[], None]], GrpcStreamPool]:
    """A :data:`~satpoint.transports.base.TransportFactory` for the dispatcher."""

    def make(rec: Records, on_free: Callable[[], None]) -> GrpcStreamPool:
        return GrpcStreamPool(
            rec,
            on_free,
            host,
            port,
            messages,
            max_inflight,
            decoder=decoder,
            connections=connections,
            metadata=metadata,
            ssl=ssl,
            server_hostname=server_hostname,
        )

    return make


@dataclass(frozen=True)
class StreamAnswer:
    """One test stream: its outcome, status, chunks, and times (seconds after sending) of its first chunk
    and end."""

    outcome: Outcome
    status: int
    chunks: int
    first_s: float | None
    done_s: float | None


def stream_once(
    host: str,
    port: int,
    message: bytes,
    *,
    decoder: Decoder = "mlserver",
    metadata: Sequence[tuple[str, str]] = (),
    ssl: _ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    timeout_s: float = 30.0,
) -> StreamAnswer:
    """One ``ModelStreamInfer`` on the hot path's own transport, to check a target before the run (the
    same HTTP/2 client, TLS included)."""

    async def run() -> StreamAnswer:
        rec = Records.empty(np.zeros(1))
        pool = GrpcStreamPool(
            rec,
            lambda: None,
            host,
            port,
            [message],
            1,
            decoder=decoder,
            connections=1,
            metadata=metadata,
            ssl=ssl,
            server_hostname=server_hostname,
        )
        try:
            await pool.prepare(1)
            if not pool.try_send(0, 0):
                raise ConnectionError("no HTTP/2 stream available for the test request")
            deadline = perf() + timeout_s
            while pool.inflight() and perf() < deadline:
                await asyncio.sleep(0.002)
            if pool.inflight():
                pool.expire(perf() + 2 * timeout_s, timeout_s)
        finally:
            with contextlib.suppress(Exception):
                await pool.close()
        stream = rec.stream
        assert stream is not None
        sent = float(rec.sent[0])
        first = float(stream.first_s[0])
        done = float(rec.done[0])
        return StreamAnswer(
            Outcome(int(rec.outcome[0])),
            int(rec.status[0]),
            int(stream.chunks[0]),
            None if np.isnan(first) else first - sent,
            None if np.isnan(done) else done - sent,
        )

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from a running loop: a loop of its own
        return pool.submit(asyncio.run, run()).result()
