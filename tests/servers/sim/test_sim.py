"""satpoint.servers.sim.server: the queueing model exactly (no I/O), then the real server as a subprocess."""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import pytest

from satpoint.errors import ConfigError
from satpoint.servers.sim.model import (
    LOGNORMAL_SIGMA,
    ErrorDraws,
    PauseCalendar,
    ServiceDraws,
    SlotScheduler,
)
from satpoint.servers.sim.process import SimServer
from satpoint.servers.sim.server import SimConfig, serve

LINE_RE = re.compile(r"^satpoint sim listening on http://127\.0\.0\.1:(\d+) \(capacity ([0-9.e+]+) rps\)$")
INFER = "/v2/models/sim/infer"
BODY = b'{"inputs":[{"name":"input-0","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'


# --------------------------------------------------------------------------------------------------
# The model, in virtual time
# --------------------------------------------------------------------------------------------------


def _scheduler(
    slots: int,
    service_s: float,
    *,
    pauses: PauseCalendar | None = None,
    error_rate: float = 0.0,
) -> SlotScheduler:
    rng = np.random.default_rng(0)
    return SlotScheduler(
        slots=slots,
        service=ServiceDraws("const", service_s, rng),
        errors=ErrorDraws(error_rate, rng),
        pauses=pauses,
    )


def test_config_defaults_and_capacity() -> None:
    c = SimConfig()
    assert (c.host, c.port, c.slots, c.service_ms, c.dist) == ("127.0.0.1", 8080, 1, 10.0, "const")
    assert (c.pause_every_s, c.pause_s, c.error_rate, c.model, c.seed) == (None, 0.0, 0.0, "sim", 0)
    assert SimConfig(slots=2, service_ms=20).capacity_rps == pytest.approx(100.0)
    assert SimConfig(slots=1000, service_ms=1).service_s == pytest.approx(0.001)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"slots": 0},
        {"service_ms": 0},
        {"service_ms": float("nan")},
        {"dist": "uniform"},
        {"pause_every_s": 0},
        {"pause_every_s": 1.0, "pause_s": 1.0},
        {"pause_s": 0.5},
        {"error_rate": 1.5},
        {"port": 70000},
        {"model": ""},
    ],
)
def test_config_rejects_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        SimConfig(**kwargs)  # type: ignore[arg-type]


def test_burst_finishes_exactly_at_n_times_s_over_c() -> None:
    sched = _scheduler(2, 0.020)
    finishes = [sched.admit(0.0).finish_s for _ in range(100)]
    assert finishes[-1] == pytest.approx(100 * 0.020 / 2)
    # FIFO over two slots: requests 2k and 2k+1 finish together, at (k+1) * S
    assert finishes[:6] == pytest.approx([0.02, 0.02, 0.04, 0.04, 0.06, 0.06])


def test_capacity_does_not_depend_on_when_timers_fire() -> None:
    # Arrivals at 2x capacity, each slightly later than the previous: completions at exactly C/S.
    sched = _scheduler(3, 0.010)
    finishes = [sched.admit(i / 600.0).finish_s for i in range(3000)]
    rate = (3000 - 300) / (finishes[-1] - finishes[299])
    assert rate == pytest.approx(300.0, rel=1e-9)


def test_below_capacity_there_is_no_queueing() -> None:
    sched = _scheduler(2, 0.010)
    for i in range(1000):
        a = i / 150.0  # 150 rps < 200 rps
        adm = sched.admit(a)
        assert adm.start_s == a
        assert adm.finish_s == pytest.approx(a + 0.010)


def test_pause_calendar_windows() -> None:
    cal = PauseCalendar(origin_s=100.0, every_s=4.0, pause_s=1.0)
    assert cal.defer(99.0) == 99.0  # before server start
    assert cal.defer(100.0) == 100.0
    assert cal.defer(102.999) == 102.999
    assert cal.defer(103.0) == 104.0  # pause [103, 104) is closed at its start ...
    assert cal.defer(103.5) == 104.0
    assert cal.defer(104.0) == 104.0  # ... and open at its end
    assert cal.defer(107.25) == 108.0
    assert cal.defer(1000 * 4 + 100.0 + 3.5) == 1000 * 4 + 104.0


def test_pause_defers_starts_and_holds_finishes() -> None:
    cal = PauseCalendar(origin_s=0.0, every_s=4.0, pause_s=1.0)
    sched = _scheduler(1, 0.010, pauses=cal)
    # finishes inside the pause: held until its end
    assert sched.admit(2.995) == (2.995, 4.0, False)
    # arrives during the pause, slot busy until 4.0: starts at 4.0
    adm = sched.admit(3.5)
    assert (adm.start_s, adm.finish_s) == pytest.approx((4.0, 4.010))
    # arrives during the next pause with a free slot: starts at its end
    adm = sched.admit(7.2)
    assert (adm.start_s, adm.finish_s) == pytest.approx((8.0, 8.010))
    # outside any pause: untouched
    adm = sched.admit(9.0)
    assert (adm.start_s, adm.finish_s) == pytest.approx((9.0, 9.010))


def test_pause_delays_about_a_quarter_of_a_steady_stream() -> None:
    cal = PauseCalendar(origin_s=0.0, every_s=4.0, pause_s=1.0)
    sched = _scheduler(100, 0.010, pauses=cal)
    arrivals = np.arange(0, 40.0, 0.01)  # 100 rps over 10 periods; the backlog of a pause drains in 10 ms
    latencies = np.array([sched.admit(float(a)).finish_s - a for a in arrivals])
    delayed = latencies > 0.011
    assert delayed.mean() == pytest.approx(0.25, abs=0.01)
    assert latencies.max() <= 1.0 + 0.010 + 1e-9
    in_pause = (arrivals % 4.0) >= 3.0
    assert np.all(latencies[in_pause] >= 4.0 - (arrivals[in_pause] % 4.0) - 1e-9)


@pytest.mark.parametrize("dist", ["exp", "lognormal"])
def test_random_service_times_have_mean_s(dist: str) -> None:
    draws = ServiceDraws(dist, 0.020, np.random.default_rng(7))  # type: ignore[arg-type]
    values = np.array([draws.next() for _ in range(200_000)])
    assert values.mean() == pytest.approx(0.020, rel=0.01)
    assert values.min() > 0
    if dist == "exp":
        assert values.std() == pytest.approx(0.020, rel=0.02)
    else:
        assert np.log(values).std() == pytest.approx(LOGNORMAL_SIGMA, rel=0.01)


def test_draws_are_seeded_and_error_rate_is_a_fraction() -> None:
    a = SlotScheduler.from_config(SimConfig(dist="exp", seed=3, error_rate=0.2), origin_s=0.0)
    b = SlotScheduler.from_config(SimConfig(dist="exp", seed=3, error_rate=0.2), origin_s=0.0)
    first = [a.admit(i * 0.5) for i in range(5000)]
    assert first == [b.admit(i * 0.5) for i in range(5000)]
    assert sum(adm.error for adm in first) / 5000 == pytest.approx(0.2, abs=0.02)
    # service draws do not depend on error_rate
    c = SlotScheduler.from_config(SimConfig(dist="exp", seed=3, error_rate=0.0), origin_s=0.0)
    assert [c.admit(i * 0.5).finish_s for i in range(5000)] == [adm.finish_s for adm in first]


def test_import_has_no_side_effects() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import satpoint.servers.sim.server as s; print(sorted(s.__all__))"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.strip() == str(sorted(["SimConfig", "listening_line", "main", "run", "serve"]))
    assert out.stderr == ""


# --------------------------------------------------------------------------------------------------
# The real server, as a subprocess
# --------------------------------------------------------------------------------------------------


def _conn(s: SimServer, timeout_s: float = 10.0) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", s.port, timeout=timeout_s)


@pytest.fixture(scope="module")
def basic() -> Iterator[SimServer]:
    with SimServer(slots=4, service_ms=5) as s:
        yield s


def _get(s: SimServer, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes, float]:
    c = _conn(s)
    try:
        t = time.perf_counter()
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        return r.status, data, time.perf_counter() - t
    finally:
        c.close()


def test_listening_line_and_port_zero(basic: SimServer) -> None:
    first_line = basic.log_text().splitlines()[0]
    m = LINE_RE.match(first_line)
    assert m, f"unexpected listening line {first_line!r}"
    assert int(m.group(1)) == basic.port > 0
    assert float(m.group(2)) == pytest.approx(800.0) == basic.capacity_rps


def test_health_and_metadata(basic: SimServer) -> None:
    for path in (
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/sim/ready",
        "/v2/models/sim/versions/1/ready",
    ):
        assert _get(basic, "GET", path)[0] == 200, path
    status, data, _ = _get(basic, "GET", "/v2")
    assert status == 200
    meta = json.loads(data)
    assert meta["name"] == "satpoint-sim" and meta["extensions"] == [] and "version" in meta
    status, data, _ = _get(basic, "GET", "/v2/models/sim")
    assert status == 200
    assert json.loads(data) == {
        "name": "sim",
        "versions": [],
        "platform": "satpoint-sim",
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "output-0", "datatype": "FP32", "shape": [-1, 1]}],
    }


def test_infer_answers_an_oip_response(basic: SimServer) -> None:
    for path in (INFER, "/v2/models/sim/versions/7/infer"):
        status, data, _ = _get(basic, "POST", path, b'{"id": "req-42", "inputs": []}')
        assert status == 200
        assert json.loads(data) == {
            "model_name": "sim",
            "id": "req-42",
            "outputs": [{"name": "output-0", "datatype": "FP32", "shape": [1, 1], "data": [0.5]}],
        }
    status, data, _ = _get(basic, "POST", INFER, BODY)
    assert status == 200 and isinstance(json.loads(data)["id"], str)


def test_not_found(basic: SimServer) -> None:
    for method, path in (
        ("GET", "/v2/models/nope"),
        ("GET", "/v2/models/nope/ready"),
        ("POST", "/v2/models/nope/infer"),
        ("POST", "/v2/models/nope/versions/1/infer"),
    ):
        status, data, _ = _get(basic, method, path, BODY if method == "POST" else None)
        assert status == 404, path
        assert json.loads(data) == {"error": "Model nope not found"}
    status, data, _ = _get(basic, "GET", "/nope")
    assert status == 404 and "error" in json.loads(data)
    assert _get(basic, "GET", "/v2/models/sim/infer")[0] == 405
    assert _get(basic, "POST", "/v2/health/live", b"{}")[0] == 405


def _read_response(rf: BinaryIO) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response (Content-Length framed) from a socket's ``makefile("rb")``."""
    status = int(rf.readline().split()[1])
    headers: dict[str, str] = {}
    while True:
        line = rf.readline().decode().rstrip("\r\n")
        if not line:
            break
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    body = rf.read(int(headers["content-length"]))
    return status, headers, body


def _infer_req(req_id: str, extra_headers: str = "") -> bytes:
    body = b'{"id":"%s","inputs":[]}' % req_id.encode()
    head = (
        f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra_headers}\r\n"
    )
    return head.encode() + body


def test_pipelined_and_partial_requests_answer_in_order(basic: SimServer) -> None:
    with socket.create_connection(("127.0.0.1", basic.port), timeout=10) as sock:
        rf = sock.makefile("rb")
        data = b"".join(_infer_req(f"p{i}") for i in range(5)) + b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
        # split at awkward places, including inside headers and bodies
        for chunk in (data[:7], data[7:60], data[60:61], data[61:200], data[200:]):
            sock.sendall(chunk)
            time.sleep(0.002)
        ids = []
        for _ in range(5):
            status, _, body = _read_response(rf)
            assert status == 200
            ids.append(json.loads(body)["id"])
        assert ids == [f"p{i}" for i in range(5)]
        assert _read_response(rf)[0] == 200  # health answered after the slow infers, in order
        # byte by byte works too, and the connection stays open
        for b in _infer_req("slow"):
            sock.send(bytes([b]))
        assert json.loads(_read_response(rf)[2])["id"] == "slow"


def test_connection_close_and_http10_are_honoured(basic: SimServer) -> None:
    with socket.create_connection(("127.0.0.1", basic.port), timeout=10) as sock:
        rf = sock.makefile("rb")
        sock.sendall(_infer_req("a") + _infer_req("b", "Connection: close\r\n") + _infer_req("ignored"))
        assert json.loads(_read_response(rf)[2])["id"] == "a"
        _, headers, body = _read_response(rf)
        assert json.loads(body)["id"] == "b" and headers.get("connection") == "close"
        assert rf.read() == b""  # closed by the server, the third request is not answered
    with socket.create_connection(("127.0.0.1", basic.port), timeout=10) as sock:
        rf = sock.makefile("rb")
        sock.sendall(b"GET /v2/health/ready HTTP/1.0\r\n\r\n")
        assert _read_response(rf)[0] == 200
        assert rf.read() == b""


def test_malformed_request_gets_400_and_close(basic: SimServer) -> None:
    with socket.create_connection(("127.0.0.1", basic.port), timeout=10) as sock:
        rf = sock.makefile("rb")
        sock.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        assert _read_response(rf)[0] == 400
        assert rf.read() == b""


def test_single_request_takes_the_service_time() -> None:
    with SimServer(slots=1, service_ms=20) as s:
        c = _conn(s)
        c.request("GET", "/v2/health/ready")
        c.getresponse().read()  # warm the connection
        elapsed = []
        for _ in range(15):
            t = time.perf_counter()
            c.request("POST", INFER, body=BODY)
            r = c.getresponse()
            r.read()
            elapsed.append(time.perf_counter() - t)
            assert r.status == 200
            time.sleep(0.003)
        c.close()
    assert min(elapsed) >= 0.020  # never answered before the service time is over
    assert min(elapsed) <= 0.022  # and then promptly (the best case: other load on this machine only adds)
    assert float(np.median(elapsed)) <= 0.030


def _burst(s: SimServer, n: int, path: str = INFER) -> tuple[list[float], list[int]]:
    """n requests at once over n connections; returns completion times since the first send, statuses."""
    conns = [_conn(s) for _ in range(n)]
    for c in conns:
        c.connect()
    barrier = threading.Barrier(n)
    sent: list[float] = [0.0] * n
    done: list[float] = [0.0] * n
    statuses: list[int] = [0] * n

    def one(i: int) -> None:
        barrier.wait()
        sent[i] = time.perf_counter()
        conns[i].request("POST", path, body=BODY)
        r = conns[i].getresponse()
        r.read()
        done[i] = time.perf_counter()
        statuses[i] = r.status

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for c in conns:
        c.close()
    start = min(sent)
    return sorted(d - start for d in done), statuses


def test_capacity_is_slots_over_service_time() -> None:
    n, slots, service_s = 100, 2, 0.020
    with SimServer(slots=slots, service_ms=20) as s:
        completions, statuses = _burst(s, n)
    assert statuses == [200] * n
    expected_s = n * service_s / slots
    assert completions[-1] == pytest.approx(expected_s, rel=0.10)
    # completions come two by two, every S: the k-th (from 1) at about ceil(k/2) * S
    for k in (10, 50, 90):
        assert completions[k - 1] == pytest.approx(math.ceil(k / slots) * service_s, abs=0.03)


@pytest.mark.slow
def test_a_request_sent_during_a_pause_waits_for_its_end() -> None:
    # Pauses are [t0 + 0.6, t0 + 1.0), [t0 + 1.6, t0 + 2.0), ... with t0 the server's start. Rather than
    # trust when we read the listening line, find the end of the first pause from the server itself.
    with SimServer(slots=2, service_ms=5, pause_every_s=1.0, pause_s=0.4) as s:
        line_at_s = time.perf_counter()  # the listening line was just read (server start is just before)
        c = _conn(s)

        def infer() -> tuple[float, float]:
            t = time.perf_counter()
            c.request("POST", INFER, body=BODY)
            r = c.getresponse()
            r.read()
            assert r.status == 200
            return t, time.perf_counter()

        pause_end_s = math.nan
        deadline_s = time.perf_counter() + 5.0
        while time.perf_counter() < deadline_s:
            sent_s, done_s = infer()
            if done_s - sent_s > 0.1:  # this one was held by the first pause
                pause_end_s = done_s
                break
            time.sleep(0.02)
        assert not math.isnan(pause_end_s), "no request was held by a pause"
        assert pause_end_s - line_at_s < 1.5

        def infer_at(offset_s: float) -> tuple[float, float]:
            time.sleep(max(0.0, pause_end_s + offset_s - time.perf_counter()))
            sent_s, done_s = infer()
            return sent_s - pause_end_s, done_s - pause_end_s

        sent_rel, done_rel = infer_at(0.30)  # between pauses: just the service time
        assert done_rel - sent_rel < 0.1
        sent_rel, done_rel = infer_at(0.80)  # inside the next pause [0.6, 1.0): held until its end
        assert sent_rel < 0.95
        assert done_rel - sent_rel > 0.04
        assert done_rel == pytest.approx(1.0, abs=0.05)
        c.close()


def test_error_rate_one_answers_500_after_the_service_time() -> None:
    with SimServer(service_ms=10, error_rate=1.0) as s:
        status, data, elapsed_s = _get(s, "POST", INFER, BODY)
        assert status == 500
        assert "error" in json.loads(data)
        assert elapsed_s >= 0.010
        assert _get(s, "GET", "/v2/health/ready")[0] == 200


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_it_cleanly(sig: int) -> None:
    with SimServer() as s:
        _get(s, "GET", "/v2/health/live")
        keep = _conn(s)
        keep.connect()  # an idle keep-alive connection must not hold the exit up
        t = time.perf_counter()
        os.kill(s.pid, sig)
        while s.returncode is None and time.perf_counter() - t < 5.0:
            time.sleep(0.01)
        assert s.returncode == 0
        assert time.perf_counter() - t < 3.0
        keep.close()


def test_bad_arguments_exit_2() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "satpoint.servers.sim.server", "--slots", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert "slots" in out.stderr


def test_port_in_use_is_a_clear_error() -> None:
    with SimServer() as s:
        out = subprocess.run(
            [sys.executable, "-m", "satpoint.servers.sim.server", "--port", str(s.port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert out.returncode == 1
    assert "cannot listen" in out.stderr and "Traceback" not in out.stderr


def test_serve_can_be_embedded_in_a_thread() -> None:
    ready = threading.Event()
    port: list[int] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    answered: list[int] = []

    def on_listening(host: str, p: int) -> None:
        port.append(p)
        ready.set()

    def main() -> None:
        answered.append(
            loop.run_until_complete(
                serve(
                    SimConfig(port=0, service_ms=1),
                    stop=stop,
                    on_listening=on_listening,
                    handle_signals=False,
                )
            )
        )

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        assert ready.wait(10)
        c = http.client.HTTPConnection("127.0.0.1", port[0], timeout=10)
        c.request("POST", INFER, body=BODY)
        assert c.getresponse().status == 200
        c.close()
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
    assert answered == [1]
