"""satpoint sim's faults: the rules (config, seeded draws, capacity untouched), then each fault on the wire,
read with raw sockets from a sim served in this process (on uvloop, as ``satpoint sim`` serves it)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httptools
import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.errors import ConfigError
from satpoint.servers.sim import grpc_server as sim_grpc
from satpoint.servers.sim.model import REQUEST_FAULTS, FaultDraws, SlotScheduler
from satpoint.servers.sim.process import SimServer
from satpoint.servers.sim.server import SimConfig, serve
from satpoint.servers.sim.wire import RESET_AFTER_S

INFER = "/v2/models/sim/infer"


# --------------------------------------------------------------------------------------------------
# The rules, without I/O
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"fault": "explode"},
        {"fault": "stall", "fault_rate": 1.5},
        {"fault": "stall", "fault_rate": float("nan")},
        {"fault": "stall", "fault_after": -1},
        {"fault_rate": 0.5},  # no fault to pick requests for
        {"fault_after": 3},
        {"fault": "idle-timeout", "idle_timeout_s": 1.0, "fault_rate": 0.5},  # a connection fault
        {"fault": "close-after", "close_after": 2, "fault_after": 1},
        {"fault": "close-after"},  # needs close_after
        {"close_after": 3},  # needs the fault
        {"fault": "close-after", "close_after": 0},
        {"fault": "idle-timeout"},
        {"idle_timeout_s": 1.0},
        {"fault": "idle-timeout", "idle_timeout_s": 0.0},
        {"fault": "stall", "slow_headers_ms": 100.0},
        {"fault": "slow-headers", "slow_headers_ms": 0.0},
        {"fault": "stall", "error_status": 503},
        {"fault": "error-body", "error_status": 200},
        {"fault": "error-body", "error_status": 600},
        {"fault": "error-body", "error_framing": "chunks"},
        {"fault": "truncated", "error_framing": "eof"},
    ],
)
def test_fault_config_rejects_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        SimConfig(**kwargs)


def test_fault_parameters_and_defaults() -> None:
    assert SimConfig().fault is None and SimConfig().request_fault is None
    assert SimConfig(fault="close-after", close_after=3).request_fault is None  # acts on connections
    assert SimConfig(fault="idle-timeout", idle_timeout_s=5.0).request_fault is None
    assert SimConfig(fault="stall").request_fault == "stall"
    assert SimConfig(fault="slow-headers").slow_headers_s == pytest.approx(1.0)
    assert SimConfig(fault="slow-headers", slow_headers_ms=250).slow_headers_s == pytest.approx(0.25)
    assert SimConfig(fault="error-body").fault_status == 503
    assert SimConfig(fault="error-body", error_status=502).fault_status == 502


def _pattern(config: SimConfig, n: int = 400) -> list[bool]:
    draws = FaultDraws.from_config(config)
    assert draws is not None
    return [draws.next() for _ in range(n)]


def test_fault_draws_are_seeded_spare_the_first_requests_and_hit_a_fraction() -> None:
    config = SimConfig(fault="reset-mid-response", fault_rate=0.25, fault_after=10, seed=7)
    hits = _pattern(config)
    assert hits == _pattern(config)  # the same seed, the same requests
    assert hits != _pattern(SimConfig(fault="reset-mid-response", fault_rate=0.25, fault_after=10, seed=8))
    assert not any(hits[:10])
    assert sum(hits[10:]) / 390 == pytest.approx(0.25, abs=0.07)
    assert all(_pattern(SimConfig(fault="stall"), 50))  # default rate 1: every one
    assert not any(_pattern(SimConfig(fault="stall", fault_rate=0.0), 50))
    for config in (SimConfig(), SimConfig(fault="close-after", close_after=1)):
        assert FaultDraws.from_config(config) is None  # nothing drawn: the hot path tests one attribute


@pytest.mark.parametrize("fault", sorted(REQUEST_FAULTS))
def test_a_fault_leaves_service_times_and_errors_unchanged(fault: str) -> None:
    """Faults change what is written, never the queueing model: the same draws, the same finish times."""
    base = SimConfig(slots=3, service_ms=10, dist="exp", error_rate=0.3, seed=5)
    faulty = SimConfig(slots=3, service_ms=10, dist="exp", error_rate=0.3, seed=5, fault=fault, fault_rate=0.5)  # type: ignore[arg-type]
    a, b = SlotScheduler.from_config(base, 0.0), SlotScheduler.from_config(faulty, 0.0)
    for i in range(500):
        assert a.admit(i / 400) == b.admit(i / 400)


# --------------------------------------------------------------------------------------------------
# On the wire
# --------------------------------------------------------------------------------------------------


@contextmanager
def served(**kwargs: Any) -> Iterator[int]:
    """The REST sim on uvloop in a thread of this process, listening on a free port (yielded)."""
    import uvloop

    config = SimConfig(port=0, **kwargs)
    ready = threading.Event()
    port: list[int] = []
    errors: list[BaseException] = []
    loop = uvloop.new_event_loop()
    stop = asyncio.Event()

    def on_listening(host: str, p: int) -> None:
        port.append(p)
        ready.set()

    def main() -> None:
        try:
            loop.run_until_complete(serve(config, stop=stop, on_listening=on_listening, handle_signals=False))
        except BaseException as e:  # surfaced by the test
            errors.append(e)
            ready.set()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        assert ready.wait(10) and not errors, errors
        yield port[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
    assert not errors, errors


def _request(path: str = INFER, req_id: str = "r") -> bytes:
    """A POST of an inference request (``path`` INFER) or a GET of ``path``, HTTP/1.1 keep-alive."""
    if path != INFER:
        return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    body = b'{"id":"%s","inputs":[]}' % req_id.encode()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def _connect(port: int, timeout_s: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout_s)


def _read_all(sock: socket.socket) -> tuple[list[tuple[float, bytes]], str]:
    """Every chunk received (with its time since the call) until EOF, a reset or the socket's timeout;
    and how it ended: ``eof``, ``reset`` or ``timeout``."""
    t0 = time.perf_counter()
    chunks: list[tuple[float, bytes]] = []
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return chunks, "reset"
        except TimeoutError:
            return chunks, "timeout"
        if not data:
            return chunks, "eof"
        chunks.append((time.perf_counter() - t0, data))


class _Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


class _Parsed:
    """HTTP/1.1 responses parsed with httptools (the parser satpoint's client uses), as they complete."""

    def __init__(self) -> None:
        self.done: list[_Response] = []
        self.headers: dict[str, str] = {}
        self.body = b""
        self.status = 0
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.headers, self.body = {}, b""

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode().lower()] = value.decode()

    def on_headers_complete(self) -> None:
        self.status = int(self.parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done.append(_Response(self.status, self.headers, self.body))

    def feed(self, data: bytes) -> _Parsed:
        self.parser.feed_data(data)
        return self


class _Stream:
    """The responses on one connection, in order."""

    def __init__(self, sock: socket.socket, received: bytes = b"") -> None:
        self.sock = sock
        self.parsed = _Parsed().feed(received)

    def next(self, timeout_s: float = 5.0) -> _Response:
        self.sock.settimeout(timeout_s)
        while not self.parsed.done:
            data = self.sock.recv(65536)
            assert data, "the connection closed before a complete response"
            self.parsed.feed(data)
        return self.parsed.done.pop(0)


def _exchange(port: int, request: bytes, timeout_s: float = 2.0) -> tuple[list[tuple[float, bytes]], str]:
    with _connect(port, timeout_s) as sock:
        sock.sendall(request)
        return _read_all(sock)


def test_reset_mid_response_sends_headers_and_half_the_body_then_a_reset() -> None:
    with served(service_ms=20, fault="reset-mid-response") as port:
        t = time.perf_counter()
        chunks, end = _exchange(port, _request())
        reset_after_s = time.perf_counter() - t
    assert end == "reset"
    assert reset_after_s >= 0.020 + RESET_AFTER_S - 0.002  # the reset follows the partial answer (a ms timer)
    data = b"".join(c for _, c in chunks)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"connection:" not in head
    length = int(dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])[b"content-length"])
    assert 0 < len(body) < length  # the client has read part of the answer before the reset
    assert chunks[0][0] >= 0.018  # at the time the answer was due (the service time)


def test_truncated_sends_half_the_body_then_closes() -> None:
    with served(service_ms=5, fault="truncated") as port:
        chunks, end = _exchange(port, _request())
    assert end == "eof"
    parsed = _Parsed().feed(b"".join(c for _, c in chunks))
    assert parsed.status == 200 and not parsed.done
    assert 0 < len(parsed.body) < int(parsed.headers["content-length"])


def test_malformed_is_rejected_by_an_http_parser_then_closed() -> None:
    with served(service_ms=5, fault="malformed") as port:
        chunks, end = _exchange(port, _request())
    assert end == "eof"
    data = b"".join(c for _, c in chunks)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    with pytest.raises(httptools.HttpParserError):
        _Parsed().feed(data)


def test_slow_headers_sends_the_status_line_then_the_rest_later_and_keeps_the_connection() -> None:
    with served(service_ms=5, fault="slow-headers", slow_headers_ms=300) as port, _connect(port) as sock:
        sock.sendall(_request(req_id="a") + _request("/v2/health/ready"))  # pipelined: waits behind it
        sock.settimeout(0.15)
        first, end = _read_all(sock)
        assert end == "timeout" and b"".join(c for _, c in first) == b"HTTP/1.1 200 OK\r\n"
        t = time.perf_counter()
        stream = _Stream(sock, b"".join(c for _, c in first))
        infer = stream.next()
        assert time.perf_counter() - t >= 0.1  # the rest came about 300 ms after the status line
        assert infer.status == 200 and json.loads(infer.body)["id"] == "a"
        assert stream.next().status == 200  # then the health check, in order: the connection stays usable


def test_stall_never_answers_and_blocks_later_answers_on_the_connection() -> None:
    with served(service_ms=5, fault="stall") as port:
        with _connect(port, timeout_s=0.5) as sock:
            sock.sendall(_request() + _request("/v2/health/ready"))
            chunks, end = _read_all(sock)
            assert (chunks, end) == ([], "timeout")  # open, silent
        with _connect(port) as other:  # the server itself still answers what the fault does not hit
            stream = _Stream(other)
            other.sendall(_request("/v2/health/ready"))
            assert stream.next().status == 200
            other.sendall(_request("/v2/models/sim"))
            assert stream.next().status == 200


@pytest.mark.parametrize("status", [503, 502])
def test_error_body_answers_the_status_with_a_json_body_and_keeps_alive(status: int) -> None:
    with served(service_ms=5, fault="error-body", error_status=status) as port, _connect(port) as sock:
        for _ in range(2):  # the same connection, twice
            sock.sendall(_request())
            parsed = _Stream(sock).next()
            assert parsed.status == status and "connection" not in parsed.headers
            assert int(parsed.headers["content-length"]) == len(parsed.body)
            assert str(status) in json.loads(parsed.body)["error"]


def test_error_body_with_eof_framing_ends_the_body_with_the_connection() -> None:
    with served(service_ms=5, fault="error-body", error_framing="eof") as port:
        chunks, end = _exchange(port, _request())
    assert end == "eof"
    data = b"".join(c for _, c in chunks)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"content-length" not in head.lower() and b"connection: close" in head
    assert "503" in json.loads(body)["error"]


def test_connection_close_answers_with_the_header_then_closes() -> None:
    with served(service_ms=5, fault="connection-close") as port:
        chunks, end = _exchange(port, _request(req_id="c") + _request(req_id="never"))
    assert end == "eof"
    (answer,) = _Parsed().feed(b"".join(c for _, c in chunks)).done
    assert answer.headers["connection"] == "close" and json.loads(answer.body)["id"] == "c"


def test_close_after_closes_silently_after_n_answers_counting_every_request() -> None:
    with served(service_ms=2, fault="close-after", close_after=3) as port, _connect(port) as sock:
        sock.sendall(_request("/v2/health/ready"))  # control requests count too
        assert _Stream(sock).next().status == 200
        for i in range(2):
            sock.sendall(_request(req_id=f"k{i}"))
            parsed = _Stream(sock).next()
            assert parsed.status == 200 and "connection" not in parsed.headers
        sock.settimeout(2.0)
        assert _read_all(sock) == ([], "eof")  # closed after the third, without a word


def test_close_after_ignores_requests_sent_behind_the_last_one() -> None:
    with served(service_ms=2, fault="close-after", close_after=1) as port:
        chunks, end = _exchange(port, _request(req_id="x") + _request(req_id="lost"))
    (answer,) = _Parsed().feed(b"".join(c for _, c in chunks)).done
    assert json.loads(answer.body)["id"] == "x"
    assert end in ("eof", "reset")  # a reset if the kernel still held the unread second request


def test_idle_timeout_closes_idle_connections_only() -> None:
    with served(service_ms=2, fault="idle-timeout", idle_timeout_s=0.2) as port:
        with _connect(port) as idle:
            t = time.perf_counter()
            idle.settimeout(2.0)
            assert _read_all(idle) == ([], "eof")
            assert 0.2 <= time.perf_counter() - t < 0.6
        with _connect(port) as busy:  # a request every 0.1 s keeps it open past the timeout
            for _ in range(5):
                busy.sendall(_request())
                assert _Stream(busy).next().status == 200
                time.sleep(0.1)
            busy.settimeout(2.0)
            t = time.perf_counter()
            assert _read_all(busy) == ([], "eof")  # then idle: closed about 0.2 s after the last answer
            assert time.perf_counter() - t < 0.6


def test_idle_timeout_waits_for_an_answer_in_progress() -> None:
    with served(service_ms=400, fault="idle-timeout", idle_timeout_s=0.1) as port, _connect(port) as sock:
        sock.sendall(_request(req_id="slow"))
        parsed = _Stream(sock).next()  # 400 ms of service: four idle timeouts, but not idle
        assert json.loads(parsed.body)["id"] == "slow"


def _statuses(port: int, n: int) -> list[int]:
    out = []
    with _connect(port) as sock:
        for i in range(n):
            sock.sendall(_request(req_id=str(i)))
            out.append(_Stream(sock).next().status)
    return out


def test_fault_rate_and_after_pick_the_same_requests_for_the_same_seed() -> None:
    kwargs: dict[str, Any] = {"service_ms": 1, "fault": "error-body", "fault_rate": 0.5, "fault_after": 3}
    with served(seed=11, **kwargs) as port:
        first = _statuses(port, 40)
    with served(seed=11, **kwargs) as port:
        again = _statuses(port, 40)
    assert first == again
    assert first[:3] == [200, 200, 200]
    assert set(first[3:]) == {200, 503}
    expected = [503 if hit else 200 for hit in _pattern(SimConfig(seed=11, **kwargs), 40)]
    assert first == expected


# --------------------------------------------------------------------------------------------------
# The ways to ask for a fault: SimServer, satpoint sim, and the gRPC sim's refusal
# --------------------------------------------------------------------------------------------------


def test_simserver_passes_the_fault_options_on() -> None:
    argv = SimServer(fault="error-body", fault_rate=0.25, fault_after=2, error_status=502, error_framing="eof").argv
    assert argv[argv.index("--fault") :] == [
        "--fault", "error-body", "--fault-rate", "0.25", "--fault-after", "2",
        "--error-status", "502", "--error-framing", "eof",
    ]  # fmt: skip
    argv = SimServer(fault="idle-timeout", idle_timeout_s=0.5).argv
    assert argv[argv.index("--fault") :] == ["--fault", "idle-timeout", "--idle-timeout", "0.5"]
    assert "--fault" not in SimServer().argv


@pytest.mark.parametrize(
    "kwargs",
    [
        {"fault": "stall", "protocol": "grpc"},
        {"fault": "close-after"},
        {"fault": "nope"},
        {"fault": "stall", "fault_rate": "half"},
        {"fault": "slow-headers", "slow_headers_ms": -1},
        {"close_after": 2},
    ],
)
def test_simserver_rejects_bad_fault_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="SimServer"):
        SimServer(**kwargs)


def test_grpc_sim_refuses_a_fault() -> None:
    async def start() -> None:
        await sim_grpc.serve(SimConfig(port=0, fault="stall"), handle_signals=False)

    with pytest.raises(ConfigError, match="REST sim only"):
        asyncio.run(start())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fault", "close-after"], "close_after"),
        (["--fault", "stall", "--protocol", "grpc"], "REST sim only"),
        (["--fault", "stall", "--fault-rate", "2"], "fault_rate"),
        (["--close-after", "3"], "close-after"),
    ],
)
def test_satpoint_sim_rejects_bad_fault_options(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["sim", "--port", "0", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
