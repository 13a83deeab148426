"""Managed subprocesses: start a server, wait until it is ready, and make sure nothing outlives us.

A :class:`ManagedProcess` runs one command in its own session (so its process group id is its pid and
a Ctrl-C in the terminal does not reach it directly), with stdout and stderr going to a log file.
Stopping it sends SIGTERM to the whole process group, waits, then SIGKILLs the group and every
descendant it has ever seen (psutil snapshots catch children that moved to another group or session).

Belt and braces against leaks:

- ``with ManagedProcess(...)`` stops on normal exit, on exceptions and on ``KeyboardInterrupt``;
- ``stop()`` is registered with :mod:`atexit` at start and unregistered when it runs (the registry is
  atexit's own plus a per-instance lock and flag: no module-level state here);
- on Linux the child is started through a tiny exec wrapper that sets ``PR_SET_PDEATHSIG`` (SIGTERM), so
  even a SIGKILLed satpoint takes the server's main process down with it (the kernel ties this to the
  *thread* that started the child: start servers from a long-lived thread, or pass
  ``kill_with_parent=False``); the same wrapper applies CPU pinning before ``exec``, so no ``preexec_fn``
  (unsafe with threads) is needed;
- SIGTERM sent to satpoint itself skips ``atexit`` by default: wrap the run in :func:`sigterm_as_exit`
  (the CLI does) so SIGTERM unwinds like ``SystemExit`` and the context managers run.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO

import psutil

from satpoint.errors import SatpointError

__all__ = [
    "ManagedProcess",
    "TargetError",
    "free_port",
    "free_ports",
    "pids_alive",
    "sigterm_as_exit",
]

_LOG_TAIL_LINES = 40
_ORPHAN_GRACE_S = 1.0
_ERROR_LINE = re.compile(r"error|exception|fatal|critical", re.IGNORECASE)
_ERROR_LINES = 8
_LOG_TAIL_BYTES = 64 * 1024

# Runs as `python -I -S -c _EXEC_WRAPPER <parent_pid> <cpus|-> <pdeathsig 0|1> argv...`, then execs argv
# (same pid). Kept tiny and stdlib-only.
_EXEC_WRAPPER = """\
import os, signal, sys
parent, cpus, pdeath, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
if pdeath and sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        sys.exit(70)  # parent already gone: do not start an orphan
if cpus != "-":
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
os.execvp(argv[0], argv)
"""


class TargetError(SatpointError, RuntimeError):
    """A managed server could not be started, became unready, or died; the message has the log tail."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it; races are possible)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free TCP ports (all sockets are held open together while choosing)."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def pids_alive(pids: Sequence[int] | frozenset[int] | set[int]) -> list[int]:
    """The pids among ``pids`` that still run (zombies count as gone)."""
    alive: list[int] = []
    for pid in sorted(set(pids)):
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


@contextlib.contextmanager
def sigterm_as_exit(exit_code: int = 128 + signal.SIGTERM) -> Iterator[None]:
    """While active, SIGTERM raises ``SystemExit(exit_code)`` in the main thread, so ``finally`` blocks,
    context managers and ``atexit`` handlers run (Python's default SIGTERM action runs none of them).

    Only usable from the main thread; elsewhere it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(exit_code)

    previous = signal.signal(signal.SIGTERM, _handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class ManagedProcess:
    """One command in its own session, logging to a file, stopped for sure (see module docstring)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        cpus: Sequence[int] | None = None,
        name: str | None = None,
        kill_with_parent: bool = True,
    ) -> None:
        if not argv:
            raise ValueError("argv must not be empty")
        self._argv = [str(a) for a in argv]
        self._log_path = Path(log_path)
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._cpus = tuple(cpus) if cpus is not None else None
        self._name = name or Path(self._argv[0]).name
        self._kill_with_parent = kill_with_parent
        self._popen: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._log_offset = 0
        self._seen: dict[int, psutil.Process] = {}  # Process objects remember create times: no pid reuse
        self._lock = threading.RLock()
        self._stopping = False
        self._stopped = False

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> ManagedProcess:
        if self._popen is not None:
            raise TargetError(f"{self._name}: already started (pid {self._popen.pid})")
        executable = self._resolve_executable()
        if self._cpus is not None:
            _check_cpus(self._cpus)
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self._log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_offset = self._log_file.seek(0, os.SEEK_END)
        cpus_arg = ",".join(str(c) for c in self._cpus) if self._cpus is not None else "-"
        wrapped = [
            sys.executable,
            "-I",
            "-S",
            "-c",
            _EXEC_WRAPPER,
            str(os.getpid()),
            cpus_arg,
            "1" if self._kill_with_parent else "0",
            executable,
            *self._argv[1:],
        ]
        try:
            self._popen = subprocess.Popen(
                wrapped,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._log_file.close()
            self._log_file = None
            raise TargetError(f"{self._name}: could not start {self._argv!r}: {exc}") from exc
        with contextlib.suppress(psutil.Error):
            self._seen[self._popen.pid] = psutil.Process(self._popen.pid)
        atexit.register(self._stop_at_exit)
        return self

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the process group, wait up to ``grace_s`` for the main process (then at most
        ``_ORPHAN_GRACE_S`` more for the rest), then SIGKILL the group and every descendant seen.

        Idempotent and thread-safe. If the graceful part is interrupted (a second Ctrl-C, a signal
        handler calling ``stop`` again), everything is SIGKILLed at once before the interruption
        propagates. Returns the main process' exit code (None if never started)."""
        with self._lock:  # re-entrant: a signal handler may call stop() while stop() runs
            popen = self._popen
            if popen is None:
                return None
            if self._stopped:
                return popen.returncode
            if self._stopping:
                self._kill_now(popen)
                return popen.poll()
            self._stopping = True
            try:
                self._terminate(popen, grace_s)
            except BaseException:
                self._kill_now(popen)
                self._finish()
                raise
            self._finish()
            return popen.returncode

    def _terminate(self, popen: subprocess.Popen[bytes], grace_s: float) -> None:
        pgid = popen.pid  # start_new_session=True: the group id is the leader's pid
        self._snapshot_descendants()
        _signal_group(popen, signal.SIGTERM)
        deadline = time.monotonic() + max(grace_s, 0.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=max(deadline - time.monotonic(), 0.0))
        if popen.poll() is not None:
            # The leader is gone; what is left is either exiting or an orphan that ignores
            # SIGTERM (MLServer's workers do): a short wait, not the whole grace.
            deadline = min(deadline, time.monotonic() + _ORPHAN_GRACE_S)
        while self._alive_seen(exclude=pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if popen.poll() is None:
            self._snapshot_descendants()  # late children, before the leader goes
        self._kill_now(popen)
        final_deadline = time.monotonic() + 5.0
        while self._alive_seen(exclude=pgid) and time.monotonic() < final_deadline:
            time.sleep(0.02)

    def _kill_now(self, popen: subprocess.Popen[bytes]) -> None:
        _signal_group(popen, signal.SIGKILL)
        for proc in self._alive_seen():
            with contextlib.suppress(psutil.Error):
                proc.kill()  # psutil checks the pid was not reused since we saw it
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=10.0)

    def _finish(self) -> None:
        self._stopped = True
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        atexit.unregister(self._stop_at_exit)

    def _stop_at_exit(self) -> None:
        self.stop(grace_s=5.0)

    def __enter__(self) -> ManagedProcess:
        if self._popen is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- readiness -------------------------------------------------------------------------------------

    def wait_ready(
        self,
        check: Callable[[], bool],
        timeout_s: float,
        what: str,
        *,
        interval_s: float = 0.1,
        fail_patterns: Sequence[str] = (),
        abort: Callable[[], str | None] | None = None,
    ) -> float:
        """Poll ``check`` until it returns True; returns the seconds waited. Raises :class:`TargetError`
        (with the log tail) if the process exits first or ``timeout_s`` passes. Exceptions raised by
        ``check`` count as "not ready yet" (the last one is quoted on timeout). If the log written since
        start contains one of ``fail_patterns`` (case-insensitive), fail at once: some servers hang
        instead of exiting when, e.g., a port is taken.  ``abort`` (polled too) returns a reason to fail at
        once (e.g. the memory limit killed a process of the server), or None."""
        popen = self._require_started()
        patterns = [p.lower() for p in fail_patterns]
        started = time.monotonic()
        last_error: BaseException | None = None
        while True:
            code = popen.poll()
            if code is not None:
                raise TargetError(
                    f"{self._name} exited with code {_describe_code(code)} before {what} was ready "
                    f"(log: {self._log_path}).\n{self._tail_block()}"
                )
            try:
                if check():
                    self.descendants()
                    return time.monotonic() - started
            except Exception as exc:
                last_error = exc
            reason = abort() if abort is not None else None
            if reason is not None:
                raise TargetError(f"{self._name}: {what}: {reason} (log: {self._log_path}).\n{self._tail_block()}")
            if patterns:
                log = self.log_text().lower()
                hit = next((p for p in patterns if p in log), None)
                if hit is not None:
                    raise TargetError(
                        f"{self._name}: {what} failed to start: its log says {hit!r} "
                        f"(log: {self._log_path}).\n{self._tail_block()}"
                    )
            elapsed = time.monotonic() - started
            if elapsed >= timeout_s:
                hint = f" Last check error: {last_error!r}." if last_error is not None else ""
                raise TargetError(
                    f"{self._name}: {what} not ready after {timeout_s:.0f} s.{hint} "
                    f"(log: {self._log_path}).\n{self._tail_block()}"
                )
            time.sleep(min(interval_s, max(timeout_s - elapsed, 0.0)))

    # -- introspection ---------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._require_started().pid

    @property
    def name(self) -> str:
        return self._name

    @property
    def log_path(self) -> Path:
        return self._log_path

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen is not None else None

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def seen_pids(self) -> frozenset[int]:
        """Every pid of this tree observed so far (the leader plus descendants at each snapshot)."""
        return frozenset(self._seen)

    def alive_pids(self) -> list[int]:
        """Pids of this tree seen so far that still run (zombies and reused pids excluded)."""
        return sorted(p.pid for p in self._alive_seen())

    def descendants(self) -> list[int]:
        """Live descendants of the main process now (recorded in :attr:`seen_pids`)."""
        return sorted(self._snapshot_descendants())

    def log_text(self, max_bytes: int = 1024 * 1024) -> str:
        """What this process wrote to its log since it started (the last ``max_bytes`` of it)."""
        try:
            with open(self._log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(size - max_bytes, self._log_offset, 0))
                data = f.read()
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            with open(self._log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(size - _LOG_TAIL_BYTES, self._log_offset, 0))
                data = f.read()
        except OSError:
            return ""
        text = data.decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # -- internals -------------------------------------------------------------------------------------

    def _require_started(self) -> subprocess.Popen[bytes]:
        if self._popen is None:
            raise TargetError(f"{self._name}: not started")
        return self._popen

    def _snapshot_descendants(self) -> set[int]:
        if self._popen is None:
            return set()
        leader = self._seen.get(self._popen.pid)
        try:
            children = leader.children(recursive=True) if leader is not None else []
        except psutil.Error:
            children = []
        for child in children:
            self._seen.setdefault(child.pid, child)
        return {c.pid for c in children}

    def _alive_seen(self, exclude: int | None = None) -> list[psutil.Process]:
        alive: list[psutil.Process] = []
        for pid, proc in self._seen.items():
            if pid == exclude:
                continue
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                continue
        return alive

    def _tail_block(self) -> str:
        tail = self.log_tail()
        if not tail:
            return "(log is empty)"
        block = f"--- last lines of {self._log_path.name} ---\n{tail}\n---"
        # Servers often log the cause, then pages of shutdown noise: quote earlier error lines too.
        tail_lines = set(tail.splitlines())
        errors = [
            line
            for line in self.log_text().splitlines()
            if _ERROR_LINE.search(line) and line not in tail_lines and not line.startswith(" ")
        ]
        if errors:
            block = "--- error lines earlier in the log ---\n" + "\n".join(errors[-_ERROR_LINES:]) + "\n" + block
        return block

    def _resolve_executable(self) -> str:
        exe = self._argv[0]
        if os.sep in exe:
            if not os.access(exe, os.X_OK):
                raise TargetError(f"{self._name}: {exe} is not an executable file")
            return exe
        found = shutil.which(exe, path=(self._env or os.environ).get("PATH"))
        if found is None:
            raise TargetError(f"{self._name}: command not found: {exe}")
        return found


def _check_cpus(cpus: Sequence[int]) -> None:
    if not hasattr(os, "sched_setaffinity"):
        raise TargetError("CPU pinning needs os.sched_setaffinity (Linux)")
    if not cpus:
        raise TargetError("cpus must not be empty (use None for no pinning)")
    # Not our own affinity: a child may be pinned to any CPU of the machine (or cpuset); the kernel
    # rejects CPUs outside the cpuset at exec time, and that shows up as an early exit with the log.
    count = os.cpu_count() or 1
    bad = sorted(c for c in cpus if not 0 <= c < count)
    if bad:
        raise TargetError(f"cannot pin to CPUs {bad}: this machine has CPUs 0-{count - 1}")


def _signal_group(popen: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the group led by ``popen`` (its pgid is its pid). Once the leader is reaped, its pid stays
    reserved while any group member lives; if a process with that pid exists again, the pid was
    reused, so our group is empty and that group is a stranger's: leave it alone."""
    pgid = popen.pid
    if popen.poll() is not None and psutil.pid_exists(pgid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _describe_code(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"{code} ({signal.Signals(-code).name})"
    return str(code)
