"""The raw HTTP/1.1 hot path (transports/rest/pool.py) against a scripted loopback server.

The server is a plain socket server in threads: each accepted connection runs a handler that reads
requests and writes exactly the bytes the test chooses (split, chunked, cut short, reset...).  The pool
is driven the way the dispatcher drives it: ``factory(rec, on_free)``, ``prepare``, ``try_send(idx,
payload_idx)``, ``on_free`` callbacks, ``inflight``/``expire``/``abort_all``/``close``; and once through
the real ``OpenLoopDispatcher``.  Every wait is bounded: a hang fails instead of blocking.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import httptools
import numpy as np
import pytest
import uvloop

from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.runner import run_shard
from satpoint.metrics.records import Outcome, Records
from satpoint.transports.rest import pool as rest
from satpoint.transports.rest.pool import RestPool, encode_json_body, encode_request, infer_path, parse_url

perf = time.perf_counter
HOST = "127.0.0.1"
PATH = "/v2/models/m/infer"
BODIES = (b'{"k":0}', b'{"k":1}', b'{"k":2}')


# the scripted server -------------------------------------------------------------------------------
class Conn:
    """One accepted connection, seen from the server's side."""

    def __init__(self, server: ScriptedServer, number: int, sock: socket.socket) -> None:
        self.server = server
        self.number = number
        self.sock = sock
        self._buf = bytearray()

    def read_request(self) -> bytes | None:
        """The next complete request (head and Content-Length body), or None at EOF/reset."""
        try:
            while b"\r\n\r\n" not in self._buf:
                data = self.sock.recv(65536)
                if not data:
                    return None
                self._buf += data
            head, _, rest_ = bytes(self._buf).partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                key, _, value = line.partition(b":")
                if key.strip().lower() == b"content-length":
                    length = int(value)
            while len(rest_) < length:
                data = self.sock.recv(65536)
                if not data:
                    return None
                rest_ += data
        except (ConnectionError, TimeoutError):
            return None
        request = head + b"\r\n\r\n" + rest_[:length]
        self._buf[:] = rest_[length:]
        with self.server.lock:
            self.server.received.append((self.number, request))
        return request

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_in_pieces(self, data: bytes, size: int, pause_s: float = 0.002) -> None:
        """Write ``data`` in ``size``-byte segments (TCP_NODELAY is on), pausing between them."""
        for i in range(0, len(data), size):
            self.sock.sendall(data[i : i + size])
            time.sleep(pause_s)

    def wait_eof(self, timeout_s: float = 3.0) -> bool:
        """True once the client closed (or reset) this connection."""
        self.sock.settimeout(timeout_s)
        try:
            while self.sock.recv(65536):
                pass
        except TimeoutError:
            return False
        except OSError:  # reset
            return True
        return True

    def reset(self) -> None:
        """Close with a TCP RST (SO_LINGER 0)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


Handler = Callable[[Conn], None]


class ScriptedServer:
    """Listens on 127.0.0.1:<free port>; every accepted connection runs ``handler(conn)`` in a thread."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.lock = threading.Lock()
        self.received: list[tuple[int, bytes]] = []  # (connection number, raw request)
        self.conns: list[Conn] = []
        self.closed_by_client: list[int] = []
        self.errors: list[BaseException] = []
        self._listener = socket.create_server((HOST, 0))
        self.port: int = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(5.0)
            with self.lock:
                conn = Conn(self, len(self.conns), sock)
                self.conns.append(conn)
            th = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            th.start()
            self._threads.append(th)

    def _serve(self, conn: Conn) -> None:
        try:
            self.handler(conn)
        except OSError:
            pass  # the client went away: that is the client's business
        except BaseException as e:  # a broken script must fail the test, not vanish in a thread
            self.errors.append(e)

    def conns_snapshot(self) -> list[Conn]:
        with self.lock:
            return list(self.conns)

    @property
    def connections(self) -> int:
        with self.lock:
            return len(self.conns)

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [r.partition(b"\r\n\r\n")[2] for _, r in self.received]

    def close(self) -> None:
        # shutdown() wakes threads blocked in accept()/recv(); close() alone would not
        for sock in [self._listener, *(c.sock for c in self.conns_snapshot())]:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for th in self._threads:
            th.join(timeout=2.0)
        assert not self.errors, self.errors


@contextmanager
def scripted(handler: Handler) -> Iterator[ScriptedServer]:
    server = ScriptedServer(handler)
    try:
        yield server
    finally:
        server.close()


def response(
    status: int = 200, body: bytes = b'{"outputs":[]}', headers: Sequence[tuple[str, str]] = (), version: str = "1.1"
) -> bytes:
    lines = [f"HTTP/{version} {status} X", f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(pieces: Sequence[bytes], status: int = 200) -> bytes:
    out = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    for p in pieces:
        out += f"{len(p):x}\r\n".encode() + p + b"\r\n"
    return out + b"0\r\n\r\n"


def answer_each(make: Callable[[Conn, bytes], bytes | None]) -> Handler:
    """A keep-alive handler: for every request, write ``make(conn, request)`` (None: stop serving)."""

    def handler(conn: Conn) -> None:
        while (req := conn.read_request()) is not None:
            out = make(conn, req)
            if out is None:
                return
            conn.send(out)

    return handler


OK_EACH = answer_each(lambda conn, req: response())


# the client side, driven like the dispatcher drives it ---------------------------------------------------
class Client:
    def __init__(self, port: int, n: int, max_inflight: int, bodies: Sequence[bytes] = BODIES[:1]) -> None:
        self.payloads = [encode_request(HOST, port, PATH, b) for b in bodies]
        factory = functools.partial(RestPool, host=HOST, port=port, requests=self.payloads, max_inflight=max_inflight)
        self.rec = Records.empty(np.zeros(n))
        self.frees = 0
        self.pool: RestPool = factory(self.rec, self._on_free)

    def _on_free(self) -> None:
        self.frees += 1

    async def settle(self, timeout_s: float = 3.0) -> None:
        """Until nothing is in flight."""
        await until(lambda: self.pool.inflight() == 0, timeout_s)

    async def one(self, idx: int, payload_idx: int = 0) -> None:
        assert self.pool.try_send(idx, payload_idx)
        await self.settle()

    def row(self, idx: int) -> tuple[Outcome, int]:
        return Outcome(int(self.rec.outcome[idx])), int(self.rec.status[idx])


async def until(pred: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = perf() + timeout_s
    while not pred():
        assert perf() < deadline, "condition not reached in time"
        await asyncio.sleep(0.002)


def on_uvloop(coro: Coroutine[Any, Any, Any], timeout_s: float = 8.0) -> Any:
    return uvloop.run(asyncio.wait_for(coro, timeout_s))


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound (so nobody else takes it) but not listening."""
    s = socket.socket()
    s.bind((HOST, 0))
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


# encoding (pure) ------------------------------------------------------------------------------------------
def test_encode_request_exact_bytes() -> None:
    data = encode_request("10.0.0.7", 8080, "/v2/models/iris/infer", b'{"a":1}', [("Seldon-Model", "iris")])
    assert data == (
        b"POST /v2/models/iris/infer HTTP/1.1\r\n"
        b"Host: 10.0.0.7:8080\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: 7\r\n"
        b"Connection: keep-alive\r\n"
        b"Seldon-Model: iris\r\n"
        b"\r\n"
        b'{"a":1}'
    )


class _ParsedRequest:
    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


def parse_request(data: bytes) -> tuple[_ParsedRequest, httptools.HttpRequestParser]:
    req = _ParsedRequest()
    parser = httptools.HttpRequestParser(req)
    parser.feed_data(data)
    return req, parser


def test_encoded_request_is_valid_http() -> None:
    body = encode_json_body({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [0.5]}]})
    assert b" " not in body  # compact JSON
    extra = [("Seldon-Model", "m"), ("X-Trace", "abc def")]
    req, parser = parse_request(encode_request("localhost", 9000, infer_path("m", "3"), body, extra))
    assert req.complete and parser.get_method() == b"POST" and parser.should_keep_alive()
    assert req.url == b"/v2/models/m/versions/3/infer"
    assert req.body == body
    headers = dict(req.headers)
    assert len(headers) == len(req.headers)  # no field twice
    assert headers[b"host"] == b"localhost:9000"
    assert headers[b"content-length"] == str(len(body)).encode()
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"seldon-model"] == b"m" and headers[b"x-trace"] == b"abc def"
    empty, _ = parse_request(encode_request(HOST, 1, "/", b""))
    assert empty.complete and dict(empty.headers)[b"content-length"] == b"0"


def test_paths_and_urls() -> None:
    assert infer_path("iris") == "/v2/models/iris/infer"
    assert infer_path("iris", "2") == "/v2/models/iris/versions/2/infer"
    assert (parse_url("http://127.0.0.1:8080").host, parse_url("http://127.0.0.1:8080").port) == ("127.0.0.1", 8080)
    assert (parse_url("127.0.0.1:8080/v2").host, parse_url("127.0.0.1:8080/v2").port) == ("127.0.0.1", 8080)
    assert (parse_url("http://localhost").host, parse_url("http://localhost").port) == ("localhost", 80)
    assert (parse_url("https://127.0.0.1:8443").host, parse_url("https://127.0.0.1:8443").port) == ("127.0.0.1", 8443)
    assert (parse_url("https://example.com").host, parse_url("https://example.com").port) == ("example.com", 443)
    with pytest.raises(ValueError, match="scheme"):
        parse_url("ftp://127.0.0.1:21")
    a = parse_url("https://u:p@gw.example.com/seldon/ns/?token=t&x=1")
    assert (a.host, a.port, a.tls) == ("gw.example.com", 443, True)
    assert a.path(infer_path("iris")) == "/seldon/ns/v2/models/iris/infer?token=t&x=1"
    assert parse_url("http://127.0.0.1:8080").path("/v2/x") == "/v2/x"


def test_a_user_host_header_replaces_the_default() -> None:
    req, _ = parse_request(encode_request(HOST, 8080, PATH, b"{}", [("Host", "iris.models.example.com")]))
    hosts = [v for k, v in req.headers if k == b"host"]
    assert hosts == [b"iris.models.example.com"]


def test_ipv6_host_header_is_bracketed() -> None:
    a = parse_url("http://[::1]:8080")
    host, port = a.host, a.port
    req, _ = parse_request(encode_request(host, port, PATH, b"{}"))
    assert dict(req.headers)[b"host"] == b"[::1]:8080"


# keep-alive and framing -------------------------------------------------------------------------------------
def test_keep_alive_reuses_one_connection() -> None:
    with scripted(OK_EACH) as server:

        async def main() -> Client:
            c = Client(server.port, 6, max_inflight=1, bodies=BODIES[:2])
            await c.pool.prepare(4)  # at most max_inflight warm connections
            await until(lambda: c.frees >= 1)  # the warm connection reported itself free
            for i in range(6):
                await c.one(i, i % 2)
            await c.pool.close()
            return c

        c = on_uvloop(main())
        assert server.connections == 1
        assert [n for n, _ in server.received] == [0] * 6
        assert server.bodies() == [BODIES[i % 2] for i in range(6)]  # payload_idx picks the bytes
        assert [r for _, r in server.received] == [c.payloads[i % 2] for i in range(6)]
    assert (c.rec.outcome == Outcome.OK).all() and (c.rec.status == 200).all()
    assert not np.isnan(c.rec.sent).any() and (c.rec.done >= c.rec.sent).all()


def test_concurrent_requests_use_up_to_max_inflight_connections() -> None:
    release = threading.Event()

    def slow(conn: Conn, req: bytes) -> bytes:
        release.wait(3.0)
        return response()

    with scripted(answer_each(slow)) as server:

        async def main() -> tuple[Client, list[bool], int, list[bool]]:
            c = Client(server.port, 6, max_inflight=3)
            await c.pool.prepare(2)
            first = [c.pool.try_send(i, 0) for i in range(4)]  # two warm + one new; the fourth is refused
            inflight = c.pool.inflight()
            await until(lambda: len(server.received) == 3)
            release.set()
            await c.settle()
            frees = c.frees
            again = [c.pool.try_send(i, 0) for i in (3, 4, 5)]  # all three connections are free again
            await c.settle()
            await c.pool.close()
            return c, first, inflight, [*again, frees >= 3]

        c, first, inflight, again = on_uvloop(main())
        assert first == [True, True, True, False]
        assert inflight == 3
        assert again == [True, True, True, True]
        assert server.connections == 3
    assert (c.rec.outcome == Outcome.OK).all()


@pytest.mark.parametrize("size", [0, 1, 70_000])
def test_content_length_bodies(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    with scripted(answer_each(lambda conn, req: response(body=body))) as server:

        async def main() -> Client:
            c = Client(server.port, 2, max_inflight=1)
            await c.one(0)
            await c.one(1)
            return c

        c = on_uvloop(main())
        assert server.connections == 1  # the framing left the connection reusable
    assert c.row(0) == (Outcome.OK, 200) and c.row(1) == (Outcome.OK, 200)


def test_chunked_responses() -> None:
    pieces = [b'{"outputs":', b"[" + b"1," * 5000 + b"1]", b"}"]
    with scripted(answer_each(lambda conn, req: chunked(pieces))) as server:

        async def main() -> Client:
            c = Client(server.port, 3, max_inflight=1)
            for i in range(3):
                await c.one(i)
            return c

        c = on_uvloop(main())
        assert server.connections == 1
    assert all(c.row(i) == (Outcome.OK, 200) for i in range(3))


def test_response_split_across_many_small_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Headers and body arrive a few bytes at a time; the parser must reassemble both framings."""
    reads = []
    original = rest._Conn.data_received

    def counting(self: Any, data: bytes) -> None:
        reads.append(len(data))
        original(self, data)

    monkeypatch.setattr(rest._Conn, "data_received", counting)

    def pieces(conn: Conn) -> None:
        for k in range(2):
            if conn.read_request() is None:
                return
            data = response(503 if k else 200, body=b'{"outputs":[1,2,3]}', headers=[("X-Pad", "p" * 40)])
            conn.send_in_pieces(data, 3)
        if conn.read_request() is not None:
            conn.send_in_pieces(chunked([b'{"a":', b"1}"]), 2)

    with scripted(pieces) as server:

        async def main() -> Client:
            c = Client(server.port, 3, max_inflight=1)
            for i in range(3):
                await c.one(i)
            return c

        c = on_uvloop(main())
        assert server.connections == 1
    assert [c.row(i) for i in range(3)] == [(Outcome.OK, 200), (Outcome.HTTP_ERROR, 503), (Outcome.OK, 200)]
    assert len(reads) >= 30 and min(reads) <= 3  # it really came in pieces


def test_connection_close_is_not_reused() -> None:
    """``Connection: close`` (the server even keeps the socket open, reading nothing more): the client
    must open a fresh connection for every later request, else it would wait forever."""
    hold = threading.Event()

    def close_each(conn: Conn) -> None:
        if conn.read_request() is None:
            return
        conn.send(response(headers=[("Connection", "close")]))
        hold.wait(5.0)  # never reads again, never answers again

    with scripted(close_each) as server:

        async def main() -> Client:
            c = Client(server.port, 3, max_inflight=1)
            for i in range(3):
                await c.one(i)
            hold.set()
            await c.pool.close()
            return c

        try:
            c = on_uvloop(main())
        finally:
            hold.set()
        assert server.connections == 3
        assert [n for n, _ in server.received] == [0, 1, 2]
    assert (c.rec.outcome == Outcome.OK).all()
    assert c.frees >= 3  # each dropped connection freed its slot


def test_http_1_0_response_without_keep_alive_is_not_reused() -> None:
    with scripted(answer_each(lambda conn, req: response(version="1.0"))) as server:

        async def main() -> Client:
            c = Client(server.port, 2, max_inflight=1)
            await c.one(0)
            await c.one(1)
            return c

        c = on_uvloop(main())
        assert server.connections == 2
    assert (c.rec.outcome == Outcome.OK).all()


def test_idle_connection_closed_by_the_server_is_replaced() -> None:
    """The server answers with keep-alive, then closes the idle connection silently."""
    closed = threading.Event()

    def one_then_close(conn: Conn) -> None:
        if conn.read_request() is None:
            return
        conn.send(response())
        if conn.number == 0:
            time.sleep(0.05)
            conn.close()
            closed.set()
            return
        OK_EACH(conn)

    with scripted(one_then_close) as server:

        async def main() -> Client:
            c = Client(server.port, 2, max_inflight=1)
            await c.one(0)
            await until(closed.is_set)
            await asyncio.sleep(0.1)  # the client sees the FIN
            await c.one(1)
            return c

        c = on_uvloop(main())
        assert server.connections == 2
    assert (c.rec.outcome == Outcome.OK).all()


# errors ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.OK),
        (201, Outcome.OK),
        (299, Outcome.OK),
        (301, Outcome.HTTP_ERROR),
        (400, Outcome.HTTP_ERROR),
        (404, Outcome.HTTP_ERROR),
        (429, Outcome.HTTP_ERROR),
        (500, Outcome.HTTP_ERROR),
        (503, Outcome.HTTP_ERROR),
    ],
)
def test_status_classes(status: int, outcome: Outcome) -> None:
    body = b'{"error":"no"}' if status >= 300 else b'{"outputs":[]}'
    with scripted(answer_each(lambda conn, req: response(status, body))) as server:

        async def main() -> Client:
            c = Client(server.port, 2, max_inflight=1)
            await c.one(0)
            await c.one(1)
            return c

        c = on_uvloop(main())
        assert server.connections == 1  # an error answer does not cost the connection
    assert c.row(0) == (outcome, status) and c.row(1) == (outcome, status)


def test_204_without_body() -> None:
    with scripted(answer_each(lambda conn, req: b"HTTP/1.1 204 No Content\r\n\r\n")) as server:

        async def main() -> Client:
            c = Client(server.port, 2, max_inflight=1)
            await c.one(0)
            await c.one(1)
            return c

        c = on_uvloop(main())
        assert server.connections == 1
    assert c.row(0) == (Outcome.OK, 204) and c.row(1) == (Outcome.OK, 204)


HEAD_200 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(lambda conn: conn.close(), id="before-any-byte"),
        pytest.param(lambda conn: (conn.send(HEAD_200[:10]), conn.close()), id="mid-status-line"),
        pytest.param(lambda conn: (conn.send(HEAD_200 + b"Content-Le"), conn.close()), id="mid-headers"),
        pytest.param(
            lambda conn: (conn.send(HEAD_200 + b"Content-Length: 100\r\n\r\n" + b"x" * 10), conn.close()),
            id="mid-body",
        ),
        pytest.param(lambda conn: (conn.send(chunked([b"abc"])[:-5]), conn.close()), id="mid-chunked"),
        pytest.param(lambda conn: (conn.send(HEAD_200 + b"Content-Length: 100\r\n\r\nxx"), conn.reset()), id="rst"),
    ],
)
def test_connection_closed_mid_response_is_conn_reset(cut: Callable[[Conn], object]) -> None:
    """The first connection is cut short; the pool drops it, frees the slot and the next request
    succeeds on a new connection."""

    def handler(conn: Conn) -> None:
        if conn.number == 0:
            if conn.read_request() is not None:
                cut(conn)
            return
        OK_EACH(conn)

    with scripted(handler) as server:

        async def main() -> tuple[Client, int]:
            c = Client(server.port, 2, max_inflight=1)
            await c.one(0)
            frees = c.frees
            await c.one(1)
            return c, frees

        c, frees = on_uvloop(main())
        assert server.connections == 2
    assert c.row(0) == (Outcome.CONN_RESET, 0)
    assert c.row(1) == (Outcome.OK, 200)
    assert frees >= 1  # the dispatcher was told the slot freed
    assert not np.isnan(c.rec.done).any()


def test_close_delimited_response_is_ok() -> None:
    def handler(conn: Conn) -> None:
        if conn.read_request() is not None:
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + b'{"outputs":[]}')
            conn.close()

    with scripted(handler) as server:

        async def main() -> Client:
            c = Client(server.port, 1, max_inflight=1)
            await c.one(0)
            return c

        c = on_uvloop(main())
    assert c.row(0) == (Outcome.OK, 200)


@pytest.mark.parametrize(
    "garbage",
    [b"HTTP/1.1 2x0 OK\r\n\r\n", b"SMTP ready\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n"],
)
def test_malformed_response(garbage: bytes) -> None:
    def handler(conn: Conn) -> None:
        if conn.number == 0:
            if conn.read_request() is not None:
                conn.send(garbage)
                conn.wait_eof()  # the client must drop the connection itself
            return
        OK_EACH(conn)

    with scripted(handler) as server:

        async def main() -> Client:
            c = Client(server.port, 2, max_inflight=1)
            await c.one(0)
            await c.one(1)
            return c

        c = on_uvloop(main())
        assert server.connections == 2
    assert c.row(0) == (Outcome.MALFORMED, 0)
    assert c.row(1) == (Outcome.OK, 200)


def test_connection_refused(refused_port: int) -> None:
    async def main() -> tuple[Client, list[bool]]:
        c = Client(refused_port, 3, max_inflight=8)
        with pytest.raises(ConnectionError, match="cannot connect"):
            await c.pool.prepare(2)
        sent = [c.pool.try_send(i, 0) for i in range(3)]  # connections are opened on demand
        await c.settle()
        await c.pool.close()
        return c, sent

    c, sent = on_uvloop(main())
    assert sent == [True, True, True]
    assert [c.row(i) for i in range(3)] == [(Outcome.CONN_REFUSED, 0)] * 3
    assert not np.isnan(c.rec.sent).any() and (c.rec.done >= c.rec.sent).all()
    assert c.pool.connect_errors == 3
    assert c.frees == 3  # each failure freed its slot


def test_timeout_drops_the_connection_and_the_next_request_uses_a_new_one() -> None:
    def handler(conn: Conn) -> None:
        if conn.number == 0:
            if conn.read_request() is not None and conn.wait_eof():
                conn.server.closed_by_client.append(0)
            return
        OK_EACH(conn)

    with scripted(handler) as server:

        async def main() -> Client:
            c = Client(server.port, 2, max_inflight=1)
            assert c.pool.try_send(0, 0)
            await until(lambda: len(server.received) == 1)
            await asyncio.sleep(0.06)
            c.pool.expire(perf(), 10.0)  # not old enough yet
            assert c.pool.inflight() == 1
            frees = c.frees
            c.pool.expire(perf(), 0.05)
            assert c.pool.inflight() == 0 and c.frees == frees + 1
            await c.one(1)
            await until(lambda: server.closed_by_client == [0])  # the timed-out connection was closed
            return c

        c = on_uvloop(main())
        assert server.connections == 2
    assert c.row(0) == (Outcome.TIMEOUT, 0) and c.row(1) == (Outcome.OK, 200)
    assert c.rec.done[0] - c.rec.sent[0] >= 0.05


def test_abort_all_and_close() -> None:
    def silent(conn: Conn) -> None:
        if conn.read_request() is not None and conn.wait_eof():
            conn.server.closed_by_client.append(conn.number)

    with scripted(silent) as server:

        async def main() -> tuple[Client, int]:
            c = Client(server.port, 3, max_inflight=3)
            await c.pool.prepare(3)
            for i in range(2):
                assert c.pool.try_send(i, 0)
            await until(lambda: len(server.received) == 2)
            frees = c.frees
            c.pool.abort_all(Outcome.UNFINISHED)
            assert c.pool.inflight() == 0
            await c.pool.close()
            await until(lambda: len(server.closed_by_client) == 2)
            await asyncio.sleep(0.05)
            return c, c.frees - frees

        c, frees_after_abort = on_uvloop(main())
    assert c.rec.outcome.tolist() == [Outcome.UNFINISHED, Outcome.UNFINISHED, Outcome.NOT_SENT]
    assert frees_after_abort == 0  # a closing pool does not ask for more work
    assert not np.isnan(c.rec.done[:2]).any()


# the pool under the real dispatcher ----------------------------------------------------------------------
def test_under_the_dispatcher_outcomes_follow_the_server() -> None:
    """Payload 0 answers 200, payload 1 answers 503, payload 2 has its connection cut mid-response."""

    def by_body(conn: Conn) -> None:
        while (req := conn.read_request()) is not None:
            body = req.partition(b"\r\n\r\n")[2]
            if body == BODIES[0]:
                conn.send(response())
            elif body == BODIES[1]:
                conn.send(response(503, b'{"error":"busy"}'))
            else:
                conn.send(HEAD_200 + b"Content-Length: 50\r\n\r\n{")
                conn.close()
                return

    with scripted(by_body) as server:
        payloads = [encode_request(HOST, server.port, PATH, b) for b in BODIES]

        def build() -> Callable[[Records, Callable[[], None]], RestPool]:
            return functools.partial(RestPool, host=HOST, port=server.port, requests=payloads, max_inflight=4)

        due = np.arange(60, dtype=np.float64) / 300.0
        opts = DispatchOptions(timeout_s=2.0, drain_s=3.0, warm_connections=2, payload_count=3)
        rec, stats = run_shard(due, perf() + 0.1, build, opts, None, lambda: False)
        assert sorted(server.bodies()) == sorted(BODIES[i % 3] for i in range(60))

    want = [(Outcome.OK, 200), (Outcome.HTTP_ERROR, 503), (Outcome.CONN_RESET, 0)] * 20
    assert list(zip(rec.outcome.tolist(), rec.status.tolist(), strict=True)) == want
    assert not np.isnan(rec.sent).any() and not np.isnan(rec.done).any()
    assert np.median(rec.send_lag_s()) < 0.02
    assert stats.wall_s < 0.1 + 0.2 + 2.0  # ended when the last answer came, not after the drain


# bugs found ---------------------------------------------------------------------------------------------------
def test_interim_1xx_responses_are_skipped() -> None:
    def early_hints(conn: Conn) -> None:
        while conn.read_request() is not None:
            conn.send(b"HTTP/1.1 103 Early Hints\r\nLink: </w.bin>; rel=preload\r\n\r\n")
            time.sleep(0.02)
            conn.send(response())

    with scripted(early_hints) as server:

        async def main() -> Client:
            c = Client(server.port, 2, max_inflight=1)
            for i in range(2):
                await c.one(i)
                await asyncio.sleep(0.05)
            return c

        c = on_uvloop(main())
    assert [c.row(0), c.row(1)] == [(Outcome.OK, 200)] * 2
    assert (c.rec.service_s() >= 0.02 - 1e-3).all()


def test_a_stray_response_on_an_idle_connection_does_not_duplicate_it() -> None:
    stray_sent = threading.Event()

    def stray_then_ok(conn: Conn) -> None:
        conn.send(response(body=b""))  # nobody asked
        stray_sent.set()
        OK_EACH(conn)

    with scripted(stray_then_ok) as server:

        async def main() -> list[bool]:
            c = Client(server.port, 2, max_inflight=1)
            await c.pool.prepare(1)
            await until(stray_sent.is_set)
            await asyncio.sleep(0.1)  # the stray response has been read
            sends = [c.pool.try_send(0, 0), c.pool.try_send(1, 0)]
            c.pool.abort_all(Outcome.UNFINISHED)
            return sends

        sends = on_uvloop(main())
    assert sends == [True, False]  # one connection, max_inflight=1: the second must wait


@pytest.mark.slow
def test_request_timed_out_while_connecting_is_never_sent_and_the_cap_holds() -> None:
    # a listener whose accept queue is full drops SYNs: the client's connect waits for its SYN retransmit
    listener = socket.create_server((HOST, 0), backlog=0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(3):
            f = socket.socket()
            f.setblocking(False)
            with suppress(BlockingIOError):
                f.connect((HOST, port))
            fillers.append(f)
        time.sleep(0.05)

        async def main() -> tuple[list[bytes], list[bool]]:
            c = Client(port, 3, max_inflight=1)
            assert c.pool.try_send(0, 0)
            await asyncio.sleep(0.2)
            if any(conn.connected for conn in c.pool._all):
                pytest.skip("the connect did not stall: cannot set the scene on this host")
            c.pool.expire(perf(), 0.1)
            assert c.row(0) == (Outcome.TIMEOUT, 0) and c.pool.inflight() == 0
            # serve whatever arrives now, as a normal server would
            listener.setblocking(False)
            got: list[bytes] = []
            accepted: list[socket.socket] = []
            deadline = perf() + 3.5
            while perf() < deadline and not got:
                try:
                    s, _ = listener.accept()
                    s.setblocking(False)
                    accepted.append(s)
                except BlockingIOError:
                    pass
                for s in accepted:
                    try:
                        data = s.recv(65536)
                    except BlockingIOError:
                        continue
                    if data:
                        got.append(data)
                        s.sendall(response())
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            sends = [c.pool.try_send(1, 0), c.pool.try_send(2, 0)]
            for s in accepted:
                s.close()
            c.pool.abort_all(Outcome.UNFINISHED)
            return got, sends

        got, sends = on_uvloop(main(), timeout_s=8.0)
    finally:
        listener.close()
        for f in fillers:
            f.close()
    assert sends == [True, False]  # max_inflight=1: the second one must wait
    assert got == []  # the server never sees the request that already timed out
