"""End-to-end: results are never lost — kill -9, SIGTERM/SIGHUP to the process group, a parent that dies
under its generator processes, a target that stops answering mid-find; and plans refused before they start.

Every test is bounded: subprocesses have timeouts, servers are ``SimServer`` context managers, and any
process a test started and that is still alive at its end is killed by pid.
"""

from __future__ import annotations

import contextlib
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

import numpy as np
import psutil
import pytest

import satpoint
from satpoint.metrics.checkpoint import read_shard_file
from satpoint.servers.sim.process import SimServer

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


# interrupted stages, a dead generator process, a full disk: every due request accounted for --------------------
@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(slots=50, service_ms=2) as server:  # capacity 25 000 rps: every rate here is stable
        yield server


def last_checkpoint_s(out: Path, segment: int = 0) -> float:
    """The run clock of the latest checkpoint frame of any shard of ``segment`` (-1 if none yet)."""
    times = [got.now_s for p in out.glob(f"segment-{segment:03d}.shard-*.rows") if (got := read_shard_file(p))]
    return max(times, default=-1.0)


def planned_rows(seg: Any) -> int:
    """How many requests the segment's plan made due (regenerated from its plan and seed)."""
    from satpoint.engine.schedule import due_times

    return len(due_times(seg.stages, seg.arrival, seg.seed, seg.start_rps))


def signal_group_when(proc: subprocess.Popen[str], ready: Callable[[], bool], sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to the process group (as GNU ``timeout`` and container runtimes do) once ``ready``."""
    try:
        wait_for(ready, 60, "the moment to signal")
        os.killpg(proc.pid, sig)
    except BaseException:
        proc.kill()
        raise


def test_sigterm_mid_stage_on_run_summarises_the_stage_it_cut(tmp_path: Path, sim: SimServer) -> None:
    out = tmp_path / "r"
    run = subprocess.Popen(
        run_args(sim, out, "--procs", "2", "--stage", "400:1:30"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    signal_group_when(run, lambda: last_checkpoint_s(out) >= 5.0)  # 4 s into the hold
    stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    (st,) = summary_of(out)["stages"]
    assert st["interrupted"] is True and st["verdict"] == "stable", st
    assert st["hold_s"] == 30 and 4.0 <= st["window_end_s"] < 15 and st["requests"] >= 800
    assert "stable (interrupted)" in stdout  # the terminal table shows it
    seg = satpoint.load(out).segments[0]
    assert len(seg.records) == sum(s["rows"] for s in seg.generator["shards"])  # every shard reported
    assert all(s["lost"] is None for s in seg.generator["shards"])
    # every request due until the stop (where the first process stopped) has its row: sent, or never sent
    stop_s = min(s["last_due_s"] for s in seg.generator["shards"])
    assert st["window_end_s"] == pytest.approx(stop_s, abs=1e-4)
    due_until = np.searchsorted(due_times_of(seg), stop_s, side="right")
    assert np.searchsorted(seg.records.intended, stop_s, side="right") == due_until
    r = report(out)
    assert r.returncode == 0 and (out / "report.html").exists(), r.stdout + r.stderr
    assert "interrupted: figures over what was measured" in (out / "report.html").read_text()


def due_times_of(seg: Any) -> Any:
    from satpoint.engine.schedule import due_times

    return due_times(seg.stages, seg.arrival, seg.seed, seg.start_rps)


def test_sigterm_mid_stage_on_find_keeps_the_cut_stage_out_of_the_search(tmp_path: Path, sim: SimServer) -> None:
    out = tmp_path / "f"
    fast = ["--ramp", "0.5", "--min-hold", "8", "--max-hold", "8", "--min-requests", "100", "--no-html"]
    find = subprocess.Popen(
        [*SATPOINT, "find", "--url", sim.url, "--model", "sim", "--start-rps", "200", "--out", str(out), *fast],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    signal_group_when(find, lambda: last_checkpoint_s(out, segment=1) >= 4.5)  # the second stage, 4 s held
    stdout, stderr = find.communicate(timeout=60)
    assert find.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    s = summary_of(out)
    first, cut = s["stages"]
    assert (first["interrupted"], first["verdict"], first["target_rps"]) == (False, "stable", 200)
    assert (cut["interrupted"], cut["verdict"], cut["target_rps"], cut["segment"]) == (True, "stable", 400, 1)
    assert [st["rate_rps"] for st in s["search"]["steps"]] == [200]  # the search never decided on it
    assert s["saturation_rps"] == 200
    loaded = satpoint.load(out)
    assert len(loaded.segments[0].records) == planned_rows(loaded.segments[0])  # the finished stage: all of it
    r = report(out)
    assert r.returncode == 0 and (out / "report.html").exists(), r.stdout + r.stderr


def test_sigterm_mid_stage_on_sweep_keeps_the_cut_measurement_summarised(tmp_path: Path) -> None:
    out = tmp_path / "s"
    fast = ["--ramp", "0.5", "--min-hold", "8", "--max-hold", "8", "--min-requests", "100", "--no-profile"]
    sweep = subprocess.Popen(
        [*SATPOINT, "sweep", "--server", "sim", "--set", "workers=4", "--service-ms", "10", "--out", str(out), *fast],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def into_a_hold() -> bool:
        return any(last_checkpoint_s(d) >= 4.5 for d in (out / "points").glob("*/m*") if d.is_dir())

    signal_group_when(sweep, into_a_hold)
    stdout, stderr = sweep.communicate(timeout=90)
    assert sweep.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    doc = json.loads((out / "sweep.json").read_text())
    (m,) = doc["measurements"]
    assert m["status"] == "interrupted"
    point = out / m["dir"]
    (st,) = summary_of(point)["stages"]
    assert st["interrupted"] is True and st["verdict"] == "stable"
    seg = satpoint.load(point).segments[0]
    stop_s = min(s["last_due_s"] for s in seg.generator["shards"])
    assert np.searchsorted(seg.records.intended, stop_s, side="right") == np.searchsorted(
        due_times_of(seg), stop_s, side="right"
    )
    r = report(point)
    assert r.returncode == 0 and (point / "report.html").exists(), r.stdout + r.stderr


def shard_processes(parent: psutil.Process) -> list[psutil.Process]:
    """The generator processes of a ``--procs`` run (not multiprocessing's resource tracker)."""
    return [c for c in parent.children() if "resource_tracker" not in " ".join(c.cmdline())]


def test_a_procs_shard_killed_mid_stage_is_generator_limited_and_the_live_view_goes_on(
    tmp_path: Path, sim: SimServer, started: list[psutil.Process]
) -> None:
    out = tmp_path / "r"
    run = subprocess.Popen(
        run_args(sim, out, "--procs", "2", "--stage", "300:1:9"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    parent = psutil.Process(run.pid)
    started.append(parent)
    wait_for(checkpointed(out, shards=2), 40, "both shards' first checkpoints")
    victim = shard_processes(parent)[0]
    killed_at = last_checkpoint_s(out)
    victim.kill()
    stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == 0, stdout + stderr
    assert "Traceback" not in stderr
    s = summary_of(out)
    (st,) = s["stages"]
    assert st["verdict"] == "generator_limited", st
    assert "died" in st["reasons"][0] and "never sent" in st["reasons"][0]
    assert st["offered_rps"] < 0.8 * 300  # what the server got, not the plan
    seg = satpoint.load(out).segments[0]
    shards = seg.generator["shards"]
    dead = [sh for sh in shards if sh["lost"]]
    assert len(dead) == 1 and "died" in dead[0]["lost"] and dead[0]["rows"] < dead[0]["planned"]
    # every due request is a row, or one the dead shard never got to (its planned rows it did not record)
    assert sum(sh["planned"] for sh in shards) == planned_rows(seg)
    assert len(seg.records) == sum(sh["rows"] for sh in shards)
    # the live view went on after the kill: the surviving shard's snapshots are still merged
    times = [float(line.split("t=")[1].split("s")[0]) for line in stdout.splitlines() if line.startswith("run t=")]
    assert max(times) > killed_at + 2.0, (killed_at, times)
    r = report(out)
    assert r.returncode == 0, r.stdout + r.stderr


@contextlib.contextmanager
def small_disk(where: Path, size: str, *options: str) -> Iterator[Path]:
    """A real file system of ``size`` (tmpfs) mounted at ``where`` for the block (root only: skips otherwise)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small file system needs root")
    where.mkdir(parents=True, exist_ok=True)
    opts = ",".join([f"size={size}", *options])
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def test_a_full_disk_at_segment_save_moves_the_rows_to_tmpdir_and_says_where(tmp_path: Path, sim: SimServer) -> None:
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    with small_disk(tmp_path / "disk", "32k") as disk:  # room for the header, not for the rows
        out = disk / "r"
        r = subprocess.run(
            run_args(sim, out, "--stage", "300:0:4"),
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ, "TMPDIR": str(tmpdir)},
        )
        assert r.returncode == 1, r.stdout + r.stderr
        assert "Traceback" not in r.stderr
        (rescued,) = tmpdir.glob("satpoint-r-*")
        err = " ".join(r.stderr.split())
        assert "could not be written to" in err and "No space left on device" in err
        assert rescued.name in "".join(r.stderr.split())  # (the terminal may wrap the path)
    s = summary_of(rescued)
    assert s["relocated"]["rescue_dir"] == str(rescued) and s["relocated"]["segments"] == [0]
    assert any(str(rescued) in w for w in s["warnings"])
    (st,) = s["stages"]
    assert st["requests"] > 0 and not s["interrupted"]
    seg = satpoint.load(rescued).segments[0]
    assert len(seg.records) == planned_rows(seg)  # every due request has its row: nothing was lost
    assert (seg.records.outcome == 0).sum() == len(seg.records)
    assert "checkpoint" in " ".join(seg.notes)  # the checkpoints failed first, and said so
    rr = report(rescued)
    assert rr.returncode == 0 and (rescued / "report.html").exists(), rr.stdout + rr.stderr


def test_an_unwritable_out_is_one_line_and_exit_1_before_any_load(tmp_path: Path, sim: SimServer) -> None:
    with small_disk(tmp_path / "ro", "64k", "ro") as ro:
        r = subprocess.run(run_args(sim, ro / "r", "--stage", "100:0:2"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    err = " ".join(r.stderr.split())
    assert "cannot write or read the results" in err and "Read-only file system" in err
    assert "stages" not in r.stdout  # nothing was measured


def test_report_of_a_folder_with_a_damaged_rows_file_is_one_line_and_exit_1(tmp_path: Path, sim: SimServer) -> None:
    out = tmp_path / "r"
    r = subprocess.run(run_args(sim, out, "--stage", "100:0:1"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = out / "segment-000.npz"
    rows.write_bytes(rows.read_bytes()[:100])  # cut short, as by a disk that filled up
    rr = report(out)
    assert rr.returncode == 1, rr.stdout + rr.stderr
    assert "Traceback" not in rr.stderr and "segment-000.npz is damaged" in " ".join(rr.stderr.split())
