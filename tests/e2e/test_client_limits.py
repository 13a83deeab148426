"""End-to-end: servers that hold many requests at once, or answer in seconds (real sim, real sockets)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from satpoint.servers.sim_process import SimServer

pytestmark = pytest.mark.slow


def run(*args: str) -> dict[str, Any]:
    out = Path(args[args.index("--out") + 1])
    r = subprocess.run([sys.executable, "-m", "satpoint", "run", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((out / "summary.json").read_text())  # type: ignore[no-any-return]


def test_a_small_connection_cap_is_client_limited_and_the_automatic_cap_is_not(tmp_path: Path) -> None:
    # 1000 slots x 500 ms: capacity 2000 rps; at 800 rps it holds 400 requests at once (Little's law)
    with SimServer(slots=1000, service_ms=500) as sim:
        plan = ["--stage", "100:1:6", "--stage", "800:1:8"]
        capped = run("--url", sim.url, "--model", "sim", *plan, "--max-inflight", "200", "--out", str(tmp_path / "a"))
        auto = run("--url", sim.url, "--model", "sim", *plan, "--out", str(tmp_path / "b"))
    low, high = capped["stages"]
    assert low["verdict"] == "stable"
    assert high["verdict"] == "client_limited", high["reasons"]
    assert "raise --max-inflight" in high["reasons"][0]
    assert any(w.startswith("CLIENT LIMITED") for w in capped["warnings"])
    assert [s["verdict"] for s in auto["stages"]] == ["stable", "stable"]
    assert auto["stages"][1]["throughput_rps"] == pytest.approx(800, rel=0.03)


def test_a_server_answering_in_seconds_is_stable_below_capacity(tmp_path: Path) -> None:
    # 40 slots x 2 s: capacity 20 rps; at 14 rps (70 %) the pipeline takes 2 s to fill after the ramp
    with SimServer(slots=40, service_ms=2000) as sim:
        s = run("--url", sim.url, "--model", "sim", "--stage", "14:1:12", "--out", str(tmp_path / "s"))
    (st,) = s["stages"]
    assert st["verdict"] == "stable", st["reasons"]
    assert st["window_start_s"] >= 1 + 1.5 * 2.0
    assert st["latency_ms"]["p50"] == pytest.approx(2000, rel=0.02)
