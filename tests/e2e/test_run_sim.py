"""End-to-end: `satpoint run` against `satpoint sim` subprocesses with known capacity."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from satpoint.metrics.results import load_results
from satpoint.servers.sim.process import SimServer
from tests.documents import assert_documents_valid

pytestmark = pytest.mark.slow
TWO_CPUS = len(os.sched_getaffinity(0)) >= 2


def satpoint(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "satpoint", *args], capture_output=True, text=True, timeout=timeout)


def summary_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.alone  # 1500 rps stable at the sim's 5 ms, the sim and the generator each on a core of its own
def test_steady_load_below_capacity_is_stable(tmp_path: Path) -> None:
    with SimServer(slots=200, service_ms=5, cpus=[0] if TWO_CPUS else None) as sim:
        url = sim.url
        gen = ["--generator-cpus", "1"] if TWO_CPUS else []
        r = satpoint(
            "run", "--url", url, "--model", "sim", "--stage", "1500:2:8", "--out", str(tmp_path), "--no-html", *gen
        )
    assert r.returncode == 0, r.stderr + r.stdout
    s = summary_of(tmp_path)
    (st,) = s["stages"]
    assert st["verdict"] == "stable", st["reasons"]
    assert st["offered_rps"] == pytest.approx(1500, rel=0.02)
    assert st["throughput_rps"] == pytest.approx(1500, rel=0.02)
    assert st["latency_ms"]["p50"] == pytest.approx(5.0, abs=1.5)
    assert st["error_rate"] == 0
    for key in ("schema_version", "tool_version", "target", "stages"):
        assert key in s
    assert s["target"] == {"url": url, "model": "sim", "protocol": "rest", "stream": False}
    for key in ("p50", "p90", "p95", "p99", "p999", "max"):
        assert key in st["latency_ms"] and key in st["service_ms"]
    assert set(st["send_lag_ms"]) >= {"p50", "p99", "max"}
    assert (tmp_path / "intervals.csv").read_text().startswith("segment,second")
    assert assert_documents_valid(tmp_path) == {"results.json": "results", "summary.json": "summary"}
    # the results folder recomputes the same summary offline
    r2 = satpoint("report", str(tmp_path))
    assert r2.returncode == 0, r2.stderr
    assert summary_of(tmp_path)["stages"] == s["stages"]


def test_pauses_show_in_intended_time_latency(tmp_path: Path) -> None:
    # three whole pause cycles (12 s): a quarter of the time paused, whatever the phase the stage starts in
    with SimServer(slots=200, service_ms=5, pause_every_s=4, pause_s=1) as sim:
        r = satpoint(
            "run", "--url", sim.url, "--model", "sim", "--stage", "200:0:12", "--out", str(tmp_path), "--no-html"
        )
    assert r.returncode == 0, r.stderr + r.stdout
    (st,) = summary_of(tmp_path)["stages"]
    assert 700 <= st["latency_ms"]["p99"] <= 1100  # about a quarter of requests wait up to 1 s
    assert st["latency_ms"]["p50"] < 50
    assert st["service_ms"]["p99"] is not None  # reported beside it
    rec = load_results(tmp_path).segments[0].records
    lat = rec.latency_s()
    delayed = float((lat > 0.05).mean())
    assert 0.15 < delayed < 0.35


def test_overload_is_saturated_at_capacity(tmp_path: Path) -> None:
    # capacity 4 / 10 ms = 400 rps, offered 600 rps (1.5x)
    with SimServer(slots=4, service_ms=10) as sim:
        r = satpoint(
            "run",
            "--url",
            sim.url,
            "--model",
            "sim",
            "--stage",
            "600:1:8",
            "--out",
            str(tmp_path),
            "--no-html",
            "--drain",
            "2",
        )
    assert r.returncode == 0, r.stderr + r.stdout
    (st,) = summary_of(tmp_path)["stages"]
    assert st["verdict"] == "saturated"
    assert st["throughput_rps"] == pytest.approx(400, rel=0.05)
    assert st["latency_trend_ms_per_s"] > 100  # latency grows with time
    assert st["queue_growth_rps"] == pytest.approx(200, rel=0.15)


def test_two_generator_processes_merge_exactly(tmp_path: Path) -> None:
    with SimServer(slots=100, service_ms=2) as sim:
        r = satpoint(
            "run",
            "--url",
            sim.url,
            "--model",
            "sim",
            "--stage",
            "400:1:4",
            "--procs",
            "2",
            "--out",
            str(tmp_path),
            "--no-html",
        )
    assert r.returncode == 0, r.stderr + r.stdout
    res = load_results(tmp_path)
    rec = res.segments[0].records
    assert len(rec) == 400 * 0.5 + 400 * 4  # the whole schedule, once
    assert (rec.intended[1:] >= rec.intended[:-1]).all()
    (st,) = summary_of(tmp_path)["stages"]
    assert st["verdict"] == "stable" and st["throughput_rps"] == pytest.approx(400, rel=0.02)
    assert res.segments[0].generator["procs"] == 2
    gen = res.segments[0].generator
    assert gen["max_inflight"] == 800  # automatic: 400 rps x 2 s
    assert gen["max_inflight_per_proc"] == 400  # each shard gets half of the cap


def test_server_errors_are_counted_and_fail_the_stage(tmp_path: Path) -> None:
    # HTTP 500 on 10 % of the inference requests, sparing the first (the pre-flight's test request)
    with SimServer(slots=20, service_ms=2, fault="error-body", error_status=500, fault_rate=0.1, fault_after=1) as sim:
        r = satpoint(
            "run", "--url", sim.url, "--model", "sim", "--stage", "100:0:4", "--out", str(tmp_path), "--no-html"
        )
    assert r.returncode == 0, r.stderr
    (st,) = summary_of(tmp_path)["stages"]
    assert st["verdict"] == "failing"
    assert st["errors"]["http_500"] > 0
    assert st["error_rate"] == pytest.approx(0.1, abs=0.06)


def test_server_killed_mid_run_keeps_results(tmp_path: Path) -> None:
    with SimServer(slots=50, service_ms=2) as sim:
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "satpoint",
                "run",
                "--url",
                sim.url,
                "--model",
                "sim",
                "--stage",
                "100:0:6",
                "--out",
                str(tmp_path),
                "--no-html",
                "--drain",
                "1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(3.0)
        os.kill(sim.pid, signal.SIGKILL)  # the server dies mid-run (SimServer still cleans up after it)
        _, err = run.communicate(timeout=60)
    assert run.returncode == 1, err  # the run failed: not bad input (2), not a pass (0)
    assert "the target stopped answering during stage 1 (100 rps)" in " ".join(err.split())
    s = summary_of(tmp_path)
    (st,) = s["stages"]
    assert st["verdict"] == "failing"
    assert set(st["errors"]) <= {"conn_refused", "conn_reset", "conn_error"}
    assert s["target_lost"]["stage"] == 1 and s["target_lost"]["at_s"] > 1.0
    rec = load_results(tmp_path).segments[0].records
    assert (rec.outcome == 0).sum() > 100  # what succeeded before the kill is kept


def test_ctrl_c_stops_cleanly_and_writes_results(tmp_path: Path) -> None:
    with SimServer(slots=50, service_ms=2) as sim:
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "satpoint",
                "run",
                "--url",
                sim.url,
                "--model",
                "sim",
                "--stage",
                "100:0:60",
                "--out",
                str(tmp_path),
                "--no-html",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(4.0)
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=30)
    assert run.returncode == 130, err
    assert "Traceback" not in err
    s = summary_of(tmp_path)
    assert s["interrupted"] is True
    rec = load_results(tmp_path).segments[0].records
    assert 200 < len(rec) < 1000  # what was due until the interruption


@pytest.mark.parametrize(
    "args, message",
    [
        (["--url", "http://127.0.0.1:9", "--model", "m", "--stage", "10:0:1"], "cannot reach"),
        (["--url", "{sim}", "--model", "nope", "--stage", "10:0:1"], "not found"),
        (["--url", "{sim}", "--model", "sim", "--stage", "100:0:5", "--stage", "50:0:5"], "rise monotonically"),
        (["--url", "{sim}", "--model", "sim", "--stage", "abc"], "RPS:RAMP_S:HOLD_S"),
        (["--url", "{sim}", "--model", "sim", "--stage", "10:0:1", "--payload", "/nonexistent.json"], "cannot read"),
    ],
)
def test_bad_input_gets_a_clear_error(args: list[str], message: str, tmp_path: Path) -> None:
    with SimServer(slots=2, service_ms=1) as sim:
        r = satpoint("run", *[a.replace("{sim}", sim.url) for a in args], "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_user_payload_file_is_sent(tmp_path: Path) -> None:
    payload = tmp_path / "p.jsonl"
    payload.write_text(
        json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]})
        + "\n"
        + json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [3, 4]}]})
        + "\n"
    )
    with SimServer(slots=10, service_ms=1) as sim:
        r = satpoint(
            "run",
            "--url",
            sim.url,
            "--model",
            "sim",
            "--stage",
            "50:0:2",
            "--payload",
            str(payload),
            "--header",
            "Seldon-Model: sim",
            "--out",
            str(tmp_path / "o"),
            "--no-html",
        )
    assert r.returncode == 0, r.stderr
    assert summary_of(tmp_path / "o")["stages"][0]["throughput_rps"] > 0
