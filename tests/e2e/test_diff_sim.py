"""End-to-end: ``satpoint diff`` of short ``run``s against ``satpoint sim`` at ~60 % of its capacity.

No A/A assertion here: on a shared machine two runs of the same service can differ by ~10 % at p50, more
than one run's within-run interval covers (benchmarks/RESULTS.md), so "no_change" would be a flaky claim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from satpoint.analysis.diff_verdict import DiffDoc
from satpoint.servers.sim_process import SimServer

pytestmark = pytest.mark.slow
TWO_CPUS = len(os.sched_getaffinity(0)) >= 2
STAGE = "240:1:5"  # 4 slots of 10 ms: 400 rps, so 60 %; of 12 ms: 333 rps, 72 %


def satpoint(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "satpoint", *args], capture_output=True, text=True, timeout=timeout)


def run_against(service_ms: float, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    gen = ["--generator-cpus", "1"] if TWO_CPUS else []
    with SimServer(slots=4, service_ms=service_ms, cpus=[0] if TWO_CPUS else None) as sim:
        return satpoint("run", "--url", sim.url, "--model", "sim", "--stage", STAGE, "--arrival", "poisson",
                        "--out", str(out), "--no-html", *gen, *extra)  # fmt: skip


def test_a_slower_service_at_equal_load_is_a_latency_regression(tmp_path: Path) -> None:
    base, slower = tmp_path / "base", tmp_path / "slower"
    assert run_against(10.0, base).returncode == 0
    # run --baseline: measure, then the diff against the baseline folder; exit 3 on the regression
    r = run_against(12.0, slower, "--baseline", str(base))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "verdict: regression" in r.stdout
    assert "latency_p50_ms" in (slower / "diff.html").read_text()  # the overlay page beside diff.json
    r = satpoint("diff", str(base), str(slower), "--junit", str(tmp_path / "j.xml"))
    assert r.returncode == 3, r.stdout + r.stderr
    doc = DiffDoc.model_validate(json.loads((slower / "diff.json").read_text()))
    verdicts = {m.metric: m.verdict for m in doc.metrics if m.point == "240 rps"}
    assert verdicts["latency_p50_ms"] == "regression", r.stdout
    assert verdicts["service_p50_ms"] == "regression", r.stdout
    assert verdicts["error_rate"] == "no_change"
