"""One gRPC unary call on a blocking socket that speaks HTTP/2 itself: the control calls over TLS.

grpcio's channels verify certificates with their own TLS stack and roots and cannot skip verification,
so a ``grpcs://`` target's pre-flight (readiness, metadata, the test request) goes through this module
with the very ``ssl.SSLContext`` the hot path (``grpc_wire``) uses: what the pre-flight accepts, the test
accepts, ``--insecure`` included.  One connection per call, stream 1, flow control honoured both ways
(a 1 GiB receive window is advertised; request DATA waits for the server's credit).
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Sequence
from urllib.parse import unquote

from hpack import Decoder, HPACKError

from satpoint.transports.grpc.codec import grpc_frame
from satpoint.transports.grpc.wire import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    MAX_SEND_FRAME,
    PADDED,
    PING,
    PREFACE,
    PRIORITY_FLAG,
    RECV_WINDOW,
    RST_STREAM,
    RST_TO_GRPC,
    SETTINGS,
    WINDOW_UPDATE,
    encode_request_headers,
    frame,
)

_DEFAULT_WINDOW = 65535
_S_ENABLE_PUSH, _S_INITIAL_WINDOW, _S_MAX_FRAME = 2, 4, 5
_HEAD = struct.Struct(">BHBBI")
#: gRPC's mapping of an HTTP status without grpc-status (gRPC's http-grpc-status-mapping.md)
_HTTP_TO_GRPC = {400: 13, 401: 16, 403: 7, 404: 12, 429: 14, 502: 14, 503: 14, 504: 14}
UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL = 14, 4, 13


class UnaryError(Exception):
    """The call ended with a gRPC status other than OK (``code``, ``details``)."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(f"gRPC status {code}: {details}")
        self.code = code
        self.details = details


class ClosedEarly(UnaryError, ConnectionError):
    """The server closed the connection before sending a single frame (over TLS: it refused us)."""


def unary_call(
    host: str,
    port: int,
    path: str,
    message: bytes,
    *,
    metadata: Sequence[tuple[str, str]] = (),
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    authority: str | None = None,
    timeout_s: float = 5.0,
) -> bytes:
    """Call ``path`` with a serialized request; returns the serialized response.

    Raises ``UnaryError`` for a non-OK gRPC status (a timeout is DEADLINE_EXCEEDED), ``ssl.SSLError``
    when the TLS handshake fails, ``OSError`` when the server cannot be reached."""
    deadline = time.monotonic() + timeout_s
    sock: socket.socket = socket.create_connection((host, port), timeout=timeout_s)
    try:
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
            if sock.selected_alpn_protocol() != "h2":
                raise UnaryError(UNAVAILABLE, "the server did not agree to HTTP/2 over TLS (ALPN h2)")
        return _Exchange(sock, deadline).run(
            encode_request_headers(path, authority or f"{host}:{port}", tls=ssl_context is not None, metadata=metadata),
            grpc_frame(message),
        )
    except TimeoutError:
        raise UnaryError(DEADLINE_EXCEEDED, f"no answer within {timeout_s:g} s") from None
    finally:
        sock.close()


class _Exchange:
    """The frames of one unary call on stream 1."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = b""
        self.conn_window = _DEFAULT_WINDOW
        self.stream_window = _DEFAULT_WINDOW
        self.peer_initial = _DEFAULT_WINDOW
        self.max_frame = MAX_SEND_FRAME
        self.decoder = Decoder()  # one HPACK table per connection: trailers may index the headers' fields
        self.block = bytearray()
        self.end_after_headers = False
        self.fields: list[tuple[str, str]] = []
        self.data = bytearray()
        self.ended = False
        self.seen_frame = False

    def send(self, data: bytes) -> None:
        self.sock.settimeout(max(0.001, self.deadline - time.monotonic()))
        self.sock.sendall(data)

    def run(self, header_block: bytes, body: bytes) -> bytes:
        settings = struct.pack(">HIHI", _S_ENABLE_PUSH, 0, _S_INITIAL_WINDOW, RECV_WINDOW)
        hello = PREFACE + frame(SETTINGS, 0, 0, settings)
        hello += frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", RECV_WINDOW - _DEFAULT_WINDOW))
        chunks = [header_block[i : i + MAX_SEND_FRAME] for i in range(0, len(header_block), MAX_SEND_FRAME)]
        for i, chunk in enumerate(chunks):
            kind = HEADERS if i == 0 else CONTINUATION
            hello += frame(kind, END_HEADERS if i == len(chunks) - 1 else 0, 1, chunk)
        self.send(hello)
        pending = memoryview(body)
        while not self.ended:
            while pending and min(self.conn_window, self.stream_window) > 0:
                n = min(len(pending), self.conn_window, self.stream_window, self.max_frame)
                last = n == len(pending)
                self.send(frame(DATA, END_STREAM if last else 0, 1, bytes(pending[:n])))
                pending = pending[n:]
                self.conn_window -= n
                self.stream_window -= n
            self.on_frame(*self.read_frame())
        return self.result()

    def read_frame(self) -> tuple[int, int, int, bytes]:
        while True:
            if len(self.buf) >= 9:
                hi, lo, ftype, flags, sid = _HEAD.unpack_from(self.buf)
                n = (hi << 16) | lo
                if len(self.buf) >= 9 + n:
                    payload = self.buf[9 : 9 + n]
                    self.buf = self.buf[9 + n :]
                    self.seen_frame = True
                    return ftype, flags, sid & 0x7FFFFFFF, payload
            self.sock.settimeout(max(0.001, self.deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                if not self.seen_frame:
                    raise ClosedEarly(UNAVAILABLE, "the server closed the connection before answering")
                raise UnaryError(UNAVAILABLE, "the server closed the connection before answering")
            self.buf += chunk

    def on_frame(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if ftype == SETTINGS and not flags & ACK:
            for i in range(0, len(payload) - 5, 6):
                key, value = struct.unpack_from(">HI", payload, i)
                if key == _S_INITIAL_WINDOW:
                    self.stream_window += value - self.peer_initial
                    self.peer_initial = value
                elif key == _S_MAX_FRAME:
                    self.max_frame = value
            self.send(frame(SETTINGS, ACK, 0))
        elif ftype == PING and not flags & ACK:
            self.send(frame(PING, ACK, 0, payload))
        elif ftype == WINDOW_UPDATE and len(payload) == 4:
            increment = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
            if sid == 0:
                self.conn_window += increment
            elif sid == 1:
                self.stream_window += increment
        elif ftype == GOAWAY:
            last_sid = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF if len(payload) >= 4 else 0
            if last_sid < 1:
                raise UnaryError(UNAVAILABLE, "the server sent GOAWAY before answering")
        elif sid != 1:
            return
        elif ftype == RST_STREAM:
            code = struct.unpack(">I", payload)[0] if len(payload) == 4 else 2
            raise UnaryError(RST_TO_GRPC.get(code, INTERNAL), f"stream reset by the server (HTTP/2 error {code})")
        elif ftype == HEADERS:
            start, end = 0, len(payload)
            if flags & PADDED:
                start, end = 1, end - payload[0]
            if flags & PRIORITY_FLAG:
                start += 5
            self.block += payload[start:end]
            self.end_after_headers = bool(flags & END_STREAM)
            if flags & END_HEADERS:
                self.headers_done()
        elif ftype == CONTINUATION:
            self.block += payload
            if flags & END_HEADERS:
                self.headers_done()
        elif ftype == DATA:
            start, end = (1, len(payload) - payload[0]) if flags & PADDED and payload else (0, len(payload))
            self.data += payload[start:end]
            self.ended = bool(flags & END_STREAM)

    def headers_done(self) -> None:
        try:
            decoded = self.decoder.decode(bytes(self.block))
        except HPACKError as e:
            raise UnaryError(INTERNAL, f"malformed response headers: {e}") from None
        self.fields += [(_text(k), _text(v)) for k, v in decoded]
        self.block = bytearray()
        self.ended = self.ended or self.end_after_headers

    def result(self) -> bytes:
        fields = dict(self.fields)
        status = fields.get("grpc-status")
        if status is None:
            http = int(fields.get(":status", "0") or 0)
            raise UnaryError(_HTTP_TO_GRPC.get(http, 2), f"HTTP {http} without a gRPC status")
        if int(status) != 0:
            raise UnaryError(int(status), unquote(fields.get("grpc-message", "")))
        data = bytes(self.data)
        if len(data) < 5:
            raise UnaryError(INTERNAL, "the response carries no message")
        compressed, length = data[0], struct.unpack_from(">I", data, 1)[0]
        if compressed:
            raise UnaryError(INTERNAL, "the response is compressed (none was asked for)")
        return data[5 : 5 + length]


def _text(x: str | bytes) -> str:
    return x.decode("latin-1") if isinstance(x, bytes) else x
