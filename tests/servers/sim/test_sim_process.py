"""satpoint.servers.sim.process: SimServer starts REST and gRPC sims, reports what they are, stops their
whole process group on exit (also when the body raises) and fails clearly on bad arguments or a bad start."""

from __future__ import annotations

import http.client
import math
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from satpoint.errors import TargetUnreachable
from satpoint.servers.process import pids_alive
from satpoint.servers.sim.process import SimServer
from satpoint.transports.grpc import grpc_control as ctl


def wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    """True once ``pid`` and its process group are gone (stop() has already waited: normally at once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.killpg(pid, 0)
            group_alive = True
        except ProcessLookupError:
            group_alive = False
        if not group_alive and not pids_alive([pid]):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def sim_children() -> list[psutil.Process]:
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "satpoint.servers.sim.server" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def no_leftover_sims() -> Iterator[None]:
    before = {p.pid for p in sim_children()}
    yield
    deadline = time.monotonic() + 5.0
    while True:
        left = [p for p in sim_children() if p.pid not in before]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"sim processes left behind: {[p.pid for p in left]}"


def test_rest_sim(no_leftover_sims: None) -> None:
    with SimServer(slots=4, service_ms=5, seed=7) as sim:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", sim.url), sim.url
        assert sim.url == f"http://127.0.0.1:{sim.port}" and sim.host == "127.0.0.1"
        assert sim.capacity_rps == pytest.approx(800.0)
        assert sim.model == "sim" and sim.protocol == "rest"
        pid = sim.pid
        proc = psutil.Process(pid)
        assert "satpoint.servers.sim.server" in proc.cmdline() and "--seed" in proc.cmdline()
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # its own session and process group
        assert sim.running and sim.returncode is None
        assert "listening on " + sim.url in sim.log_text()
        log_dir = sim.log_path.parent
        conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
        conn.request("GET", "/v2/health/ready")
        assert conn.getresponse().status == 200
        conn.close()
        target = sim.target(batch_size=2)
        assert (target.url, target.model, target.protocol, target.batch_size) == (sim.url, "sim", "rest", 2)
    assert wait_gone(pid)
    assert not sim.running and sim.returncode == 0  # SIGTERM: a clean stop
    assert not log_dir.exists()  # the temporary log directory is removed


def test_grpc_sim(no_leftover_sims: None) -> None:
    with SimServer(slots=2, service_ms=5, protocol="grpc", model="m1") as sim:
        assert re.fullmatch(r"127\.0\.0\.1:\d+", sim.url), sim.url  # what --protocol grpc --url takes
        assert sim.capacity_rps == pytest.approx(400.0)
        pid = sim.pid
        assert "satpoint.servers.sim.grpc_server" in psutil.Process(pid).cmdline()
        t = ctl.parse_target(sim.url)
        assert (t.host, t.port, t.tls) == ("127.0.0.1", sim.port, False)
        assert ctl.server_ready(t) and ctl.model_ready(t, "m1") and not ctl.model_ready(t, "sim")
        target = sim.target()
        assert (target.url, target.model, target.protocol) == (sim.url, "m1", "grpc")
    assert wait_gone(pid)


def test_stopped_when_the_body_raises(no_leftover_sims: None) -> None:
    pids = []
    with pytest.raises(KeyError, match="boom"), SimServer(pause_every_s=1.0, pause_s=0.5) as sim:
        pids.append(sim.pid)
        raise KeyError("boom")
    assert wait_gone(pids[0])


def test_pinning_and_service_parameters_reach_the_server(no_leftover_sims: None) -> None:
    cpu = min(os.sched_getaffinity(0))
    sim = SimServer(3, 2.5, dist="exp", pause_every_s=2, pause_s=0.5, error_rate=0.25, cpus=[cpu])
    argv = sim.argv
    for flag, value in [("--slots", "3"), ("--service-ms", "2.5"), ("--dist", "exp"), ("--pause-every", "2.0"),
                        ("--pause-s", "0.5"), ("--error-rate", "0.25"), ("--port", "0")]:  # fmt: skip
        assert argv[argv.index(flag) + 1] == value
    with sim:
        assert psutil.Process(sim.pid).cpu_affinity() == [cpu]
        assert sim.capacity_rps == pytest.approx(1200.0)
        assert "(capacity 1200 rps)" in sim.log_text()


def test_log_dir_keeps_one_log_per_server(tmp_path: Path, no_leftover_sims: None) -> None:
    with SimServer(log_dir=tmp_path / "logs") as a, SimServer(log_dir=tmp_path / "logs", protocol="grpc") as b:
        assert a.log_path != b.log_path and a.log_path.parent == tmp_path / "logs"
    assert "listening on http://" in a.log_path.read_text()
    assert "listening on grpc://" in b.log_path.read_text()


def test_start_and_stop_are_checked() -> None:
    sim = SimServer()
    sim.stop()  # before start: nothing to do
    with pytest.raises(RuntimeError, match="not started"):
        _ = sim.url
    with pytest.raises(RuntimeError, match="not started"):
        _ = sim.pid
    with sim, pytest.raises(RuntimeError, match="already started"):
        sim.start()
    sim.stop()  # idempotent


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"slots": 0}, "slots must be >= 1"),
        ({"slots": 1.5}, "slots must be an integer"),
        ({"slots": True}, "slots must be an integer"),
        ({"service_ms": 0}, "service_ms must be > 0"),
        ({"service_ms": math.nan}, "service_ms must be a finite number"),
        ({"dist": "uniform"}, "dist must be one of const, exp, lognormal"),
        ({"protocol": "http"}, "protocol must be one of rest, grpc"),
        ({"pause_s": 1.0}, "pause_s needs pause_every_s"),
        ({"pause_every_s": 1.0, "pause_s": 1.0}, "pause_s must be in"),
        ({"pause_every_s": -1.0}, "pause_every_s must be > 0"),
        ({"error_rate": 1.5}, "error_rate must be in"),
        ({"model": ""}, "model must be a non-empty name"),
        ({"model": "a/b"}, "model must be a non-empty name"),
        ({"seed": -1}, "seed must be >= 0"),
        ({"cpus": []}, "cpus must not be empty"),
        ({"cpus": [100_000]}, "cannot pin to CPUs [100000]"),
        ({"cpus": "0"}, "cpus must be a sequence"),
        ({"extra_args": "--x"}, "extra_args must be a sequence of strings"),
        ({"extra_args": ["--seed", 3]}, "extra_args must be a sequence of strings"),
        ({"startup_timeout_s": 0}, "startup_timeout_s must be > 0"),
    ],
)
def test_bad_arguments_are_a_clear_value_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        SimServer(**kwargs)


def test_a_server_that_exits_raises_target_unreachable_with_its_log(no_leftover_sims: None) -> None:
    sim = SimServer(extra_args=["--no-such-flag"])
    with pytest.raises(TargetUnreachable) as info, sim:
        pytest.fail("the body must not run")
    text = str(info.value)
    assert "satpoint sim (rest) did not start" in text and "exited with code 2" in text
    assert "unrecognized arguments: --no-such-flag" in text  # the log tail
    assert not sim.running


def test_a_port_in_use_is_reported(no_leftover_sims: None) -> None:
    with SimServer() as first:
        # extra arguments come last, so this one asks for the first server's port
        with pytest.raises(TargetUnreachable, match="cannot listen"):
            SimServer(extra_args=["--port", str(first.port)]).start()
        assert first.running


def test_a_silent_server_times_out_and_is_stopped(no_leftover_sims: None) -> None:
    sim = SimServer(startup_timeout_s=0.001)  # far shorter than Python's start-up
    with pytest.raises(TargetUnreachable, match=r"printed no listening line within 0\.001 s"):
        sim.start()
    assert wait_gone(sim.pid)
