"""observe.pyspy: the command line, who may attach, what a failure means, and one recording's life
(a stand-in for py-spy that writes its file on SIGINT, so no server is needed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from satpoint.observe import pyspy
from satpoint.observe.pyspy import (
    GRANT,
    NO_PID,
    NO_PYSPY,
    PySpyRecording,
    explain_failure,
    file_grants_ptrace,
    has_cap_sys_ptrace,
    preflight,
    ptrace_problem,
    record_command,
)


def test_the_command_records_the_whole_tree_as_speedscope_without_pausing_it(tmp_path: Path) -> None:
    cmd = record_command("/bin/py-spy", 42, tmp_path / "p.json", 9.6, rate_hz=50)
    assert cmd[:4] == ["/bin/py-spy", "record", "--pid", "42"]
    assert "--subprocesses" in cmd and "--nonblocking" in cmd and "--function" in cmd
    assert cmd[cmd.index("--format") + 1] == "speedscope"
    assert cmd[cmd.index("--duration") + 1] == "9" and cmd[cmd.index("--rate") + 1] == "50"
    assert "--native" not in cmd
    native = record_command("py-spy", 42, tmp_path / "p.json", 0.2, native=True)
    assert "--native" in native and "--nonblocking" not in native  # py-spy refuses the two together
    blocking = record_command("py-spy", 42, tmp_path / "p.json", 0.2, nonblocking=False)
    assert "--native" not in blocking and "--nonblocking" not in blocking
    assert blocking[blocking.index("--duration") + 1] == "1"  # at least a second


def test_who_may_attach() -> None:
    # root without the capability (a container's root) may not: only CAP_SYS_PTRACE counts
    root_in_container = ptrace_problem(0, 1000, 1, False)
    assert root_in_container is not None and "ptrace_scope = 1" in root_in_container
    assert ptrace_problem(0, 0, 2, False) is not None
    assert ptrace_problem(0, 1000, 1, True) is None  # root with it (outside a container)
    assert ptrace_problem(1000, 1000, None, False) is None  # no Yama: same user may
    assert ptrace_problem(1000, 1000, 0, False) is None
    scoped = ptrace_problem(1000, 1000, 1, False)
    assert scoped is not None and "ptrace_scope = 1" in scoped and GRANT in scoped
    assert "sysctl kernel.yama.ptrace_scope=0" in scoped and "--cap-add SYS_PTRACE" in scoped
    assert ptrace_problem(1000, 1000, 1, True) is None  # CAP_SYS_PTRACE
    assert "setcap cap_sys_ptrace+ep" in scoped
    assert "another user" in (ptrace_problem(1000, 0, 0, False) or "")
    assert "disabled" in (ptrace_problem(0, 0, 3, True) or "")
    assert "CAP_SYS_PTRACE" in (ptrace_problem(1000, 1000, 2, False) or "")


def test_py_spy_runs_off_the_servers_cpus() -> None:
    from satpoint.observe.pyspy import spare_cpus

    assert spare_cpus([0], 2) == [1]
    assert spare_cpus([0, 1], 2) is None and spare_cpus(None, 2) is None


def test_capabilities_are_read_from_proc_status() -> None:
    assert has_cap_sys_ptrace("Name:\tx\nCapEff:\t000001fffeffffff\n")
    assert not has_cap_sys_ptrace("CapEff:\t0000000000000000\n")
    assert not has_cap_sys_ptrace(None)
    # Docker's default set: no CAP_SYS_PTRACE (bit 19), even for root
    docker = "CapEff:\t00000000a80425fb\nCapBnd:\t00000000a80425fb\n"
    assert not has_cap_sys_ptrace(docker) and not has_cap_sys_ptrace(docker, "CapBnd")
    assert has_cap_sys_ptrace("CapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\n", "CapBnd")


def test_py_spys_own_file_capability_counts() -> None:
    ptrace = 1 << 19
    v2 = (0x02000000 | 1).to_bytes(4, "little") + ptrace.to_bytes(4, "little") + bytes(12)  # cap_sys_ptrace+ep
    assert file_grants_ptrace(v2)
    not_effective = (0x02000000).to_bytes(4, "little") + ptrace.to_bytes(4, "little") + bytes(12)  # +p only
    assert not file_grants_ptrace(not_effective)
    other = (0x02000000 | 1).to_bytes(4, "little") + (1 << 21).to_bytes(4, "little") + bytes(12)  # cap_sys_admin
    assert not file_grants_ptrace(other)
    assert not file_grants_ptrace(None) and not file_grants_ptrace(b"\x01")


def test_preflight_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert preflight(None) == NO_PID
    monkeypatch.setattr(pyspy, "find_py_spy", lambda: "/usr/bin/py-spy")  # the pid check comes after
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    got = preflight(gone.pid)
    assert got == f"no process {gone.pid} on this machine (is the server local, and still running?)"
    monkeypatch.setattr(pyspy, "find_py_spy", lambda: None)
    assert preflight(gone.pid) == NO_PYSPY


def test_failures_are_explained() -> None:
    perm = explain_failure("Error: Failed to attach\nPermission denied (os error 13)", 1)
    assert "ptrace" in perm and GRANT in perm
    assert "no server process" in explain_failure("Error: Failed to find process: No such process", 1)
    assert explain_failure("", 2) == "py-spy failed (exit code 2): no output"


FAKE_PY_SPY = textwrap.dedent(
    """
    import signal, sys, time
    out = sys.argv[1]
    def stop(*_):
        open(out, "w").write('{"shared": {"frames": []}, "profiles": []}')
        sys.exit(0)
    signal.signal(signal.SIGINT, stop)
    print("Sampling process 100 times a second", flush=True)
    time.sleep(30)
    """
)


def test_a_recording_starts_when_due_and_is_stopped_with_its_file_written(tmp_path: Path) -> None:
    script = tmp_path / "fake_py_spy.py"
    script.write_text(FAKE_PY_SPY)
    out = tmp_path / "profile.json"
    now = time.monotonic()
    rec = PySpyRecording([sys.executable, str(script), str(out)], now + 0.05, 5.0, tmp_path / "py-spy.log", out)
    assert not rec.due(now)
    time.sleep(0.06)
    assert rec.due(time.monotonic())
    rec.start()
    time.sleep(0.5)  # the stand-in installs its handler
    got = rec.stop(timeout_s=10)
    assert got["written"] and got["error"] is None and got["returncode"] == 0
    assert got["stopped_mono"] > got["started_mono"]
    assert "Sampling" in (tmp_path / "py-spy.log").read_text()
    # a recording whose stage ended before its hold began
    never = PySpyRecording(["true"], time.monotonic() + 60, 5.0, tmp_path / "x.log", tmp_path / "none.json")
    assert "before its hold began" in (never.stop()["error"] or "")
    # one that fails: its log explains why
    failing = PySpyRecording(
        [sys.executable, "-c", "import sys; print('Permission denied (os error 13)'); sys.exit(1)"],
        time.monotonic(),
        5.0,
        tmp_path / "f.log",
        tmp_path / "none.json",
    )
    failing.start()
    assert failing.proc is not None and failing.proc.wait(timeout=10) == 1
    assert "no ptrace permission" in (failing.stop()["error"] or "")
