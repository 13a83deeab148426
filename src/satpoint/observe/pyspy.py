"""py-spy for the flame graph: finding it, whether it may attach, its command line, one recording.

``py-spy record`` samples a running Python process's stacks from outside (it reads the process's
memory through ptrace), so the server needs no change.  The observer process (``agent``) starts it at
the beginning of a stage's hold and stops it at the hold's end (``PySpyRecording``); py-spy writes
one format per recording: satpoint asks for speedscope JSON (every sample's stack, with files and
line numbers) and draws the SVG flame graph from it itself (``reports.files.flamegraph_svg``).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

SPEEDSCOPE_FILE = "profile.speedscope.json"
LOG_FILE = "py-spy.log"
#: py-spy's ``--function``: samples are aggregated per function (its first line), not per line, so a
#: function's own time is one number and the flame graph is not split by line
FUNCTION_GRANULARITY = True
#: how long py-spy may take to write its file once asked to stop (speedscope of several processes)
STOP_TIMEOUT_S = 20.0

#: py-spy's niceness (lowest priority)
NICE = 19
#: Linux capability bit of CAP_SYS_PTRACE in /proc/self/status CapEff
CAP_SYS_PTRACE = 19

GRANT = (
    'give py-spy alone the capability with `sudo setcap cap_sys_ptrace+ep "$(command -v py-spy)"`, or, in a '
    "container, start it with `--cap-add SYS_PTRACE` (Kubernetes: securityContext.capabilities.add: "
    "[SYS_PTRACE]), or allow ptrace for every process with `sudo sysctl kernel.yama.ptrace_scope=0`; root "
    "outside a container has the capability too (root in a container usually has not)"
)
NO_PYSPY = (
    "py-spy is not installed (it ships with satpoint: `pip install satpoint`, or `pip install py-spy`) or not on PATH"
)
NO_PID = (
    "the flame graph needs the server's process on this machine: satpoint starts py-spy on its pid. A "
    "remote server (--url without --server-pid) cannot be profiled from here: give --server-pid PID for a "
    "local server, or run `py-spy record --pid PID --subprocesses` on the server's host"
)


def find_py_spy() -> str | None:
    """The py-spy executable: next to this Python (its virtual environment's bin), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def has_cap_sys_ptrace(status_text: str | None, field: str = "CapEff") -> bool:
    """Whether a /proc/PID/status text has CAP_SYS_PTRACE in the set ``field`` (``CapEff``: effective,
    ``CapBnd``: the bounding set, what a program's file capabilities can add)."""
    for line in (status_text or "").splitlines():
        if line.startswith(f"{field}:"):
            try:
                return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
            except (IndexError, ValueError):
                return False
    return False


def file_grants_ptrace(xattr: bytes | None) -> bool:
    """Whether a program's ``security.capability`` attribute (``setcap cap_sys_ptrace+ep``) gives it
    CAP_SYS_PTRACE when it starts: permitted, with the effective flag (vfs_cap_data, little endian)."""
    if xattr is None or len(xattr) < 12:
        return False
    magic_etc = int.from_bytes(xattr[0:4], "little")
    permitted = int.from_bytes(xattr[4:8], "little")
    return bool(magic_etc & 1) and bool(permitted >> CAP_SYS_PTRACE & 1)


def _file_caps(path: str) -> bytes | None:
    try:
        return os.getxattr(path, "security.capability")
    except (OSError, AttributeError):
        return None


def ptrace_problem(euid: int, target_uid: int | None, ptrace_scope: int | None, cap_sys_ptrace: bool) -> str | None:
    """Why py-spy, run by a process of ``euid`` (not the server's parent), cannot attach to a process of
    ``target_uid`` (None: it may).  ``ptrace_scope`` is /proc/sys/kernel/yama/ptrace_scope (None: no
    Yama: classic rules).  Yama scope 1 lets a process trace only its descendants (the observer is not
    the server's parent), 2 only with CAP_SYS_PTRACE, 3 never.  Only the capability counts, never the
    uid: root in a container has no CAP_SYS_PTRACE by default (``cap_sys_ptrace``: py-spy will have it,
    from satpoint's effective set or from its own file capabilities)."""
    privileged = cap_sys_ptrace
    if ptrace_scope == 3:
        return "ptrace is disabled on this machine (kernel.yama.ptrace_scope = 3; only a reboot lifts it)"
    if ptrace_scope == 2 and not privileged:
        return f"no ptrace permission (kernel.yama.ptrace_scope = 2 needs CAP_SYS_PTRACE): {GRANT}"
    if ptrace_scope == 1 and not privileged:
        return (
            "no ptrace permission (kernel.yama.ptrace_scope = 1: only a process's parent may trace it, "
            f"and py-spy is not the server's parent): {GRANT}"
        )
    if target_uid is not None and target_uid != euid and not privileged:
        return f"no ptrace permission: the server runs as another user (uid {target_uid}): {GRANT}"
    return None


def preflight(pid: int | None) -> str | None:
    """Why a flame graph of ``pid``'s tree cannot be recorded from here (None: it can be tried)."""
    if pid is None:
        return NO_PID
    py_spy = find_py_spy()
    if py_spy is None:
        return NO_PYSPY
    try:
        target_uid: int | None = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return f"no process {pid} on this machine (is the server local, and still running?)"
    scope_text = _read("/proc/sys/kernel/yama/ptrace_scope")
    scope = int(scope_text.strip()) if scope_text and scope_text.strip().isdigit() else None
    status = _read("/proc/self/status")
    cap = has_cap_sys_ptrace(status) or (
        file_grants_ptrace(_file_caps(py_spy)) and has_cap_sys_ptrace(status, "CapBnd")
    )
    return ptrace_problem(os.geteuid(), target_uid, scope, cap)


def explain_failure(log_text: str, returncode: int | None) -> str:
    """A py-spy failure in a sentence (with how to grant ptrace where that is the cause)."""
    text = log_text.strip()
    low = text.lower()
    last = text.splitlines()[-1] if text else ""
    if "permission denied" in low or "operation not permitted" in low or "eperm" in low:
        return f"py-spy could not attach to the server (no ptrace permission: {last}): {GRANT}"
    if "no such process" in low or "failed to find process" in low:
        return f"py-spy found no server process to record ({last})"
    if "failed to find python version" in low or "not a python" in low:
        return f"py-spy could not read a Python interpreter in the server's process ({last})"
    code = "" if returncode is None else f" (exit code {returncode})"
    return f"py-spy failed{code}: {last or 'no output'}"


def record_command(
    py_spy: str,
    pid: int,
    output: Path,
    duration_s: float,
    rate_hz: int = 100,
    native: bool = False,
    nonblocking: bool = True,
) -> list[str]:
    """``py-spy record`` of ``pid`` and its children (MLServer runs one process per worker) into a
    speedscope file, for at most ``duration_s`` (it is also stopped with SIGINT when the hold ends).
    ``native`` frames need the process paused while its stack is unwound: py-spy refuses them with
    ``--nonblocking``, so ``native`` samples blocking."""
    cmd = [
        py_spy,
        "record",
        "--pid",
        str(pid),
        "--subprocesses",
        "--format",
        "speedscope",
        "--output",
        str(output),
        "--rate",
        str(int(rate_hz)),
        "--duration",
        str(max(1, math.floor(duration_s + 1e-6))),  # whole seconds; never past the hold
    ]
    if FUNCTION_GRANULARITY:
        cmd.append("--function")
    if native:  # py-spy 0.4: "Can't get native stack traces with the --nonblocking option"
        cmd.append("--native")
    elif nonblocking:
        cmd.append("--nonblocking")
    return cmd


def spare_cpus(server_cpus: list[int] | None, all_cpus: int | None = None) -> list[int] | None:
    """The CPUs the server may not use (py-spy runs there, so its reading never takes the server's
    cores); None when the server may use them all (or its affinity is unknown)."""
    if not server_cpus:
        return None
    spare = sorted(set(range(all_cpus or os.cpu_count() or 1)) - set(server_cpus))
    return spare or None


@dataclass
class PySpyRecording:
    """One py-spy recording, started at ``start_at`` (``time.monotonic``) by whoever polls it.

    It stops by itself after ``--duration``; ``stop`` asks it to stop now (SIGINT: py-spy then writes
    what it sampled) and waits for it, never leaving it running."""

    command: list[str]
    start_at: float
    duration_s: float
    log_path: Path
    output: Path
    #: the CPUs py-spy runs on (None: wherever the scheduler puts it)
    cpus: list[int] | None = None
    proc: subprocess.Popen[bytes] | None = None
    started_mono: float | None = None
    stopped_mono: float | None = None
    error: str | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    def due(self, now: float) -> bool:
        return self.proc is None and self.error is None and self.started_mono is None and now >= self.start_at

    def start(self) -> None:
        try:
            self._log = self.log_path.open("ab")
            self.started_mono = time.monotonic()
            self.proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                close_fds=True,
                # its own session: a Ctrl-C at the terminal reaches satpoint, which stops it when the
                # segment ends; SIGINT back to its default (the observer ignores it, and an ignored
                # signal stays ignored across exec): SIGINT is how py-spy is asked to write its file
                start_new_session=True,
                preexec_fn=self._in_child,
            )
        except OSError as e:
            self.error = f"py-spy could not be started: {e}"

    def _in_child(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        # lowest priority: where py-spy shares a core with the generator, the generator keeps its
        # schedule and py-spy's sampling waits (a late sample, not a late request)
        with contextlib.suppress(OSError):
            os.nice(NICE)
        if self.cpus:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, self.cpus)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, Any]:
        """Stop (or never start) the recording; returns what happened, for the results header."""
        proc, self.proc = self.proc, None
        returncode: int | None = None
        if proc is not None:
            if proc.poll() is None:
                self.stopped_mono = time.monotonic()
                proc.send_signal(signal.SIGINT)
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                returncode = proc.wait(timeout=5)
                self.error = self.error or f"py-spy did not finish writing within {timeout_s:g} s and was killed"
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.stopped_mono is None and self.started_mono is not None:  # it ended by itself (--duration)
            self.stopped_mono = min(time.monotonic(), self.started_mono + self.duration_s)
        if self.started_mono is None and self.error is None:
            self.error = "the stage ended before its hold began: nothing was recorded"
        written = self.output.exists() and self.output.stat().st_size > 0
        if self.error is None and not written:
            log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            self.error = explain_failure(log, returncode)
        return {
            "started_mono": self.started_mono,
            "stopped_mono": self.stopped_mono,
            "returncode": returncode,
            "written": written,
            "error": self.error,
            "cpus": self.cpus,
        }
