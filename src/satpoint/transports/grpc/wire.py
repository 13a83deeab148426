"""Open Inference Protocol over gRPC: the hot path, unary calls on a raw asyncio HTTP/2 protocol.

``grpc.aio`` costs 120-330 µs of CPU per unary call (DESIGN.md §3) and falls behind at a few thousand
requests per second on one core, which would make gRPC look slower than the server it measures.  A
unary gRPC call is a small, fixed exchange of HTTP/2 frames, so this module speaks them itself:

* request: one HEADERS frame (END_HEADERS) and one DATA frame (END_STREAM) holding the gRPC
  length-prefixed ``ModelInferRequest``.  The header block (HPACK literals *without indexing*, so it
  never touches the HPACK dynamic table and is valid on every connection) and the DATA payloads are
  encoded once, before the run; sending is one ``transport.write`` of a join with the stream id.
* response: HEADERS (``:status``), DATA, then trailers (``grpc-status``) with END_STREAM, or a
  trailers-only HEADERS.  Response header blocks are HPACK-decoded with the ``hpack`` library; a block
  made only of indexed fields (the steady state: servers index their repeated headers) does not change
  the dynamic table (nor do literals without indexing, like grpc-python's empty ``grpc-message``), so
  its decoded summary is cached by its bytes until a block that does change it.
  DATA payloads are counted (flow control) but not parsed: the outcome is the gRPC status.
* many concurrent streams per connection (capped by the server's MAX_CONCURRENT_STREAMS), several
  connections round-robin; the in-flight cap is ``max_inflight`` streams in all.  ``connections=None``
  (automatic) starts with two and adds connections while the server's MAX_CONCURRENT_STREAMS is what
  binds (every connection full, fewer than ``max_inflight`` streams possible: behind an ingress it is
  often 100-128), up to ``MAX_AUTO_CONNECTIONS``; a number fixes the count.  ``stats()`` reports the
  effective cap (connections x streams).
* flow control: the client advertises a 1 GiB receive window (stream and connection) and returns
  consumed connection credit in large WINDOW_UPDATEs; sending honours the server's windows and
  MAX_FRAME_SIZE (DATA beyond the window waits for WINDOW_UPDATE).  SETTINGS are acknowledged, PINGs
  answered, GOAWAY honoured (new streams go elsewhere).
* streams the server did not process are sent once more, on another stream (``Records.retried``, the
  latency still from the intended time): those refused with RST_STREAM(REFUSED_STREAM) and those above a
  GOAWAY's last stream id (RFC 9113 §8.7 says both are safe to retry).  A second refusal is UNAVAILABLE.
* TLS: ``ssl=`` an ``ssl.SSLContext`` (ALPN ``h2`` is set), on the same fast path.

Outcomes: grpc-status 0 -> OK; another grpc-status -> GRPC_ERROR (status = the gRPC code); a
non-200 ``:status`` without grpc-status -> HTTP_ERROR (status = HTTP code), whether the stream ends in
trailers-only HEADERS or in DATA with END_STREAM (a proxy's error page); RST_STREAM -> GRPC_ERROR
with the code gRPC maps it to; refused connect -> CONN_REFUSED; a connect that fails for want of the
generator's own descriptors or buffers (EMFILE, ENFILE, ENOBUFS) -> GENERATOR_RESOURCES; a lost
connection -> CONN_RESET; unparseable frames or header blocks, or a 200 ended without a grpc-status ->
MALFORMED; ``expire`` -> TIMEOUT and RST_STREAM(CANCEL).

Why this module is long: it is one HTTP/2 connection state machine (frames, flow control, settings,
GOAWAY, TLS) whose receive path is the hot path; splitting it would spread one protocol's state over
modules and add attribute lookups per frame, which the CPU-per-request benchmark pays for.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as _ssl
import struct
import time
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hpack import Decoder, HPACKError

from satpoint.errors import RunFailed, TargetConnectFailed
from satpoint.metrics.records import Outcome, Records, connect_failure
from satpoint.transports.base import generator_resources_message
from satpoint.transports.grpc.codec import grpc_frame
from satpoint.transports.grpc.grpc_proto import method_path
from satpoint.transports.tls import TlsOptions

perf = time.perf_counter

# HTTP/2 frame types and flags (RFC 9113 §6)
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_S_HEADER_TABLE_SIZE, _S_ENABLE_PUSH, _S_MAX_STREAMS, _S_INITIAL_WINDOW, _S_MAX_FRAME = 1, 2, 3, 4, 5

#: receive window advertised for every stream and for the connection
RECV_WINDOW = 1 << 30
_ACK_AT = RECV_WINDOW // 4  # connection credit returned once this much was received
#: DATA frames are cut at this size (every peer accepts 16 KiB frames)
MAX_SEND_FRAME = 16384
_DEFAULT_WINDOW = 65535
_MAX_SID = (1 << 31) - 1
_RETIRE_SID = _MAX_SID - 1_000_000

_FRAME = struct.Struct(">BHBBI")  # length (24 bits as 8 + 16), type, flags, stream id

#: HTTP/2 RST_STREAM error code -> gRPC status (gRPC's PROTOCOL-HTTP2.md)
RST_TO_GRPC = {0: 13, 1: 13, 2: 13, 3: 13, 4: 13, 6: 13, 7: 14, 8: 1, 9: 13, 10: 13, 11: 8, 12: 7}
GRPC_UNAVAILABLE = 14
RST_CANCEL = 8
RST_REFUSED_STREAM = 7
#: automatic connection count: at most this many connections (``connections=`` fixes any number)
MAX_AUTO_CONNECTIONS = 64
#: connections an automatic pool starts with
AUTO_START_CONNECTIONS = 2


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return _FRAME.pack(n >> 16, n & 0xFFFF, ftype, flags, sid) + payload


# HPACK encoding of the request headers (RFC 7541), literals without indexing and without Huffman -----
def _hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_str(s: str) -> bytes:
    b = s.encode("latin-1")
    return _hpack_int(len(b), 7, 0) + b


_STATIC_NAME = {":authority": 1, ":path": 4, "content-type": 31, "user-agent": 58}


def _literal(name: str, value: str) -> bytes:
    index = _STATIC_NAME.get(name)
    if index is not None:
        return _hpack_int(index, 4, 0x00) + _hpack_str(value)
    return b"\x00" + _hpack_str(name) + _hpack_str(value)


def encode_request_headers(
    path: str,
    authority: str,
    *,
    tls: bool = False,
    metadata: Sequence[tuple[str, str]] = (),
    user_agent: str = "satpoint",
) -> bytes:
    """The HPACK block of a gRPC unary request; stateless, so one block serves every stream."""
    parts = [b"\x83", b"\x87" if tls else b"\x86"]  # :method POST, :scheme https|http (static table)
    parts.append(_literal(":path", path))
    parts.append(_literal(":authority", authority))
    parts.append(_literal("content-type", "application/grpc"))
    parts.append(_literal("te", "trailers"))
    parts.append(_literal("user-agent", user_agent))
    parts.extend(_literal(k, v) for k, v in metadata)
    return b"".join(parts)


def _hpack_skip_int(block: bytes, i: int, prefix_bits: int) -> tuple[int, int]:
    """Decode an HPACK integer at ``i``: (value, index after it)."""
    limit = (1 << prefix_bits) - 1
    value = block[i] & limit
    i += 1
    if value < limit:
        return value, i
    shift = 0
    while True:
        b = block[i]
        i += 1
        value += (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def table_neutral(block: bytes) -> bool:
    """True if decoding the block leaves the HPACK dynamic table unchanged: it holds only indexed
    fields and literals *without* indexing (or never indexed), no incremental indexing and no table
    size update.  Such a block decodes to the same headers for as long as the table is unchanged."""
    i, n = 0, len(block)
    while i < n:
        b = block[i]
        if b & 0x80:  # indexed field
            _, i = _hpack_skip_int(block, i, 7)
        elif b & 0xE0 == 0:  # literal without indexing / never indexed (0000xxxx, 0001xxxx)
            index, i = _hpack_skip_int(block, i, 4)
            if index == 0:
                length, i = _hpack_skip_int(block, i, 7)  # the name
                i += length
            length, i = _hpack_skip_int(block, i, 7)  # the value
            i += length
        else:  # incremental indexing (01xxxxxx) or a dynamic table size update (001xxxxx)
            return False
    return i == n


@dataclass(frozen=True, slots=True)
class _Payload:
    body: bytes  # the gRPC length-prefixed message: the DATA payload
    dprefix: bytes  # first 5 bytes of the single DATA frame header (END_STREAM), when it fits one frame


def _payload(message_bytes: bytes) -> _Payload:
    body = grpc_frame(message_bytes)
    n = len(body)
    dprefix = _FRAME.pack(n >> 16, n & 0xFFFF, DATA, END_STREAM, 0)[:5] if n <= MAX_SEND_FRAME else b""
    return _Payload(body, dprefix)


class _Conn(asyncio.Protocol):
    """One HTTP/2 connection carrying many unary gRPC calls."""

    def __init__(self, pool: GrpcPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.connected = False
        self.dead = False
        self.goaway = False
        self.settings_seen: asyncio.Future[None] = pool._loop.create_future()
        self.pending: list[bytes] = []  # writes before the connection is up
        self.next_sid = 1
        self.streams: dict[int, int] = {}  # stream id -> request index (insertion = send order)
        self.http_status: dict[int, int] = {}  # streams whose response :status was not 200
        self.buf = b""
        self.cont: tuple[int, int, bytearray] | None = None  # HEADERS awaiting CONTINUATION
        self.decoder = Decoder()
        self.cache: dict[bytes, tuple[int, int]] = {}
        self.hits = 0  # header blocks answered from ``cache`` (GrpcPool.stats sums them)
        self.recv_unacked = 0
        self.send_window = _DEFAULT_WINDOW  # connection-level credit the server gave us
        self.peer_stream_window = _DEFAULT_WINDOW
        self.peer_max_frame = MAX_SEND_FRAME
        self.max_streams = min(pool._server_streams, pool.max_inflight) if pool._server_streams else pool.max_inflight
        self.queue: deque[tuple[int, memoryview]] = deque()  # DATA waiting for flow-control credit
        self.stream_windows: dict[int, int] = {}  # send credit of streams with queued DATA
        self.hhead = pool._hhead  # HEADERS frame header minus the stream id
        self.hblock = pool._hblock
        self.now = 0.0
        self.reads_data = False  # DATA payloads go to ``_on_data`` (the stream subclass); unary calls count them

    # writes ------------------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        t = self.transport
        if t is not None:
            if self.pool._corked:
                self.pool._cork_buf.append(self)
                self.pending.append(data)
            else:
                t.write(data)
        else:
            self.pending.append(data)

    def flush_pending(self) -> None:
        if self.pending and self.transport is not None:
            data = b"".join(self.pending)
            self.pending.clear()
            self.transport.write(data)

    def has_room(self) -> bool:
        return not (self.dead or self.goaway) and len(self.streams) < self.max_streams and self.next_sid < _RETIRE_SID

    def send_request(self, sid: int, p: _Payload) -> None:
        sidb = sid.to_bytes(4, "big")
        body = p.body
        n = len(body)
        if p.dprefix and not self.queue and n <= self.send_window and n <= self.peer_stream_window:
            self.send_window -= n
            data = b"".join((self.hhead, sidb, self.hblock, p.dprefix, sidb, body))
            t = self.transport
            if t is not None and not self.pool._corked:
                t.write(data)
            else:
                self.write(data)
            return
        self.write(self.hhead + sidb + self.hblock)
        self.stream_windows[sid] = self.peer_stream_window
        self.queue.append((sid, memoryview(body)))
        self._drain_queue()

    def _drain_queue(self) -> None:
        """Send queued DATA as far as the connection and stream windows allow."""
        queue = self.queue
        stalled = 0
        while queue and self.send_window > 0 and stalled < len(queue):
            sid, mv = queue[0]
            if sid not in self.streams:
                queue.popleft()
                self.stream_windows.pop(sid, None)
                continue
            credit = min(len(mv), self.send_window, self.stream_windows.get(sid, 0), self.peer_max_frame)
            if credit <= 0:
                queue.rotate(-1)
                stalled += 1
                continue
            stalled = 0
            last = credit == len(mv)
            self.write(frame(DATA, END_STREAM if last else 0, sid, bytes(mv[:credit])))
            self.send_window -= credit
            if last:
                queue.popleft()
                self.stream_windows.pop(sid, None)
            else:
                self.stream_windows[sid] -= credit
                queue[0] = (sid, mv[credit:])

    # asyncio.Protocol ----------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sslobj = transport.get_extra_info("ssl_object")
        if sslobj is not None and sslobj.selected_alpn_protocol() != "h2":
            self.pool.protocol_errors += 1
            self.fail_all(Outcome.CONN_ERROR)
            transport.close()
            return
        self.connected = True
        settings = struct.pack(">HIHI", _S_ENABLE_PUSH, 0, _S_INITIAL_WINDOW, RECV_WINDOW)
        hello = PREFACE + frame(SETTINGS, 0, 0, settings)
        hello += frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", RECV_WINDOW - _DEFAULT_WINDOW))
        self.pending.insert(0, hello)
        self.flush_pending()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connected = False
        self.transport = None
        self.fail_all(Outcome.CONN_RESET)
        if not self.settings_seen.done():
            self.settings_seen.set_exception(ConnectionResetError("connection closed before HTTP/2 SETTINGS"))
            self.settings_seen.exception()  # mark retrieved

    def fail_all(self, outcome: int, status: int = 0) -> None:
        """Finish every stream of this connection with ``outcome``; the connection is unusable after."""
        self.dead = True
        pool = self.pool
        if self.streams:
            now = perf()
            rec = pool.rec
            for idx in self.streams.values():
                rec.done[idx] = now
                rec.outcome[idx] = outcome
                rec.status[idx] = status
            pool._inflight -= len(self.streams)
            self.streams.clear()
            self.queue.clear()
            self.stream_windows.clear()
            pool._forget(self)
            if not pool._closing:
                pool.on_free()
        else:
            pool._forget(self)

    def data_received(self, data: bytes) -> None:
        if self.buf:
            data = self.buf + data
            self.buf = b""
        self.now = perf()
        n = len(data)
        pos = 0
        finished = 0
        unpack = _FRAME.unpack_from
        reads_data = self.reads_data
        try:
            while pos + 9 <= n:
                hi, lo, ftype, flags, sid = unpack(data, pos)
                end = pos + 9 + ((hi << 16) | lo)
                if end > n:
                    break
                if ftype == DATA:
                    self.recv_unacked += end - pos - 9
                    if reads_data:
                        self._on_data(sid & _MAX_SID, data, pos + 9, end, flags)
                    if flags & END_STREAM:  # a response without trailers: no grpc-status
                        finished += self._ended_without_trailers(sid & _MAX_SID)
                elif ftype == HEADERS:
                    finished += self._on_headers(data, pos + 9, end, flags, sid & _MAX_SID)
                elif ftype == CONTINUATION:
                    finished += self._on_continuation(data[pos + 9 : end], flags, sid & _MAX_SID)
                else:
                    finished += self._on_control(ftype, flags, sid & _MAX_SID, data[pos + 9 : end])
                pos = end
        except (HPACKError, ValueError, IndexError, struct.error):
            self.pool.protocol_errors += 1
            self.fail_all(Outcome.MALFORMED)
            if self.transport is not None:
                self.transport.abort()
            return
        if pos < n:
            self.buf = data[pos:]
        if self.recv_unacked > _ACK_AT:
            self.write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.recv_unacked)))
            self.recv_unacked = 0
        if finished and not self.pool._closing:
            self.pool._freed(self)

    # frames ----------------------------------------------------------------------------------------------
    def _on_data(self, sid: int, data: bytes, start: int, end: int, flags: int) -> None:
        """The payload ``data[start:end]`` of a DATA frame of stream ``sid`` (``flags`` its frame flags, padding
        included), before its END_STREAM is handled; called only when ``reads_data`` is set (the seam of
        ``grpc_stream``: unary calls never read a payload, so their receive loop pays one local test)."""

    def _on_headers(self, data: bytes, start: int, end: int, flags: int, sid: int) -> int:
        if flags & PADDED:
            end -= data[start]
            start += 1
        if flags & PRIORITY_FLAG:
            start += 5
        block = data[start:end]
        if not flags & END_HEADERS:
            self.cont = (sid, flags, bytearray(block))
            return 0
        return self._headers_done(sid, flags, block)

    def _on_continuation(self, payload: bytes, flags: int, sid: int) -> int:
        cont = self.cont
        if cont is None or cont[0] != sid:
            raise ValueError("unexpected CONTINUATION")
        cont[2].extend(payload)
        if not flags & END_HEADERS:
            return 0
        self.cont = None
        return self._headers_done(sid, cont[1], bytes(cont[2]))

    def _summary(self, block: bytes) -> tuple[int, int]:
        """(grpc-status or -1, :status or -1) of a header block; decoded once per distinct block."""
        hit = self.cache.get(block)
        if hit is not None:
            self.hits += 1
            return hit
        self.pool.hpack_misses += 1
        grpc_status = http_status = -1
        for name, value in self.decoder.decode(block, raw=True):
            if name == b"grpc-status":
                grpc_status = int(value)
            elif name == b":status":
                http_status = int(value)
        result = (grpc_status, http_status)
        if table_neutral(block):
            self.cache[block] = result
        else:
            self.cache.clear()  # the dynamic table changed: cached blocks may now mean something else
        return result

    def _headers_done(self, sid: int, flags: int, block: bytes) -> int:
        hit = self.cache.get(block)  # always decoded (or known to leave the HPACK state as it is)
        if hit is None:
            grpc_status, http_status = self._summary(block)
        else:
            self.hits += 1
            grpc_status, http_status = hit
        if sid not in self.streams:
            return 0
        if not flags & END_STREAM:
            if http_status not in (-1, 200):
                self.http_status[sid] = http_status
            return 0
        if http_status == -1:
            http_status = self.http_status.pop(sid, 200)
        if grpc_status == 0 and http_status == 200:
            return self._finish(sid, Outcome.OK, 0)
        if grpc_status >= 0:
            return self._finish(sid, Outcome.GRPC_ERROR, grpc_status)
        if http_status != 200:
            return self._finish(sid, Outcome.HTTP_ERROR, http_status)
        return self._finish(sid, Outcome.MALFORMED, 0)

    def _ended_without_trailers(self, sid: int) -> int:
        """A stream ended by DATA without trailers: a proxy's error page (nginx ``grpc_pass`` answers 502 or
        504 so) is its HTTP status; a 200 without a grpc-status is not gRPC."""
        status = self.http_status.pop(sid, 0)
        return self._finish(sid, Outcome.HTTP_ERROR if status else Outcome.MALFORMED, status)

    def _finish(self, sid: int, outcome: int, status: int) -> int:
        idx = self.streams.pop(sid, None)
        if idx is None:
            return 0
        pool = self.pool
        pool._done[idx] = self.now
        pool._outcome[idx] = outcome
        pool._status[idx] = status
        pool._inflight -= 1
        if self.stream_windows:
            self.stream_windows.pop(sid, None)
        return 1

    def _unprocessed(self, sid: int) -> int:
        """A stream the server did not process: send it once more elsewhere.  Returns 1 if it finished here
        instead (already retried, or nowhere to send it: UNAVAILABLE), else 0."""
        idx = self.streams.pop(sid, None)
        if idx is None:
            return 0
        self.http_status.pop(sid, None)
        if self.stream_windows:
            self.stream_windows.pop(sid, None)
        pool = self.pool
        if pool._resend(idx):
            return 0
        rec = pool.rec
        rec.done[idx] = self.now
        rec.outcome[idx] = Outcome.GRPC_ERROR
        rec.status[idx] = GRPC_UNAVAILABLE
        pool._inflight -= 1
        return 1

    def _on_control(self, ftype: int, flags: int, sid: int, payload: bytes) -> int:
        if ftype == SETTINGS:
            if not flags & ACK:
                self._apply_settings(payload)
                self.write(frame(SETTINGS, ACK, 0))
                if not self.settings_seen.done():
                    self.settings_seen.set_result(None)
        elif ftype == WINDOW_UPDATE:
            inc = int.from_bytes(payload[:4], "big") & _MAX_SID
            if sid == 0:
                self.send_window += inc
            elif sid in self.stream_windows:
                self.stream_windows[sid] += inc
            if self.queue:
                self._drain_queue()
        elif ftype == PING:
            if not flags & ACK:
                self.write(frame(PING, ACK, 0, payload))
        elif ftype == RST_STREAM:
            code = int.from_bytes(payload[:4], "big")
            self.http_status.pop(sid, None)
            if code == RST_REFUSED_STREAM:
                self.pool.refused_streams += 1
                return self._unprocessed(sid)
            return self._finish(sid, Outcome.GRPC_ERROR, RST_TO_GRPC.get(code, 13))
        elif ftype == GOAWAY:
            last_sid = int.from_bytes(payload[:4], "big") & _MAX_SID
            self.goaway = True
            self.pool.goaways += 1
            finished = sum(self._unprocessed(s) for s in list(self.streams) if s > last_sid)
            if not self.streams and self.transport is not None:
                self.transport.close()  # nothing left to wait for on this connection
            return finished
        # PRIORITY, PUSH_PROMISE (push is disabled) and unknown frame types are ignored
        return 0

    def _apply_settings(self, payload: bytes) -> None:
        for off in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, off)
            if key == _S_MAX_STREAMS:
                self.max_streams = min(value, self.pool.max_inflight)
                self.pool._server_streams = value
            elif key == _S_INITIAL_WINDOW:
                delta = value - self.peer_stream_window
                self.peer_stream_window = value
                for s in self.stream_windows:
                    self.stream_windows[s] += delta
            elif key == _S_MAX_FRAME:
                self.peer_max_frame = min(value, MAX_SEND_FRAME)
            elif key == _S_HEADER_TABLE_SIZE and value < 4096 and self.hblock is self.pool._hblock:
                # acknowledge a smaller HPACK table: our blocks start with a size update to 0 from now on
                self.hblock = b"\x20" + self.pool._hblock
                n = len(self.hblock)
                self.hhead = _FRAME.pack(n >> 16, n & 0xFFFF, HEADERS, END_HEADERS, 0)[:5]
        if self.queue:
            self._drain_queue()


class GrpcPool:
    """Unary ``ModelInfer`` calls over a few HTTP/2 connections; implements
    :class:`~satpoint.transports.base.HotTransport`.

    ``messages`` are serialized ``ModelInferRequest`` s (see ``grpc_codec.encode_infer_request``);
    ``payload_idx`` picks one.  ``connections`` HTTP/2 connections are opened by ``prepare`` (the
    dispatcher's ``warm_connections`` is a REST notion: streams, not connections, carry concurrency
    here) and replaced when they die or receive GOAWAY.
    """

    #: the connection class (``grpc_stream`` opens its stream connections through the same pool logic)
    conn_type: type[_Conn] = _Conn

    def __init__(
        self,
        rec: Records,
        on_free: Callable[[], None],
        host: str,
        port: int,
        messages: Sequence[bytes],
        max_inflight: int,
        *,
        connections: int | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        authority: str | None = None,
        method: str = "ModelInfer",
    ) -> None:
        if max_inflight < 1 or (connections is not None and connections < 1):
            raise ValueError("max_inflight and connections must be >= 1")
        self.rec = rec
        self.on_free = on_free
        self.host = host
        self.port = port
        self.max_inflight = max_inflight
        self._views()
        self.fixed = connections is not None  # else automatic: grow while MAX_CONCURRENT_STREAMS binds
        self.connections = connections if connections is not None else AUTO_START_CONNECTIONS
        self.ssl = ssl
        self.server_hostname = server_hostname
        self._payloads = [_payload(m) for m in messages]
        self._hblock = encode_request_headers(
            method_path(method), authority or _authority(host, port), tls=ssl is not None, metadata=metadata
        )
        n = len(self._hblock)
        self._hhead = _FRAME.pack(n >> 16, n & 0xFFFF, HEADERS, END_HEADERS, 0)[:5]
        self._loop = asyncio.get_event_loop()
        self._conns: list[_Conn] = []
        self._rr = 0
        self._inflight = 0
        self._server_streams: int | None = None  # the server's MAX_CONCURRENT_STREAMS, once it said
        self._pay = array("i", bytes(4 * len(rec)))  # request index -> payload index, for resending
        self.peak_connections = 0
        self.retries = 0
        self.refused_streams = 0
        self._closing = False
        self._corked = False
        self._cork_buf: list[_Conn] = []
        self.connect_errors = 0
        self.protocol_errors = 0
        self.goaways = 0
        self.hpack_hits = 0
        self.hpack_misses = 0

    # connections -------------------------------------------------------------------------------------
    def _open(self) -> _Conn:
        conn = self.conn_type(self)
        self._conns.append(conn)
        usable = sum(1 for c in self._conns if not (c.dead or c.goaway))
        self.peak_connections = max(self.peak_connections, usable)
        task = self._loop.create_task(self._connect(conn))
        task.add_done_callback(_quiet)
        return conn

    async def _connect(self, conn: _Conn) -> None:
        try:
            if self.ssl is not None:
                await self._loop.create_connection(
                    lambda: conn,
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.server_hostname or self.host,
                )
            else:
                await self._loop.create_connection(lambda: conn, self.host, self.port)
        except OSError as e:  # ssl.SSLError included; refused, out of descriptors (the generator's), other
            self._connect_failed(conn, connect_failure(e), e)

    def _connect_failed(self, conn: _Conn, outcome: Outcome, exc: BaseException) -> None:
        self.connect_errors += 1
        conn.pending.clear()
        conn.fail_all(outcome)
        if not conn.settings_seen.done():
            conn.settings_seen.set_exception(exc)
            conn.settings_seen.exception()

    def _forget(self, conn: _Conn) -> None:
        with contextlib.suppress(ValueError):
            self._conns.remove(conn)
            self.hpack_hits += conn.hits  # its count, once (it is in the list at most once)
            conn.hits = 0

    def _pick(self) -> _Conn | None:
        conns = self._conns
        for _ in range(len(conns)):
            self._rr += 1
            conn = conns[self._rr % len(conns)]
            if conn.has_room():
                return conn
        usable = sum(1 for c in conns if not (c.dead or c.goaway))
        want = self.wanted_connections()
        if usable < want and not self._closing:
            if len(conns) > 4 * want:  # dying connections still draining: let them finish
                return None
            return self._open()
        return None

    def wanted_connections(self) -> int:
        """Usable connections to keep: the fixed number; automatically, enough for ``max_inflight`` streams
        under the server's MAX_CONCURRENT_STREAMS (at least the first ones, at most MAX_AUTO_CONNECTIONS)."""
        streams = self._server_streams
        if self.fixed or streams is None:
            return self.connections
        need = -(-self.max_inflight // max(streams, 1))
        return min(MAX_AUTO_CONNECTIONS, max(self.connections, need))

    def _resend(self, idx: int) -> bool:
        """Send request ``idx`` (a stream the server did not process) once more on a stream with room; it
        keeps its in-flight slot and its times.  False if it was already resent or there is no room."""
        rec = self.rec
        if self._closing or rec.retried[idx]:
            return False
        conn = self._pick()
        if conn is None:
            return False
        sid = conn.next_sid
        conn.next_sid = sid + 2
        conn.streams[sid] = idx
        rec.retried[idx] = True
        self.retries += 1
        conn.send_request(sid, self._payloads[self._pay[idx]])
        return True

    def _views(self) -> None:
        """memoryviews of the record columns the hot path writes: a fraction of numpy's item-set cost."""
        rec = self.rec
        self._sent = _view(rec.sent)
        self._done = _view(rec.done)
        self._outcome = _view(rec.outcome)
        self._status = _view(rec.status)

    def rebind(self) -> None:
        """The record columns grew (closed loop): new views of them, and a longer payload index."""
        self._views()
        n = len(self.rec)
        if n > len(self._pay):
            self._pay.extend(array("i", bytes(4 * (n - len(self._pay)))))

    async def prepare(self, warm_connections: int) -> None:
        """Open the connections and wait for each server's SETTINGS (errors surface here)."""
        conns = [self._open() for _ in range(self.connections)]
        results = await asyncio.gather(
            *(asyncio.wait_for(asyncio.shield(c.settings_seen), 10.0) for c in conns), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors and len(errors) == len(results):
            err = errors[0]
            if connect_failure(err) is Outcome.GENERATOR_RESOURCES:
                raise RunFailed(generator_resources_message(self.host, self.port, err))
            raise TargetConnectFailed(f"cannot open a gRPC (HTTP/2) connection to {self.host}:{self.port}: {err!r}")

    # HotTransport ------------------------------------------------------------------------------------------
    def try_send(self, idx: int, payload_idx: int) -> bool:
        if self._inflight >= self.max_inflight:
            return False
        conns = self._conns
        conn: _Conn | None = None
        if conns:
            rr = self._rr = self._rr + 1
            conn = conns[rr % len(conns)]
            # _Conn.has_room, inline
            if conn.dead or conn.goaway or len(conn.streams) >= conn.max_streams or conn.next_sid >= _RETIRE_SID:
                conn = self._pick()
        else:
            conn = self._pick()
        if conn is None:
            return False
        sid = conn.next_sid
        conn.next_sid = sid + 2
        conn.streams[sid] = idx
        self._pay[idx] = payload_idx
        self._inflight += 1
        self._sent[idx] = perf()
        conn.send_request(sid, self._payloads[payload_idx])
        return True

    def _freed(self, conn: _Conn) -> None:
        """Streams finished on ``conn``: let the dispatcher send more, coalescing its writes."""
        self._corked = True
        try:
            self.on_free()
        finally:
            self._corked = False
            for c in self._cork_buf:
                c.flush_pending()
            self._cork_buf.clear()
        if conn.goaway and not conn.streams and conn.transport is not None:
            conn.transport.close()

    def inflight(self) -> int:
        return self._inflight

    def expire(self, now: float, timeout_s: float) -> None:
        limit = now - timeout_s
        sent = self.rec.sent
        freed = False
        for conn in list(self._conns):
            expired = []
            for sid, idx in conn.streams.items():  # in send order: stop at the first young one
                if sent[idx] >= limit:
                    break
                expired.append(sid)
            if not expired:
                continue
            conn.now = now
            for sid in expired:
                conn._finish(sid, Outcome.TIMEOUT, 0)
                conn.http_status.pop(sid, None)
                conn.write(frame(RST_STREAM, 0, sid, struct.pack(">I", RST_CANCEL)))
            freed = True
        if freed and not self._closing:
            self.on_free()

    def abort_all(self, outcome: int) -> None:
        self._closing = True
        self._fold_hits()
        for conn in list(self._conns):
            conn.fail_all(outcome)
            if conn.transport is not None:
                conn.transport.abort()
        self._conns.clear()

    async def close(self) -> None:
        self._closing = True
        self._fold_hits()
        for conn in list(self._conns):
            if conn.streams:
                conn.fail_all(Outcome.UNFINISHED)
            if conn.transport is not None:
                conn.flush_pending()
                conn.transport.write(frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0)))
                conn.transport.close()
        self._conns.clear()
        await asyncio.sleep(0)

    def _fold_hits(self) -> None:
        for conn in self._conns:
            self.hpack_hits += conn.hits
            conn.hits = 0

    # diagnostics -----------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """What the pool did, for the results file (``generator.transport``): among it the effective in-flight
        cap, ``min(max_inflight, connections x streams per connection)``."""
        streams = self._server_streams
        per_conn = min(streams, self.max_inflight) if streams is not None else self.max_inflight
        conns = max(self.peak_connections, 1)
        return {
            "kind": "grpc",
            "connections_mode": "fixed" if self.fixed else "auto",
            "connections": conns,
            "server_max_concurrent_streams": streams,
            "stream_cap": conns * per_conn,
            "effective_cap": min(self.max_inflight, conns * per_conn),
            "max_inflight": self.max_inflight,
            "retries": self.retries,
            "refused_streams": self.refused_streams,
            "open_connections": len(self._conns),
            "connect_errors": self.connect_errors,
            "protocol_errors": self.protocol_errors,
            "goaways": self.goaways,
            "hpack_cache_hits": self.hpack_hits + sum(c.hits for c in self._conns),
            "hpack_decodes": self.hpack_misses,
        }


def _view(column: Any) -> Any:
    """A writable memoryview of a numpy column (its format follows the dtype: d, b, i)."""
    return memoryview(column)


def _authority(host: str, port: int) -> str:
    """``:authority`` for ``host:port`` (an IPv6 literal in brackets, RFC 3986 §3.2.2)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _quiet(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


def grpc_factory(
    host: str,
    port: int,
    messages: Sequence[bytes],
    max_inflight: int,
    *,
    connections: int | None = None,
    metadata: Sequence[tuple[str, str]] = (),
    ssl: _ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> Callable[[Records, Callable[[], None]], GrpcPool]:
    """A :data:`~satpoint.transports.base.TransportFactory` for the dispatcher."""

    def make(rec: Records, on_free: Callable[[], None]) -> GrpcPool:
        return GrpcPool(
            rec,
            on_free,
            host,
            port,
            messages,
            max_inflight,
            connections=connections,
            metadata=metadata,
            ssl=ssl,
            server_hostname=server_hostname,
        )

    return make


def client_ssl_context(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None, verify: bool = True
) -> _ssl.SSLContext:
    """A TLS client context for gRPC: ALPN ``h2``, optional CA bundle and client certificate (mTLS)."""
    return TlsOptions(ca_file, cert_file, key_file, verify).context(alpn=("h2",))
