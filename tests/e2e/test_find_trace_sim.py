"""End-to-end: `satpoint find --trace` searches the speed factor of a trace against `satpoint sim`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.servers.sim.process import SimServer
from tests.documents import assert_documents_valid

pytestmark = pytest.mark.slow


def test_find_trace_finds_the_headroom_of_a_constant_trace(tmp_path: Path) -> None:
    t0 = 1_767_225_600.0
    trace = tmp_path / "trace.csv"  # 12 s of trace at exactly 100 rps
    trace.write_text("timestamp\n" + "".join(f"{t0 + k / 100:.6f}\n" for k in range(1200)))
    out = tmp_path / "out"
    # 2 slots x 2.5 ms: 800 rps, 8 times the trace's rate; a coarse search keeps the replays few and short
    with SimServer(slots=2, service_ms=2.5) as sim:
        r = subprocess.run(
            [sys.executable, "-m", "satpoint", "find", "--url", sim.url, "--model", "sim", "--trace", str(trace),
             "--start-speed", "4", "--precision", "0.5", "--cooldown", "0", "--no-profile", "--budget-s", "60",
             "--emit-k8s", str(tmp_path / "k8s"), "--out", str(out), "--no-html"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    h = json.loads((out / "summary.json").read_text())["trace_headroom"]
    lo, hi = h["bracket"]
    assert h["speed"] == lo and hi is not None and hi / lo - 1 <= 0.5
    assert 8 / 1.5 <= h["speed"] <= 8 * 1.5  # the sim's capacity over the trace's rate, to the precision
    assert h["confirmed"] and h["replays"][-1]["phase"] == "confirm" and h["replays"][-1]["verdict"] == "stable"
    assert h["trace_peak_rps_per_second"] == 100 and h["trace_peak_rps_per_minute"] == pytest.approx(100, rel=0.01)
    assert h["capacity_rps"] == pytest.approx(h["speed"] * h["trace_peak_rps_per_minute"], rel=1e-3)
    assert h["replicas_for_peak"] == 1
    assert [row["fraction"] for row in h["latency_at"]] == [1.0]
    # the answer's replay is a run --trace folder of its own; the top summary is its summary plus the block
    answer = json.loads((out / h["answer_folder"] / "summary.json").read_text())
    assert answer["trace"]["speed"] == pytest.approx(h["speed"], rel=1e-3)
    assert all(s["verdict"] == "stable" for s in answer["stages"])
    assert "headroom: X = " in r.stdout and "busiest minute" in r.stdout
    assert "maxReplicas 1" in (tmp_path / "k8s" / "sim-hpa.yaml").read_text()
    kinds = assert_documents_valid(out)  # the top folder and every replay's
    assert kinds["headroom.json"] == "headroom" and kinds["summary.json"] == "summary"
    assert kinds[f"{h['answer_folder']}/results.json"] == "results"
    # satpoint report rewrites every replay's files; headroom.json, the search's record, is kept as it is
    headroom = (out / "headroom.json").read_text()
    (out / h["answer_folder"] / "stages.csv").unlink()
    again = CliRunner().invoke(app, ["report", str(out)])
    assert again.exit_code == 0, again.output
    assert (out / h["answer_folder"] / "stages.csv").is_file() and (out / "headroom.json").read_text() == headroom
    assert f"{h['answer_folder']}/summary.json" in again.output.replace("\n", "")
