"""``scale-test --replicas-prom`` through a real Prometheus (Debian's ``prometheus``), started by the test on a
loopback port with a configuration of its own, scraping ``sim --autoscale``'s /metrics once a second."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from satpoint.servers.sim.process import SimServer
from tests.e2e.test_scale_sim import SCALED, SHAPE, _get, _truth, satpoint

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Prometheus (apt-get install prometheus)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prometheus(scrape: str, folder: Path) -> Iterator[str]:
    """A Prometheus scraping ``scrape`` (host:port) every second; yields its URL; stopped by its pid."""
    port = _free_port()
    config = folder / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: sim\n    static_configs:\n      - targets: ['{scrape}']\n"
    )
    log = (folder / "prometheus.log").open("w")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        query = urllib.parse.urlencode({"query": "satpoint_sim_replicas_ready"})
        while True:  # ready, and the first scrape in
            try:
                if _get(f"{url}/api/v1/query?{query}")["data"]["result"]:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (folder / "prometheus.log").read_text()[-2000:]
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def test_replicas_read_through_a_real_prometheus(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with (
        SimServer(slots=1, service_ms=20.0, extra_args=SCALED) as sim,
        prometheus(f"{sim.host}:{sim.port}", tmp_path) as prom,
    ):
        r = satpoint("scale-test", "--url", sim.url, "-m", "sim", *SHAPE, "--replicas-prom", prom,
                     "--replicas-query", "satpoint_sim_replicas_ready", "--replicas-desired-query",
                     "satpoint_sim_replicas_desired", "--out", str(out))  # fmt: skip
        events = _get(f"{sim.url}/events")["events"]
        missing = satpoint("scale-test", "--url", sim.url, "-m", "sim", "--from", "10", "--to", "20",
                           "--replicas-prom", prom, "--replicas-query", "no_such_metric")  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    block = json.loads((out / "summary.json").read_text())["scale"]
    truth = _truth(out, events)
    # a reading a second, placed mid-way (half a second), behind a scrape a second: within 2 s, never early by > 0.5 s
    for seen, real in (
        (block["time_to_desired_s"], truth["desired"]),
        (block["time_to_replicas_s"], truth["ready"][-1]),
    ):
        assert -0.6 <= seen - real <= 2.0, (block["events"], truth)
    assert block["replicas_peak"] == 4 and block["recovered"] is True
    assert abs(block["time_to_recover_s"] - truth["ready"][-1]) <= 1.0
    assert missing.returncode == 2 and "returned no series" in missing.stderr
