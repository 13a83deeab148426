"""End-to-end: `satpoint find` on the embedded MLServer, and no server process outlives satpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from satpoint.metrics.checkpoint import read_shard_file

pytestmark = pytest.mark.slow
FAST = ["--ramp", "0.5", "--min-hold", "1.5", "--max-hold", "2", "--min-requests", "300", "--precision", "0.15"]


def group_members(pgid: int, settle_s: float = 0.0) -> list[int]:
    """Live (non-zombie) processes of a process group, after up to ``settle_s`` for SIGKILLs to land."""
    deadline = time.monotonic() + settle_s
    while True:
        out = []
        for p in psutil.process_iter(["pid", "status"]):
            try:
                if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
            except (ProcessLookupError, psutil.Error):
                pass
        if not out or time.monotonic() >= deadline:
            return out
        time.sleep(0.2)


def wait_for_server_pid(out: Path, proc: subprocess.Popen[str], timeout_s: float = 120) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            header = json.loads((out / "results.json").read_text())
            pid = header.get("server", {}).get("pid")
            if pid:
                return int(pid)
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError("the embedded MLServer did not start")


def has_rows(path: Path) -> bool:
    got = read_shard_file(path) if path.exists() else None
    return got is not None and len(got.records) > 0


def test_find_on_embedded_mlserver(tmp_path: Path) -> None:
    # --budget-s 40: the profile's reserve (21.7 s before a stable stage) and the first stage (12.2 s, with
    # the observer's marks) fit with 6.1 s to spare; what is examined is a stable answer above 10 rps, what
    # find prints, the server's settings and that no process of it is left
    proc = subprocess.Popen(
        [sys.executable, "-m", "satpoint", "find", "--out", str(tmp_path), "--budget-s", "40", "--no-html", *FAST],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pid = wait_for_server_pid(tmp_path, proc)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert "saturation point" in out and "recommendation" in out
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["saturation_rps"] and s["saturation_rps"] > 10
    assert s["server"]["settings"]["parallel_workers"] == 1
    assert s["server"]["versions"]["mlserver"] == "1.7.1"
    assert group_members(pid, settle_s=3.0) == []


def test_interrupted_find_leaves_no_server_behind(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "satpoint", "find", "--out", str(tmp_path), "--no-html", *FAST],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pid = wait_for_server_pid(tmp_path, proc)
        assert group_members(pid)
        # mid-stage: the first stage has checkpointed rows (about a second into its 0.5 s ramp and 1.5-2 s hold)
        deadline = time.monotonic() + 60
        while not has_rows(tmp_path / "segment-000.shard-0.rows") and time.monotonic() < deadline:
            assert proc.poll() is None, "find ended before its first stage had rows"
            time.sleep(0.1)
        assert has_rows(tmp_path / "segment-000.shard-0.rows"), "the first stage had no rows within 60 s"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    deadline = time.monotonic() + 15
    while group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert group_members(pid, settle_s=3.0) == []
    assert json.loads((tmp_path / "summary.json").read_text())["interrupted"] is True
