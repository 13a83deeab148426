"""satpoint.servers.process: managed subprocesses start, report readiness failures clearly and leave
nothing behind (grandchildren, SIGTERM-ignoring orphans, escapees into another session)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from satpoint.errors import SatpointError
from satpoint.servers.process import (
    ManagedProcess,
    TargetError,
    free_port,
    free_ports,
    pids_alive,
    sigterm_as_exit,
)

PY = sys.executable
SRC = str(Path(__file__).resolve().parents[2] / "src")


def wait_gone(pids: list[int] | set[int], timeout_s: float = 5.0) -> list[int]:
    """Pids still running after up to ``timeout_s`` (zombies waiting for init count as gone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = pids_alive(list(pids))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def wait_for_log(proc: ManagedProcess, pattern: str, count: int = 1, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = proc.log_text()
        if text.count(pattern) >= count:
            return text
        time.sleep(0.02)
    raise AssertionError(f"{pattern!r} x{count} not in log: {proc.log_text()!r}")


def pids_in(text: str, key: str) -> list[int]:
    return [int(line.split("=", 1)[1]) for line in text.splitlines() if line.startswith(f"{key}=")]


# -- small helpers -----------------------------------------------------------------------------------------


def test_target_error_is_runtime_error_and_user_facing() -> None:
    assert issubclass(TargetError, RuntimeError)
    assert issubclass(TargetError, SatpointError)


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    ports = free_ports(3)
    assert len(set(ports)) == 3


# -- lifecycle ---------------------------------------------------------------------------------------------


def test_sleep_is_started_in_own_session_and_stopped(tmp_path: Path) -> None:
    proc = ManagedProcess(["sleep", "60"], log_path=tmp_path / "sleep.log")
    with proc:
        pid = proc.pid
        assert proc.running
        assert os.getpgid(pid) == pid  # own process group ...
        assert os.getsid(pid) == pid  # ... and session: a terminal Ctrl-C does not reach it
        deadline = time.monotonic() + 5
        while psutil.Process(pid).name() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert psutil.Process(pid).name() == "sleep"  # the exec wrapper was replaced in place
    assert not proc.running
    assert proc.returncode == -signal.SIGTERM
    assert wait_gone([pid]) == []
    assert proc.stop() == -signal.SIGTERM  # idempotent


def test_stop_kills_grandchild_that_ignores_sigterm_and_one_that_escaped_the_group(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, subprocess, sys, time
        stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
        a = subprocess.Popen([sys.executable, "-c", stubborn])
        b = subprocess.Popen([sys.executable, "-c", stubborn], start_new_session=True)
        print(f"grandchild={a.pid}", flush=True)
        print(f"escapee={b.pid}", flush=True)
        time.sleep(120)
        """
    )
    proc = ManagedProcess([PY, "-c", script], log_path=tmp_path / "tree.log", name="tree")
    proc.start()
    try:
        text = wait_for_log(proc, "escapee=")
        grandchild, escapee = pids_in(text, "grandchild")[0], pids_in(text, "escapee")[0]
        assert os.getpgid(escapee) != proc.pid
        assert {grandchild, escapee} <= set(proc.descendants())
    finally:
        t0 = time.monotonic()
        proc.stop(grace_s=1.0)
        took = time.monotonic() - t0
    assert wait_gone([proc.pid, grandchild, escapee]) == []
    assert took < 5.0
    assert {proc.pid, grandchild, escapee} <= proc.seen_pids
    assert proc.alive_pids() == []


def test_leader_that_ignores_sigterm_is_killed_after_grace(tmp_path: Path) -> None:
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    )
    proc = ManagedProcess([PY, "-c", script], log_path=tmp_path / "stubborn.log")
    proc.start()
    wait_for_log(proc, "up")
    t0 = time.monotonic()
    assert proc.stop(grace_s=0.5) == -signal.SIGKILL
    assert 0.4 < time.monotonic() - t0 < 5.0


class _Interrupted(Exception):
    pass


@pytest.mark.parametrize("handler_action", ["raise", "stop_again"])
def test_interrupted_stop_kills_at_once(tmp_path: Path, handler_action: str) -> None:
    """A second Ctrl-C during a graceful stop (here SIGUSR1) must not leave the tree running."""
    script = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "c = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); "
        "print(f'grandchild={c.pid}', flush=True); time.sleep(60)"
    )
    proc = ManagedProcess([PY, "-c", script], log_path=tmp_path / "int.log")
    proc.start()
    grandchild = pids_in(wait_for_log(proc, "grandchild="), "grandchild")[0]

    def on_usr1(signum: int, frame: object) -> None:
        if handler_action == "raise":
            raise _Interrupted
        proc.stop()  # re-entrant call from a signal handler: kills at once

    previous = signal.signal(signal.SIGUSR1, on_usr1)
    timer = threading.Timer(0.3, os.kill, args=(os.getpid(), signal.SIGUSR1))
    timer.start()
    t0 = time.monotonic()
    try:
        if handler_action == "raise":
            with pytest.raises(_Interrupted):
                proc.stop(grace_s=30)
        else:
            proc.stop(grace_s=30)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert time.monotonic() - t0 < 10
    assert wait_gone([proc.pid, grandchild]) == []
    t1 = time.monotonic()
    proc.stop(grace_s=30)  # already stopped: returns at once
    assert time.monotonic() - t1 < 0.5


def test_context_manager_stops_on_exception(tmp_path: Path) -> None:
    pid = -1
    with (
        pytest.raises(ZeroDivisionError),
        ManagedProcess(["sleep", "60"], log_path=tmp_path / "s.log") as proc,
    ):
        pid = proc.pid
        _ = 1 / 0
    assert wait_gone([pid]) == []


# -- readiness ---------------------------------------------------------------------------------------------


def test_early_exit_raises_target_error_with_log_tail(tmp_path: Path) -> None:
    script = "import sys; print('loading model'); print('boom: bad config', file=sys.stderr); sys.exit(3)"
    log = tmp_path / "early.log"
    with (
        ManagedProcess([PY, "-c", script], log_path=log, name="srv") as proc,
        pytest.raises(TargetError) as info,
    ):
        proc.wait_ready(lambda: False, timeout_s=10, what="the test server")
    msg = str(info.value)
    assert "exited with code 3" in msg
    assert "the test server" in msg
    assert "loading model" in msg and "boom: bad config" in msg  # stdout and stderr both logged


def test_error_lines_before_the_tail_are_quoted(tmp_path: Path) -> None:
    script = "print('ERROR - model failed to load'); [print(f'shutdown noise {i}') for i in range(100)]"
    with (
        ManagedProcess([PY, "-c", script], log_path=tmp_path / "noisy.log") as proc,
        pytest.raises(TargetError) as info,
    ):
        proc.wait_ready(lambda: False, timeout_s=10, what="x")
    msg = str(info.value)
    assert "error lines earlier in the log" in msg and "model failed to load" in msg
    assert "shutdown noise 99" in msg and "shutdown noise 10\n" not in msg


def test_timeout_raises_target_error_with_last_check_error(tmp_path: Path) -> None:
    def check() -> bool:
        raise ConnectionRefusedError("nobody home")

    script = "print('still starting', flush=True); import time; time.sleep(60)"
    with ManagedProcess([PY, "-c", script], log_path=tmp_path / "slow.log") as proc:
        wait_for_log(proc, "still starting")
        t0 = time.monotonic()
        with pytest.raises(TargetError) as info:
            proc.wait_ready(check, timeout_s=0.5, what="slow server")
        assert time.monotonic() - t0 < 3.0
    msg = str(info.value)
    assert "not ready after" in msg and "nobody home" in msg and "still starting" in msg


def test_wait_ready_returns_when_check_passes(tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    script = f"import pathlib, time; time.sleep(0.3); pathlib.Path({str(flag)!r}).touch(); time.sleep(60)"
    with ManagedProcess([PY, "-c", script], log_path=tmp_path / "r.log") as proc:
        waited = proc.wait_ready(flag.exists, timeout_s=10, what="flag")
        assert 0.2 < waited < 10


def test_fail_pattern_in_log_fails_fast(tmp_path: Path) -> None:
    script = "print('ERROR: [Errno 98] address already in use', flush=True); import time; time.sleep(60)"
    with (
        ManagedProcess([PY, "-c", script], log_path=tmp_path / "bind.log") as proc,
        pytest.raises(TargetError, match="address already in use"),
    ):
        proc.wait_ready(lambda: False, timeout_s=20, what="x", fail_patterns=["Address already in use"])


def test_log_of_a_previous_run_does_not_leak_into_the_next(tmp_path: Path) -> None:
    log = tmp_path / "shared.log"
    with ManagedProcess([PY, "-c", "print('first run: address already in use')"], log_path=log) as first:
        wait_for_log(first, "first run")
    with ManagedProcess([PY, "-c", "print('second'); import time; time.sleep(60)"], log_path=log) as second:
        wait_for_log(second, "second")
        assert "first run" not in second.log_text()
        assert "first run" not in second.log_tail()
    assert "first run" in log.read_text()


def test_command_not_found(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="command not found"):
        ManagedProcess(["satpoint-no-such-command"], log_path=tmp_path / "x.log").start()


def test_env_and_cwd_are_passed(tmp_path: Path) -> None:
    script = "import os; print('V=' + os.environ['SATPOINT_T'], 'CWD=' + os.getcwd(), flush=True)"
    env = {"PATH": os.environ.get("PATH", ""), "SATPOINT_T": "42"}
    with ManagedProcess([PY, "-c", script], log_path=tmp_path / "e.log", env=env, cwd=tmp_path) as proc:
        text = wait_for_log(proc, "CWD=")
    assert "V=42" in text and f"CWD={tmp_path}" in text


# -- CPU pinning -------------------------------------------------------------------------------------------


def test_cpu_pinning_applies_to_the_child(tmp_path: Path) -> None:
    cpu = min(os.sched_getaffinity(0))
    script = "import os; print('AFF=' + ','.join(map(str, sorted(os.sched_getaffinity(0)))), flush=True)"
    with ManagedProcess([PY, "-c", script], log_path=tmp_path / "aff.log", cpus=[cpu]) as proc:
        text = wait_for_log(proc, "AFF=")
    assert f"AFF={cpu}\n" in text


def test_invalid_cpu_is_rejected_before_start(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="cannot pin"):
        ManagedProcess(["sleep", "1"], log_path=tmp_path / "x.log", cpus=[4096]).start()


# -- satpoint itself exits or dies -------------------------------------------------------------------------

_OWNER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from satpoint.servers.process import ManagedProcess, sigterm_as_exit
    mode, log = sys.argv[1], Path(sys.argv[2])
    proc = ManagedProcess(["sleep", "60"], log_path=log, kill_with_parent=(mode == "killed"))
    if mode == "atexit":
        proc.start()
        print(f"child={proc.pid}", flush=True)
        sys.exit(0)  # no stop(): atexit must do it
    if mode == "sigterm":
        with sigterm_as_exit(), proc:
            print(f"child={proc.pid}", flush=True)
            time.sleep(60)
    if mode == "killed":
        proc.start()
        print(f"child={proc.pid}", flush=True)
        time.sleep(60)
    """
)


def _run_owner(mode: str, tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONPATH": SRC}
    owner = subprocess.Popen(
        [PY, "-c", _OWNER, mode, str(tmp_path / "owned.log")], stdout=subprocess.PIPE, text=True, env=env
    )
    assert owner.stdout is not None
    line = owner.stdout.readline()
    assert line.startswith("child="), line
    return owner, int(line.split("=")[1])


def test_atexit_stops_a_process_the_owner_forgot(tmp_path: Path) -> None:
    owner, child = _run_owner("atexit", tmp_path)
    assert owner.wait(timeout=15) == 0
    assert wait_gone([child]) == []


def test_sigterm_to_owner_unwinds_and_stops_child(tmp_path: Path) -> None:
    owner, child = _run_owner("sigterm", tmp_path)
    assert pids_alive([child]) == [child]
    owner.send_signal(signal.SIGTERM)
    assert owner.wait(timeout=15) == 128 + signal.SIGTERM
    assert wait_gone([child]) == []


def test_sigkill_of_owner_still_takes_child_down(tmp_path: Path) -> None:
    owner, child = _run_owner("killed", tmp_path)
    assert pids_alive([child]) == [child]
    owner.kill()  # no Python cleanup at all: PR_SET_PDEATHSIG does it
    owner.wait(timeout=15)
    assert wait_gone([child]) == []


def test_sigterm_as_exit_restores_previous_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_as_exit():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
