"""End-to-end: `satpoint run --server-pid --metrics-url` against `satpoint sim`: the server's process tree
is sampled by a separate observer process that never outlives the run, a metrics endpoint that does not
answer is reported, the folder reloads with the same figures, and without either the run says what it
could not see."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

import satpoint
from satpoint.servers.sim.process import SimServer

pytestmark = pytest.mark.slow


def satpoint_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "satpoint", *args], capture_output=True, text=True, timeout=120)


def summary_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())  # type: ignore[no-any-return]


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def observers() -> list[int]:
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if "satpoint.observe.agent" in " ".join(p.info["cmdline"] or []):
                found.append(p.info["pid"])
        except psutil.Error:
            continue
    return found


def test_run_samples_the_servers_tree_and_reports_a_silent_metrics_url(tmp_path: Path) -> None:
    before = set(observers())
    dead = f"http://127.0.0.1:{dead_port()}/metrics"
    with SimServer(slots=4, service_ms=2) as sim:
        r = satpoint_cli(
            "run", "--url", sim.url, "--model", "sim", "--stage", "200:1:3", "--out", str(tmp_path), "--no-html",
            "--server-pid", str(sim.pid), "--metrics-url", dead,
        )  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    assert set(observers()) <= before, "the observer process outlived the run"
    s = summary_of(tmp_path)
    (st,) = s["stages"]
    srv = st["server"]
    assert srv["samples"] >= 4 and srv["procs_max"] >= 1 and srv["rss_mb"]["max"] > 1
    assert 0 < srv["cpu_cores"]["mean"] < 2 and srv["cpu_us_per_request"] > 0
    assert st["server_metrics"] == []  # every scrape failed
    assert s["observed"]["server_pids"] == [sim.pid]
    # the machine's speed, timed before the segment (what diff compares between two runs)
    assert s["machine_speed"]["reference_us"] > 0 and list(s["machine_speed"]["segments"]) == ["0"]
    assert any("every scrape of" in n for n in s["observed"]["not_seen"])
    assert "server side" in r.stdout and "not seen:" in r.stdout
    assert (tmp_path / "server-samples.csv").exists() and (tmp_path / "server-metrics.jsonl").exists()
    # the folder reloads with the same figures
    assert satpoint.load(tmp_path).summary.model_dump(exclude_unset=True)["stages"][0]["server"] == srv


def test_a_remote_only_run_says_what_it_could_not_see(tmp_path: Path) -> None:
    with SimServer(slots=4, service_ms=2) as sim:
        r = satpoint_cli(
            "run", "--url", sim.url, "--model", "sim", "--stage", "100:1:2", "--out", str(tmp_path), "--no-html"
        )
    assert r.returncode == 0, r.stderr + r.stdout
    s = summary_of(tmp_path)
    assert s["stages"][0]["server"] is None and s["stages"][0]["server_metrics"] == []
    not_seen = " ".join(s["observed"]["not_seen"])
    assert "--server-pid" in not_seen and "--metrics-url" in not_seen
    assert not (tmp_path / "server-samples.csv").exists()
