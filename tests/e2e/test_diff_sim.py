"""End-to-end: ``satpoint diff`` of short ``run``s against ``satpoint sim`` at ~60 % of its capacity, and the
gate against a server that breaks (HTTP 500 to every request after its test inference; killed under load).

No A/A assertion here: on a shared machine two runs of the same service can differ by ~10 % at p50, more
than one run's within-run interval covers (benchmarks/RESULTS.md), so "no_change" would be a flaky claim."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from satpoint.analysis.diff.verdict import DiffDoc
from satpoint.servers.sim.process import SimServer
from tests.documents import assert_documents_valid

# each test diffs runs on the sim pinned beside its generator: a sibling test's load would make the diff hold
# the figures back as measured on a busy machine
pytestmark = [pytest.mark.slow, pytest.mark.alone]
TWO_CPUS = len(os.sched_getaffinity(0)) >= 2
STAGE = "150:1:5"  # 4 slots of 10 ms: 400 rps, so 38 %; of 20 ms: 200 rps, 75 %


def satpoint(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "satpoint", *args], capture_output=True, text=True, timeout=timeout)


def run_against(service_ms: float, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    gen = ["--generator-cpus", "1"] if TWO_CPUS else []
    with SimServer(slots=4, service_ms=service_ms, cpus=[0] if TWO_CPUS else None) as sim:
        return satpoint("run", "--url", sim.url, "--model", "sim", "--stage", STAGE, "--arrival", "poisson",
                        "--out", str(out), "--no-html", *gen, *extra)  # fmt: skip


def test_a_slower_service_at_equal_load_is_a_latency_regression(tmp_path: Path) -> None:
    """A service twice as slow: a doubling is judged whatever one run a side allows for (at most 95 %), on a
    machine whose speed changed between the runs too."""
    base, slower = tmp_path / "base", tmp_path / "slower"
    assert run_against(10.0, base).returncode == 0
    # run --baseline: measure, then the diff against the baseline folder; exit 3 on the regression
    r = run_against(20.0, slower, "--baseline", str(base))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "verdict: regression" in r.stdout
    assert "latency_p50_ms" in (slower / "diff.html").read_text()  # the overlay page beside diff.json
    r = satpoint("diff", str(base), str(slower), "--junit", str(tmp_path / "j.xml"))
    assert r.returncode == 3, r.stdout + r.stderr
    doc = DiffDoc.model_validate(json.loads((slower / "diff.json").read_text()))
    verdicts = {m.metric: m.verdict for m in doc.metrics if m.point == "150 rps"}
    assert assert_documents_valid(slower)["diff.json"] == "diff"
    assert verdicts["latency_p50_ms"] == "regression", r.stdout
    assert verdicts["service_p50_ms"] == "regression", r.stdout
    assert verdicts["error_rate"] == "no_change"


# a server that breaks: the gate fails closed -------------------------------------------------------------
#: a short find: short holds, no profile (the budget planned)
SHORT_FIND = ["--min-hold", "2", "--max-hold", "3", "--no-profile"]


@pytest.fixture(scope="module")
def base_find(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A find folder of a 300 rps server (the offline queue twin: no server, under a second)."""
    from satpoint.reports.files.results import write_all
    from satpoint.servers.sim.model import SimConfig
    from tests.reports.html.test_html import make_find

    out = tmp_path_factory.mktemp("gate") / "base-300"
    write_all(out, make_find(out, SimConfig(slots=3, service_ms=10.0, dist="const", seed=1), 100.0), html=False)
    return out


def find_against(sim: SimServer, out: Path, base: Path, start_rps: float) -> subprocess.CompletedProcess[str]:
    gen = ["--generator-cpus", "1"] if TWO_CPUS else []
    return satpoint("find", "--url", sim.url, "--model", "sim", *SHORT_FIND, "--start-rps", str(start_rps),
                    "--out", str(out), "--no-html", "--baseline", str(base), *gen, timeout=300)  # fmt: skip


def saturation_of(folder: Path) -> Any:
    doc = DiffDoc.model_validate(json.loads((folder / "diff.json").read_text()))
    return next(m for m in doc.metrics if m.metric == "saturation_rps")


def test_a_server_answering_500_after_its_test_inference_fails_the_gate(base_find: Path, tmp_path: Path) -> None:
    """Every request after the pre-flight test inference is an HTTP 500: no rate held, so no saturation point.
    Against a baseline with one, find --baseline and diff both exit 3 (it was inconclusive, exit 0).  The
    baseline's per-replica target is left out, so the saturation verdict alone decides (and no hold's cool-down
    waits a minute for an erroring server to answer at low-load speed)."""
    base = tmp_path / "base-without-target"
    shutil.copytree(base_find, base)
    summary = json.loads((base / "summary.json").read_text())
    (base / "summary.json").write_text(json.dumps({**summary, "recommendation": None}))
    base_find = base
    new = tmp_path / "http-500"
    cpus = [0] if TWO_CPUS else None
    with SimServer(slots=3, service_ms=10.0, cpus=cpus, fault="error-body", error_status=500, fault_after=5) as sim:
        # from 1.5 rps: that stage fails, and the next one down (a quarter) is below the lowest the search tries
        r = find_against(sim, new, base_find, 1.5)
    assert r.returncode == 3, r.stdout + r.stderr
    sat = saturation_of(new)
    assert sat.verdict == "regression" and sat.new.value is None and "no rate held" in sat.text
    r = satpoint("diff", str(base_find), str(new), "--no-html")
    assert r.returncode == 3, r.stdout + r.stderr
    # a server that fails its test inference is refused before any load
    with SimServer(slots=3, service_ms=10.0, cpus=cpus, fault="error-body", error_status=500) as sim:
        r = find_against(sim, tmp_path / "refused", base_find, 1.5)
    assert r.returncode == 2, r.stdout + r.stderr


def test_a_find_that_held_no_rate_exits_4_without_a_baseline(tmp_path: Path) -> None:
    """The same HTTP 500 server, find without --baseline: no rate held, no saturation point, so no answer:
    exit 4 with one line saying so (it exited 0)."""
    gen = ["--generator-cpus", "1"] if TWO_CPUS else []
    new = tmp_path / "http-500"
    with SimServer(slots=3, service_ms=10.0, cpus=[0] if TWO_CPUS else None, fault="error-body", error_status=500,
                   fault_after=5) as sim:  # fmt: skip
        r = satpoint("find", "--url", sim.url, "--model", "sim", *SHORT_FIND, "--start-rps", "1.5",
                     "--out", str(new), "--no-html", *gen, timeout=300)  # fmt: skip
    assert r.returncode == 4, r.stdout + r.stderr
    assert "no answer: find found no saturation point (no rate was held: 1 stage measured" in r.stderr
    summary = json.loads((new / "summary.json").read_text())
    assert summary["saturation_rps"] is None and summary["recommendation"] is None


def test_a_server_that_dies_under_load_fails_the_gate(base_find: Path, tmp_path: Path) -> None:
    """The server is killed once the find has started measuring (its results header is written after the test
    inference, before the first stage): the target is lost under load.  find --baseline and diff exit 3."""
    new = tmp_path / "dies"
    cpus = [0] if TWO_CPUS else None
    with SimServer(slots=3, service_ms=10.0, cpus=cpus) as sim:
        killed = threading.Event()

        def kill_under_load() -> None:
            deadline = time.monotonic() + 60
            while not (new / "results.json").is_file() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(3.0)  # into the first stage (a 2 s ramp, then its hold)
            os.kill(sim.pid, signal.SIGKILL)  # a crash: nothing listens any more
            killed.set()

        threading.Thread(target=kill_under_load, daemon=True).start()
        r = find_against(sim, new, base_find, 50.0)
    assert killed.is_set()
    assert r.returncode == 3, r.stdout + r.stderr
    summary = json.loads((new / "summary.json").read_text())
    assert summary["target_lost"] is not None
    assert saturation_of(new).verdict == "regression"
    r = satpoint("diff", str(base_find), str(new), "--no-html")
    assert r.returncode == 3, r.stdout + r.stderr
