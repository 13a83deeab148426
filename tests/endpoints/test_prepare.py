"""The probe of a target's low-load answer time, and the cool-down that waits for an idle server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from satpoint.endpoints.prepare import probe_service_s, wait_until_idle
from satpoint.endpoints.spec import PreparedTarget, Target
from tests.http_stub import QuietHandler, serving


class _Infer(QuietHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    connections: ClassVar[list[int]] = []
    requests: ClassVar[list[str]] = []

    def setup(self) -> None:
        super().setup()
        type(self).connections.append(self.client_address[1])

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).requests.append(self.path)
        self.reply(200, b'{"outputs":[]}', {"Content-Type": "application/json"})


@pytest.fixture
def infer_server() -> Iterator[str]:
    _Infer.connections, _Infer.requests = [], []
    with serving(_Infer) as url:
        yield url


def rest_target(url: str, builder: Any = None) -> PreparedTarget:
    return PreparedTarget(Target(url, "m"), {}, [{"inputs": []}], builder or object(), 0)


def test_the_probe_times_requests_over_one_kept_alive_connection(infer_server: str) -> None:
    # the load measures answers on warm connections: a probe that opens one per request (and a TLS handshake
    # for https) made the low-load baseline of client_limited several times the load's
    took = probe_service_s(rest_target(infer_server), count=5)
    assert took is not None and took > 0
    assert len(_Infer.requests) == 6  # the first one opens the connection and is not counted
    assert set(_Infer.requests) == {"/v2/models/m/infer"}
    assert len(_Infer.connections) == 1


class _SlowProbe:
    """A target whose probe answers slower than "idle" (a queue that does not drain), counting calls."""

    def __init__(self) -> None:
        self.calls = 0

    def probe_service_s(self, count: int, at: int = 0) -> float:
        self.calls += 1
        return 1.0


def test_a_cool_down_returns_at_once_when_the_run_is_stopped() -> None:
    stop = threading.Event()
    stop.set()
    probe = _SlowProbe()
    t0 = time.monotonic()
    wait_until_idle(rest_target("http://127.0.0.1:1", probe), 30.0, 0.01, max_wait_s=60.0, stop=stop)
    assert time.monotonic() - t0 < 5.0 and probe.calls == 0


@pytest.mark.parametrize("min_wait_s", [30.0, 0.0])
def test_ctrl_c_during_a_cool_down_ends_it(min_wait_s: float) -> None:
    # while it sleeps its minimum, or while it probes a server that is not idle yet (up to a minute)
    stop = threading.Event()
    probe = _SlowProbe()
    threading.Timer(0.3, stop.set).start()
    t0 = time.monotonic()
    wait_until_idle(rest_target("http://127.0.0.1:1", probe), min_wait_s, 0.01, max_wait_s=60.0, stop=stop)
    assert time.monotonic() - t0 < 10.0
    assert (probe.calls == 0) == (min_wait_s > 0)


class _Channel:
    """A gRPC channel that answers every ModelInfer, counting channels opened and calls made."""

    opened = 0
    calls = 0

    def __init__(self, target: object) -> None:
        type(self).opened += 1

    def __enter__(self) -> _Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def unary_unary(self, path: str) -> Any:
        def call(request: bytes, metadata: Any = None, timeout: float | None = None) -> bytes:
            type(self).calls += 1
            return b""

        return call


def test_the_grpc_probe_times_calls_over_one_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    # a channel per call (its set-up: milliseconds) made a small model's baseline several times the load's
    from satpoint.endpoints.grpc import GrpcFactoryBuilder
    from satpoint.transports.grpc import grpc_control

    monkeypatch.setattr(grpc_control, "open_channel", _Channel)
    _Channel.opened = _Channel.calls = 0
    builder = GrpcFactoryBuilder(grpc_control.GrpcTarget("127.0.0.1", 1), (b"request",), 8, ())
    assert builder.probe_service_s(5) is not None
    assert (_Channel.opened, _Channel.calls) == (1, 6)  # the first call opens the channel: not counted


def test_a_cool_down_waits_for_probes_at_low_load_speed_in_a_row() -> None:
    # fast, slow, fast, fast: one fast probe between stalls is not a recovered server
    answers = iter([0.001, 0.5, 0.001, 0.001, 0.001])
    seen: list[int] = []

    def probe(target: object, count: int, timeout_s: float) -> float:
        seen.append(count)
        return next(answers)

    target = rest_target("http://127.0.0.1:1", _SlowProbe())
    wait_until_idle(target, 0.0, 0.001, max_wait_s=30.0, probe=probe)  # type: ignore[arg-type]
    assert len(seen) == 4 and set(seen) == {5}
    seen.clear()
    answers = iter([0.001])
    wait_until_idle(target, 0.0, 0.001, max_wait_s=30.0, probe=probe, bursts=1)  # type: ignore[arg-type]
    assert len(seen) == 1
