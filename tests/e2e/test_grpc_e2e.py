"""End-to-end over OIP gRPC: the sim's gRPC face and the embedded MLServer's gRPC port."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


@contextmanager
def grpc_sim(*args: str) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "satpoint", "sim", "--protocol", "grpc", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"grpc://([\d.]+:\d+)", line)
        assert m, line
        yield m.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "satpoint", *args], capture_output=True, text=True, timeout=timeout)


def summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())  # type: ignore[no-any-return]


def test_grpc_run_verdicts_against_sim(tmp_path: Path) -> None:
    with grpc_sim("--slots", "4", "--service-ms", "10") as addr:  # capacity 400 rps
        ok = run_cli(
            "run",
            "--protocol",
            "grpc",
            "--url",
            addr,
            "--model",
            "sim",
            "--stage",
            "300:1:5",
            "--header",
            "seldon-model:sim",
            "--out",
            str(tmp_path / "a"),
            "--no-html",
        )
        over = run_cli(
            "run",
            "--protocol",
            "grpc",
            "--url",
            addr,
            "--model",
            "sim",
            "--stage",
            "600:1:6",
            "--drain",
            "2",
            "--out",
            str(tmp_path / "b"),
            "--no-html",
        )
    assert ok.returncode == 0, ok.stderr
    (a,) = summary(tmp_path / "a")["stages"]
    assert a["verdict"] == "stable", a["reasons"]
    assert a["throughput_rps"] == pytest.approx(300, rel=0.02)
    assert a["latency_ms"]["p50"] == pytest.approx(10, abs=2)
    assert summary(tmp_path / "a")["target"]["protocol"] == "grpc"
    assert over.returncode == 0, over.stderr
    (b,) = summary(tmp_path / "b")["stages"]
    assert b["verdict"] == "saturated"
    assert b["throughput_rps"] == pytest.approx(400, rel=0.05)


def test_grpc_find_estimates_capacity(tmp_path: Path) -> None:
    with grpc_sim("--slots", "8", "--service-ms", "10") as addr:  # capacity 800 rps
        r = run_cli(
            "find",
            "--protocol",
            "grpc",
            "--url",
            addr,
            "--model",
            "sim",
            "--start-rps",
            "320",
            "--no-profile",
            "--ramp",
            "1",
            "--min-hold",
            "2.5",
            "--max-hold",
            "3",
            "--min-requests",
            "500",
            "--out",
            str(tmp_path),
            "--no-html",
        )
    assert r.returncode == 0, r.stdout + r.stderr
    s = summary(tmp_path)
    assert 0.85 * 800 <= s["saturation_rps"] <= 1.02 * 800, s["search"]["steps"]


def test_grpc_errors_are_classified(tmp_path: Path) -> None:
    with grpc_sim("--slots", "8", "--service-ms", "1", "--error-rate", "0.2", "--seed", "1") as addr:
        r = run_cli(
            "run",
            "--protocol",
            "grpc",
            "--url",
            addr,
            "--model",
            "sim",
            "--stage",
            "100:0:3",
            "--out",
            str(tmp_path),
            "--no-html",
        )
    if r.returncode == 2:  # the pre-run test request drew an error: a clear message, no traceback
        assert "failed before the run" in r.stderr and "Traceback" not in r.stderr
        return
    (st,) = summary(tmp_path)["stages"]
    assert st["verdict"] == "failing"
    assert st["errors"].get("grpc_13", 0) > 0  # INTERNAL


def test_grpc_run_on_embedded_mlserver(tmp_path: Path) -> None:
    from satpoint.servers.mlserver import MLServerSettings, MLServerTarget

    with MLServerTarget(MLServerSettings()) as server:
        r = run_cli(
            "run",
            "--protocol",
            "grpc",
            "--url",
            server.grpc_address,
            "--model",
            server.model_name,
            "--stage",
            "100:1:5",
            "--out",
            str(tmp_path),
            "--no-html",
        )
        time.sleep(0.1)
    assert r.returncode == 0, r.stdout + r.stderr
    (st,) = summary(tmp_path)["stages"]
    assert st["error_rate"] == 0
    assert st["throughput_rps"] == pytest.approx(100, rel=0.02)
    assert st["latency_ms"]["p50"] is not None and st["latency_ms"]["p99"] is not None
