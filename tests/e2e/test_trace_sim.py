"""End-to-end: `satpoint run --trace` replays a recorded trace against `satpoint sim` (4 slots x 10 ms)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from satpoint.metrics.results import load_results
from satpoint.servers.sim.process import SimServer

pytestmark = pytest.mark.slow


def test_trace_replay_keeps_the_trace_times_and_judges_each_stage(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    t0 = 1_767_225_600_000.0  # epoch milliseconds (told apart from seconds by magnitude)
    gaps = rng.exponential(1000 / 100, size=1200)  # ~12 s of trace at 100 rps
    times_ms = t0 + np.cumsum(gaps)
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "".join(json.dumps({"ts": round(float(t), 3), "payload": k % 3}) + "\n" for k, t in enumerate(times_ms))
    )
    out = tmp_path / "out"
    with SimServer(slots=4, service_ms=10) as sim:
        r = subprocess.run(
            [sys.executable, "-m", "satpoint", "run", "--url", sim.url, "--model", "sim", "--trace", str(trace),
             "--trace-time-column", "ts", "--speed", "1.2", "--trace-stage-s", "6", "--server-slots", "4",
             "--out", str(out), "--no-html"],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    assert "replay fidelity" in r.stdout
    assert "measured against a simple queue's prediction" in r.stdout
    s = json.loads((out / "summary.json").read_text())
    tr = s["trace"]
    assert tr["replayed"] == tr["rows"] == 1200 and tr["speed"] == 1.2
    assert tr["columns"] == {"payload": {"min": 0, "max": 2}}
    assert len(s["stages"]) == len(tr["fidelity"]) == 2  # 12 s of trace, stages of 6 s (5 s at speed 1.2)
    assert sum(f["requests"] for f in tr["fidelity"]) == 1200
    for st, fid in zip(s["stages"], tr["fidelity"], strict=True):
        assert st["verdict"] == "stable", st["reasons"]  # 120 rps offered against 400 rps of capacity
        assert st["latency_ms"]["p50"] == pytest.approx(10.0, abs=3.0)
        assert fid["late_fraction"] < 0.2 and fid["lag_ms"]["p50"] < 1.0
    pred = tr["prediction"]  # the simple queue beside the measurement: 4 slots as given, idle-server service
    assert pred["slots"] == 4 and pred["slots_source"] == "given" and tr["server_slots"] == 4
    assert pred["service_ms"]["p50"] == pytest.approx(10.0, abs=3.0)
    for row, st in zip(pred["stages"], s["stages"], strict=True):
        assert row["measured_ms"] == {q: st["latency_ms"][q] for q in ("p50", "p99")}
        assert row["predicted_ms"]["p50"] == pytest.approx(st["latency_ms"]["p50"], abs=3.0)
    # the rows were due at the trace's own times, relative to its first request, at 1.2 times its pace
    seg = load_results(out).segments[0]
    assert seg.arrival == "trace"
    expected = (times_ms - times_ms[0]) / 1000 / 1.2
    assert np.allclose(seg.records.intended, expected, atol=1e-6)
