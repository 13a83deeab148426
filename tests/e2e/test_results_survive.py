"""End-to-end: results are never lost — kill -9, SIGTERM/SIGHUP to the process group, a parent that dies
under its generator processes, a target that stops answering mid-find; and plans refused before they start.

Every test is bounded: subprocesses have timeouts, servers are ``SimServer`` context managers, and any
process a test started and that is still alive at its end is killed by pid.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import satpoint
from satpoint.metrics.checkpoint import read_shard_file
from satpoint.servers.sim_process import SimServer

pytestmark = pytest.mark.slow
SATPOINT = [sys.executable, "-m", "satpoint"]


def summary_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())  # type: ignore[no-any-return]


def wait_for(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def checkpointed(out: Path, shards: int = 1) -> Callable[[], bool]:
    """True once every shard of segment 0 has checkpointed some rows."""

    def has_rows(path: Path) -> bool:
        got = read_shard_file(path) if path.exists() else None
        return got is not None and len(got.records) > 0

    return lambda: all(has_rows(out / f"segment-000.shard-{k}.rows") for k in range(shards))


def report(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SATPOINT, "report", str(out)], capture_output=True, text=True, timeout=120)


@pytest.fixture
def started() -> Iterator[list[psutil.Process]]:
    """Processes a test started: whatever still runs at the end is killed (by pid)."""
    procs: list[psutil.Process] = []
    yield procs
    for p in procs:
        try:
            if p.is_running():
                p.kill()
        except psutil.NoSuchProcess:
            pass


def run_args(sim: SimServer, out: Path, *extra: str) -> list[str]:
    return [*SATPOINT, "run", "--url", sim.url, "--model", "sim", "--out", str(out), "--no-html", *extra]


def test_kill_9_mid_run_leaves_a_folder_report_renders_with_the_rows_until_then(
    tmp_path: Path, started: list[psutil.Process]
) -> None:
    out = tmp_path / "r"
    with SimServer(slots=50, service_ms=2) as sim:
        run = subprocess.Popen(
            run_args(sim, out, "--stage", "200:0:60"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        started.append(psutil.Process(run.pid))
        wait_for(checkpointed(out), 30, "the first checkpoint")
        time.sleep(2.0)  # at least one more checkpoint (they come about once a second)
        t_kill = time.time()
        run.kill()
        assert run.wait(timeout=10) == -signal.SIGKILL
    assert not (out / "segment-000.npz").exists()  # the run never got to write its segment
    r = report(out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cut off" in r.stdout
    s = summary_of(out)
    assert s["interrupted"] is True
    loaded = satpoint.load(out)
    (seg,) = loaded.segments
    assert seg.interrupted
    n = len(seg.records)
    ran_s = t_kill - seg.started_unix
    # the rows of at least the second checkpoint (about 1.8 s in at 200 rps), nothing that was not yet due
    assert 300 <= n <= 200 * ran_s + 1
    assert (seg.records.outcome == 0).sum() >= 250
    assert (out / "report.html").exists()


@pytest.mark.parametrize(
    ("timeout_args", "expected"),
    [
        (["-s", "TERM", "5"], 124),  # GNU timeout answers 124 itself when the command timed out
        (["--preserve-status", "-s", "TERM", "7"], 130),
        (["--preserve-status", "-s", "HUP", "7"], 130),
    ],
    ids=["TERM", "TERM-preserve-status", "HUP-preserve-status"],
)
def test_timeout_signal_to_the_process_group_with_two_procs_keeps_the_results(
    tmp_path: Path, timeout_args: list[str], expected: int
) -> None:
    if shutil.which("timeout") is None:
        pytest.skip("GNU timeout is not installed")
    out = tmp_path / "r"
    with SimServer(slots=50, service_ms=2) as sim:
        t = time.monotonic()
        r = subprocess.run(
            ["timeout", *timeout_args, *run_args(sim, out, "--stage", "200:0:60", "--procs", "2")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        took = time.monotonic() - t
    assert r.returncode == expected, r.stdout + r.stderr
    assert took < 30  # stopped at the signal, not at the end of the 60 s stage
    assert "Traceback" not in r.stderr
    s = summary_of(out)  # the run itself wrote its summary
    assert s["interrupted"] is True
    rr = report(out)
    assert rr.returncode == 0, rr.stdout + rr.stderr
    seg = satpoint.load(out).segments[0]
    cap = seg.generator["max_inflight"]  # automatic: 200 rps x 2 s, at least 256
    assert seg.generator["procs"] == 2 and seg.generator["max_inflight_per_proc"] == -(-cap // 2) == 200
    if expected == 130:  # seven seconds: the shards had started sending
        assert len(seg.records) > 0 and (seg.records.outcome == 0).any()


def test_generator_processes_die_with_their_parent_and_keep_their_rows(
    tmp_path: Path, started: list[psutil.Process]
) -> None:
    out = tmp_path / "r"
    with SimServer(slots=50, service_ms=2) as sim:
        run = subprocess.Popen(
            run_args(sim, out, "--stage", "200:0:60", "--procs", "2"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        parent = psutil.Process(run.pid)
        started.append(parent)
        wait_for(checkpointed(out, shards=2), 40, "both shards' first checkpoints")
        children = parent.children(recursive=True)
        started.extend(children)
        assert len(children) >= 2  # two shards (and multiprocessing's resource tracker)
        run.kill()
        run.wait(timeout=10)
        _, alive = psutil.wait_procs(children, timeout=15)
        assert alive == [], [p.pid for p in alive]  # no orphan keeps sending
    r = report(out)
    assert r.returncode == 0, r.stdout + r.stderr
    seg = satpoint.load(out).segments[0]
    assert seg.interrupted and len(seg.records) > 0
    assert len(list(out.glob("segment-000.shard-*.rows"))) == 2


def test_target_stopped_mid_find_gives_a_summary_the_stage_and_exit_1(tmp_path: Path) -> None:
    out = tmp_path / "f"
    fast = ["--ramp", "1", "--min-hold", "2", "--max-hold", "2", "--min-requests", "100", "--no-html"]
    with SimServer(slots=4, service_ms=10) as sim:  # capacity 400 rps
        find = subprocess.Popen(
            [*SATPOINT, "find", "--url", sim.url, "--model", "sim", "--start-rps", "100", "--out", str(out), *fast],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:

            def one_stage_done() -> bool:
                path = out / "results.json"
                return path.exists() and len(json.loads(path.read_text()).get("segments", [])) >= 1

            wait_for(one_stage_done, 60, "the first stage")
            time.sleep(1.0)  # into the second stage
            sim.stop()
            stdout, stderr = find.communicate(timeout=90)
        finally:
            if find.poll() is None:
                find.kill()
                find.wait()
    assert find.returncode == 1, stdout + stderr
    assert "Traceback" not in stderr
    assert "the target stopped answering during stage 2" in stdout + stderr
    s = summary_of(out)
    assert s["target_lost"]["stage"] == 2
    assert s["stages"][0]["verdict"] == "stable"  # what was measured before is kept
    assert s["saturation_rps"] == 100.0
    r = report(out)
    assert r.returncode == 0 and "stopped answering" in r.stdout


def test_a_plan_too_large_for_memory_is_refused_with_the_estimate_before_anything_starts(tmp_path: Path) -> None:
    # nothing listens at port 9: the plan is refused before satpoint even connects
    r = subprocess.run(
        [*SATPOINT, "run", "--url", "http://127.0.0.1:9", "--model", "m", "--stage", "1000000:0:360000"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    err = " ".join(r.stderr.split())
    assert "360,000,000,000 requests" in err and "GB of memory" in err and "available" in err
    assert "Traceback" not in r.stderr and not (tmp_path / "results").exists()


def test_an_empty_payload_list_is_a_clear_error(tmp_path: Path) -> None:
    payload = tmp_path / "empty.json"
    payload.write_text("[]")
    with SimServer(slots=2, service_ms=1) as sim:
        r = subprocess.run(
            run_args(sim, tmp_path / "o", "--stage", "10:0:1", "--payload", str(payload)),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "holds an empty list" in " ".join(r.stderr.split())
    assert "Traceback" not in r.stderr


def test_sighup_ignored_by_nohup_is_left_ignored(tmp_path: Path) -> None:
    """``nohup satpoint run ...``: a closed terminal must not stop the run."""
    out = tmp_path / "r"
    with SimServer(slots=50, service_ms=2) as sim:
        run = subprocess.Popen(
            run_args(sim, out, "--stage", "100:0:3"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # what nohup does
        )
        try:
            wait_for(checkpointed(out), 30, "the first checkpoint")
            os.kill(run.pid, signal.SIGHUP)
            _, err = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    assert run.returncode == 0, err
    assert summary_of(out)["interrupted"] is False
