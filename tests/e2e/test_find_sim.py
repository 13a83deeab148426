"""End-to-end: `satpoint find` against `satpoint sim` servers of known capacity C/S."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from satpoint.servers.sim.process import SimServer
from tests.documents import assert_documents_valid

pytestmark = pytest.mark.slow
# the sim drains at once: no rest between stages (the idle probes still check it)
FAST = ["--ramp", "0.5", "--min-hold", "2.5", "--max-hold", "3", "--min-requests", "500", "--no-html"]
FAST += ["--cooldown", "0"]


@pytest.mark.parametrize(
    "slots, service_ms, dist, profile",
    # exponential service times are searched by test_find_with_latency_slo below (16 slots x 20 ms, exp)
    [(4, 10.0, "const", True), (20, 40.0, "lognormal", False)],
)
def test_find_estimates_capacity(tmp_path: Path, slots: int, service_ms: float, dist: str, profile: bool) -> None:
    with SimServer(slots=slots, service_ms=service_ms, dist=dist, seed=3) as sim:
        capacity = sim.capacity_rps
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "satpoint",
                "find",
                "--url",
                sim.url,
                "--model",
                "sim",
                "--start-rps",
                str(capacity / 2.5),
                "--out",
                str(tmp_path),
                "--peak-rps",
                str(capacity * 5),
                "--emit-k8s",
                str(tmp_path / "k8s"),
                *FAST,
                *([] if profile else ["--no-profile"]),  # the profile is examined in the first case only
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert 0.85 * capacity <= s["saturation_rps"] <= 1.02 * capacity, s["search"]["steps"]
    assert s["max_throughput_rps"] == pytest.approx(capacity, rel=0.1)
    assert s["search"]["finished"] and s["search"]["replay_matches"]
    assert assert_documents_valid(tmp_path) == {"results.json": "results", "summary.json": "find-summary"}
    rec = s["recommendation"]
    assert rec["target_rps_per_replica"] == pytest.approx(0.85 * s["saturation_rps"], rel=1e-3)
    assert rec["replicas"] >= 5
    assert [row["fraction"] for row in s["latency_at"]] == ([0.5, 0.8, 0.9, 1.0] if profile else [])
    assert f"maxReplicas {rec['replicas']} = ceil(peak" in r.stdout  # what it chose and why
    hpa = (tmp_path / "k8s" / "sim-hpa.yaml").read_text()
    assert "type: AverageValue" in hpa and "name: infer_rps" in hpa
    model = (tmp_path / "k8s" / "sim-model.yaml").read_text()
    assert "replicas:" in model and "minReplicas" not in model and "maxReplicas" not in model
    # the search replays identically offline
    a = subprocess.run([sys.executable, "-m", "satpoint", "analyze", str(tmp_path)], capture_output=True, text=True)
    assert a.returncode == 0 and "reproduced exactly" in a.stdout


def test_find_with_latency_slo(tmp_path: Path) -> None:
    # 16 slots x 20 ms exponential: p99 grows well before capacity (800 rps); a tight SLO binds first
    with SimServer(slots=16, service_ms=20, dist="exp") as sim:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "satpoint",
                "find",
                "--url",
                sim.url,
                "--model",
                "sim",
                "--start-rps",
                "200",
                "--slo",
                "p99=95ms",
                "--no-profile",
                "--precision",  # what is examined is which stages the SLO failed, not how close the answer is
                "0.25",
                "--out",
                str(tmp_path),
                *FAST,
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["slo"] == {"p99": "95ms"}
    assert s["saturation_rps"] < 800
    stable = [st for st in s["stages"] if st["verdict"] == "stable"]
    assert stable and all(st["latency_ms"]["p99"] <= 95 for st in stable)
    assert any(st["verdict"] == "slo_violated" for st in s["stages"])
