"""End-to-end: servers that hold many requests at once, or answer in seconds (real sim, real sockets)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import load_results
from satpoint.servers.sim.process import SimServer

pytestmark = pytest.mark.slow


def run(*args: str) -> dict[str, Any]:
    out = Path(args[args.index("--out") + 1])
    r = subprocess.run([sys.executable, "-m", "satpoint", "run", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((out / "summary.json").read_text())  # type: ignore[no-any-return]


def test_a_small_connection_cap_is_client_limited_and_the_automatic_cap_is_not(tmp_path: Path) -> None:
    # 1000 slots x 500 ms: capacity 2000 rps; at 800 rps it holds 400 requests at once (Little's law).
    # Holds of 3 and 4 s leave steady windows of 2.25 s and 3.25 s after the 0.75 s it takes to fill
    # (1.5 x 500 ms): a few hundred to a few thousand requests, and the capped run's backlog drains in ~5 s
    with SimServer(slots=1000, service_ms=500) as sim:
        plan = ["--stage", "100:1:3", "--stage", "800:1:4"]
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


# --- descriptor exhaustion: the generator's limit, never the server's ---------------------------------

#: the sim for the descriptor tests: 400 slots x 500 ms (capacity 800 rps); at 160 rps it holds 80 requests
FD_PLAN = ["--stage", "160:1:4", "--max-inflight", "200", "--timeout", "5", "--drain", "1"]
FD_ROWS = 160 * 1 // 2 + 160 * 4  # the ramp's requests and the hold's


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[SimServer]:
    with SimServer(slots=400, service_ms=500) as sim:
        yield sim


def run_with_fd_limit(soft: int, hard_low: bool, *args: str) -> subprocess.CompletedProcess[str]:
    """``satpoint run`` in a process whose soft open-files limit is ``soft`` (and its hard one too when
    ``hard_low``: raising cannot help then); generator processes it spawns inherit the limit."""

    def limit() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, soft if hard_low else hard))

    cmd = [sys.executable, "-m", "satpoint", "run", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, preexec_fn=limit)


def accounted(out: Path) -> Records:
    """Every due request has exactly one row, with exactly one outcome."""
    rec = load_results(out).segments[0].records
    assert len(rec) == FD_ROWS
    counts = {o: int(np.count_nonzero(rec.outcome == o)) for o in Outcome}
    assert sum(counts.values()) == FD_ROWS
    return rec


def renders(out: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "satpoint", "report", str(out)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "report.html").stat().st_size > 0


def test_an_explicit_cap_above_the_soft_fd_limit_raises_it(tmp_path: Path, slow_sim: SimServer) -> None:
    """--max-inflight 200 in a process whose soft limit is 64 (the hard one is higher): the generator raises
    its soft limit, and the server is measured, not the generator's descriptors."""
    out = tmp_path / "raised"
    r = run_with_fd_limit(64, False, "--url", slow_sim.url, "--model", "sim", *FD_PLAN, "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rec = accounted(out)
    assert not np.isin(rec.outcome, [Outcome.CONN_ERROR, Outcome.GENERATOR_RESOURCES]).any()
    s = json.loads((out / "summary.json").read_text())
    (st,) = s["stages"]
    assert st["verdict"] == "stable", st["reasons"]
    assert st["errors"] == {}
    assert "target_lost" not in s or not s["target_lost"]
    gen = load_results(out).segments[0].generator
    assert gen["fd_limit"] > 64 and gen["max_inflight_per_proc"] == 200
    assert "max_inflight_fd_limited" not in gen
    renders(out)


def test_a_hard_fd_limit_below_the_cap_is_the_generators_limit(tmp_path: Path, slow_sim: SimServer) -> None:
    """Soft and hard limit 64 (raising cannot help), --max-inflight 200 over two generator processes: each
    process holds what its limit leaves room for and says so; the stage is generator_limited, never
    failing nor the target lost, and every due request has its row."""
    out = tmp_path / "clamped"
    args = ["--url", slow_sim.url, "--model", "sim", *FD_PLAN, "--procs", "2", "--out", str(out)]
    r = run_with_fd_limit(64, True, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = accounted(out)
    assert not np.isin(rec.outcome, [Outcome.CONN_ERROR, Outcome.CONN_REFUSED, Outcome.CONN_RESET]).any()
    s = json.loads((out / "summary.json").read_text())
    (st,) = s["stages"]
    assert st["verdict"] == "generator_limited", st["reasons"]
    assert "open-files limit (64)" in st["reasons"][0]
    assert not s.get("target_lost")
    seg = load_results(out).segments[0]
    gen = seg.generator
    assert gen["fd_limit"] == 64
    limited = gen["max_inflight_fd_limited"]
    assert limited["asked_per_proc"] == 100 and limited["fd_limit"] == 64
    assert 1 <= limited["kept_per_proc"] < 64 and gen["max_inflight_per_proc"] == limited["kept_per_proc"]
    assert any("open-files limit is 64" in n for n in seg.notes)
    renders(out)
