"""End-to-end: `satpoint run --threshold` exit codes against a sim subprocess (0 pass, 3 fail, 2 bad syntax)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from satpoint.servers.sim.process import SimServer

pytestmark = pytest.mark.slow


def satpoint(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "satpoint", *args], capture_output=True, text=True, timeout=timeout)


def summary_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with SimServer(slots=4, service_ms=5) as sim:  # capacity 800 rps, latency 5 ms
        yield sim.url


def test_passing_thresholds_exit_0(url: str, tmp_path: Path) -> None:
    gates = ["--threshold", "p99<1s", "--threshold", "error_rate<1%", "--threshold", "throughput_rps>50"]
    r = satpoint("run", "-u", url, "-m", "sim", "--stage", "100:0:3", "--out", str(tmp_path), "--no-html", *gates)
    assert r.returncode == 0, r.stdout + r.stderr
    th = summary_of(tmp_path)["thresholds"]
    assert [t["expr"] for t in th] == ["p99<1s", "error_rate<1%", "throughput_rps>50"]
    assert all(t["passed"] for t in th)
    assert "✓ p99<1s" in r.stdout


def test_a_failing_threshold_exits_3_after_writing_everything(url: str, tmp_path: Path) -> None:
    r = satpoint("run", "-u", url, "-m", "sim", "--stage", "100:0:3", "--out", str(tmp_path), "--no-html",
                 "--threshold", "p99<1ms", "--threshold", "error_rate<1%")  # fmt: skip
    assert r.returncode == 3, r.stdout + r.stderr
    s = summary_of(tmp_path)
    p99, err = s["thresholds"]
    assert p99["passed"] is False and p99["actual"] >= 5.0  # every answer takes at least 5 ms
    assert err["passed"] is True
    assert s["stages"][0]["verdict"] == "stable"  # the stage itself is fine: only the SLO gate failed
    assert (tmp_path / "results.json").exists() and (tmp_path / "intervals.csv").exists()
    assert "✗ p99<1ms" in r.stdout


def test_closed_loop_run_with_thresholds(url: str, tmp_path: Path) -> None:
    r = satpoint("run", "-u", url, "-m", "sim", "--users", "2", "--duration", "3", "--think-ms", "5",
                 "--out", str(tmp_path), "--no-html", "--threshold", "throughput_rps>50")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    s = summary_of(tmp_path)
    assert s["mode"] == "closed_loop" and s["closed_loop"]["users"] == 2
    assert "CLOSED LOOP (2 users)" in r.stdout
    # 2 users / (5 ms service + 5 ms think) = 200 rps at most
    assert 100 < s["stages"][0]["throughput_rps"] <= 210
    assert s["thresholds"][0]["passed"] is True


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--stage", "10:1", "--threshold", "p99<<5ms"],
        ["run", "--stage", "10:1", "--threshold", "saturation_rps>10"],  # a find metric
        ["run", "--stage", "10:1", "--users", "2", "--duration", "1"],  # open and closed loop at once
        ["run", "--users", "2"],  # no --duration
        ["run"],  # neither
        ["find", "--threshold", "p99 is fast"],
    ],
)
def test_usage_errors_exit_2_before_any_load(args: list[str], tmp_path: Path) -> None:
    # the URL is unreachable on purpose: these must fail on the arguments, before touching a server
    r = satpoint(*args, "-u", "http://127.0.0.1:9", "-m", "sim", "--out", str(tmp_path / "out"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "error" in r.stderr
    assert not (tmp_path / "out").exists()
