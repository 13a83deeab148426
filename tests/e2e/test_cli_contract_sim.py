"""End-to-end against ``satpoint sim``: ``run -u grpc://…`` speaks gRPC (the URL's scheme picks the protocol,
as on ``coldstart``); ``find --trace --threshold`` gates the answer's replay (exit 3 when it fails) and
``--slo`` judges every replay as ``find --slo`` judges a search; a stopped ``find --trace`` exits 130, its
gates not judged."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from satpoint.servers.sim.process import SimServer
from tests.documents import assert_documents_valid

pytestmark = pytest.mark.slow

T0 = 1_767_225_600.0


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "satpoint", *args], capture_output=True, text=True, timeout=120)


def summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())  # type: ignore[no-any-return]


def test_run_with_a_grpc_url_speaks_grpc(tmp_path: Path) -> None:
    with SimServer(slots=4, service_ms=2.0, protocol="grpc") as sim:  # its url: 127.0.0.1:PORT
        r = cli("run", "-u", f"grpc://{sim.url}", "-m", "sim", "-s", "50:0:2", "--out", str(tmp_path / "a"),
                "--no-html")  # fmt: skip
        refused = cli("run", "-u", f"grpc://{sim.url}", "-m", "sim", "-s", "50:0:2", "--protocol", "rest")
    assert r.returncode == 0, r.stderr + r.stdout
    s = summary(tmp_path / "a")
    assert s["target"]["protocol"] == "grpc"
    assert s["stages"][0]["verdict"] == "stable" and s["stages"][0]["throughput_rps"] > 0
    assert refused.returncode == 2 and "is a gRPC URL" in refused.stderr


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"  # 4 s of trace at 100 rps
    path.write_text("timestamp\n" + "".join(f"{T0 + k / 100:.6f}\n" for k in range(400)))
    return path


def _find_trace(url: str, trace: Path, out: Path, *extra: str, budget_s: int = 40) -> subprocess.CompletedProcess[str]:
    # 2 slots x 2.5 ms: 800 rps, 8 times the trace's rate; a coarse search keeps the replays few and short
    return cli("find", "--url", url, "--model", "sim", "--trace", str(trace), "--trace-stage-s", "2",
               "--start-speed", "4", "--precision", "0.5", "--cooldown", "0", "--no-profile", "--no-confirm",
               "--budget-s", str(budget_s), "--out", str(out), "--no-html", *extra)  # fmt: skip


def test_find_trace_threshold_gates_the_answer_and_slo_judges_the_replays(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    with SimServer(slots=2, service_ms=2.5) as sim:
        failed = _find_trace(sim.url, trace, tmp_path / "f", "--threshold", "p99<1ms", "--threshold", "error_rate<1%")
        passed = _find_trace(sim.url, trace, tmp_path / "p", "--threshold", "p99<10s")
        # --budget-s 20: the replays at x4 and x1 (1 s and 4 s, each with about 5.7 s of overhead), not the
        # 16 s one at x0.25: two replays judged by the SLO, neither stable
        slo = _find_trace(sim.url, trace, tmp_path / "s", "--slo", "p99<1ms", budget_s=20)
    assert failed.returncode == 3, failed.stderr + failed.stdout
    gates = summary(tmp_path / "f")["thresholds"]
    assert [(g["expr"], g["passed"]) for g in gates] == [("p99<1ms", False), ("error_rate<1%", True)]
    assert summary(tmp_path / "f")["trace_headroom"]["speed"] is not None  # an answer, and its gate failed
    assert "p99<1ms" in failed.stdout
    assert passed.returncode == 0, passed.stderr + passed.stdout
    assert [g["passed"] for g in summary(tmp_path / "p")["thresholds"]] == [True]
    # p99 under 1 ms is out of reach at 2.5 ms per request: no replay is stable, no headroom (exit 4)
    assert slo.returncode == 4, slo.stderr + slo.stdout
    h = summary(tmp_path / "s")["trace_headroom"]
    assert h["speed"] is None and h["slo_ms"] == {"p99": 1.0}
    assert len(h["replays"]) >= 2 and all(r["verdict"] != "stable" for r in h["replays"])
    assert assert_documents_valid(tmp_path / "s")["summary.json"] == "headroom-summary"  # no answer: the block alone


def test_find_trace_stopped_exits_130_whatever_its_gates(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"  # 60 s of trace at 50 rps: the first replay is still running when stopped
    trace.write_text("timestamp\n" + "".join(f"{T0 + k / 50:.6f}\n" for k in range(3000)))
    out = tmp_path / "out"
    with SimServer(slots=2, service_ms=2.5) as sim:
        args = ["find", "--url", sim.url, "--model", "sim", "--trace", str(trace), "--start-speed", "1",
                "--threshold", "p99<10s", "--cooldown", "0", "--budget-s", "120",
                "--out", str(out), "--no-html"]  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-m", "satpoint", *args], stdout=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            assert proc.stdout is not None
            for line in proc.stdout:  # wait until the first replay sends
                if "replaying at speed" in line or time.monotonic() > deadline:
                    break
            time.sleep(2)
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 130
    assert (out / "headroom.json").exists()
