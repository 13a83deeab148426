"""``sim --autoscale`` over HTTP: the replica counts on /replicas, /metrics and the event log on /events follow
the load; the routes do not exist without ``--autoscale``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from satpoint.servers.sim.process import SimServer

pytestmark = pytest.mark.slow

_ARGS = ["--autoscale", "1:3", "--scale-delay-s", "1", "--scale-sync-s", "0.5", "--scale-down-window-s", "1",
         "--scale-target", "0.5"]  # fmt: skip


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        body: bytes = r.read()
        return body


def _infer(url: str) -> None:
    req = urllib.request.Request(
        f"{url}/v2/models/sim/infer", data=b'{"inputs": []}', headers={"content-type": "application/json"}
    )
    urllib.request.urlopen(req, timeout=10).read()


def test_replicas_follow_the_load_and_the_events_say_when() -> None:
    with SimServer(slots=1, service_ms=20.0, extra_args=_ARGS) as sim:  # 50 rps per replica
        assert json.loads(_get(f"{sim.url}/replicas")) == {"desired": 1, "ready": 1}
        assert _get(f"{sim.url}/replicas/ready") == b"1\n"
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:  # closed loop of 8: far above 0.5 utilisation of one replica
            while time.perf_counter() - t0 < 2.5:
                list(pool.map(lambda _: _infer(sim.url), range(16)))
        metrics = _get(f"{sim.url}/metrics").decode()
        assert "satpoint_sim_replicas_ready 3" in metrics and "satpoint_sim_replicas_desired 3" in metrics
        doc = json.loads(_get(f"{sim.url}/events"))
        kinds = [e["kind"] for e in doc["events"]]
        assert kinds[0] == "desired" and kinds.count("ready") == 2
        decision = doc["events"][0]
        readies = [e for e in doc["events"] if e["kind"] == "ready"]
        assert all(r["t_s"] == pytest.approx(decision["t_s"] + 1.0, abs=1e-6) for r in readies)
        assert decision["t_s"] == pytest.approx(round(decision["t_s"] / 0.5) * 0.5, abs=1e-6)  # a sync tick
        assert abs(decision["unix_s"] - time.time()) < 10
        time.sleep(2.5)  # idle: recommendations fall to 1, applied once the 1 s window has passed
        assert json.loads(_get(f"{sim.url}/replicas")) == {"desired": 1, "ready": 1}
        doc = json.loads(_get(f"{sim.url}/events"))
        assert [e["kind"] for e in doc["events"]].count("removed") == 2


def test_without_autoscale_the_routes_are_not_there() -> None:
    with SimServer(slots=1, service_ms=5.0) as sim, pytest.raises(urllib.error.HTTPError) as err:
        _get(f"{sim.url}/replicas")
    assert err.value.code == 404


def test_the_command_refuses_autoscale_over_grpc() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "satpoint", "sim", "--protocol", "grpc", "--autoscale", "1:2", "--port", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "--autoscale" in out.stderr
