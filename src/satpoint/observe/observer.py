"""``Observer``: the observer process (``agent``) for the length of a run, and the marks around segments."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from satpoint.config import ObserveOptions
from satpoint.metrics.observed import SAMPLES_FILE, SCRAPES_FILE
from satpoint.observe.procs import allowed_cores
from satpoint.pythonpath import prepend_pythonpath, satpoint_root
from satpoint.redact import redact_url

START_TIMEOUT_S = 15.0
MARK_TIMEOUT_S = 8.0  # a mark samples once and scrapes every endpoint at once (at most SCRAPE_ROUND_S)
FLAME_STOP_TIMEOUT_S = 30.0  # py-spy writes its file when stopped (STOP_TIMEOUT_S, then it is killed)
LOG_FILE = "observer.log"

NO_PIDS = (
    "server resources (CPU, memory): no local server process to sample (satpoint did not start the server "
    "and no --server-pid was given)"
)
NO_METRICS = "server-side metrics (counts, server latency, queue vs compute, batch size): no --metrics-url given"


class Observer:
    """Watches a server while a run measures it (a no-op when ``options`` names nothing to watch).

    Use as a context manager around the run; call ``mark("start N")`` / ``mark("end N")`` around
    segment N.  Problems never stop the run: they are collected in ``problems`` (and the header)."""

    def __init__(self, options: ObserveOptions, out_dir: Path) -> None:
        self.options = options.validate()
        self.out_dir = Path(out_dir)
        self.problems: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._cores: dict[str, Any] = {}
        self._gpu: dict[str, Any] = {}
        self._seq = 0
        #: marks the observer did not take in time (their scrapes are tagged ``late TAG``, or missing)
        self.missed_marks: list[str] = []

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Observer:
        opts = self.options
        if opts.server_pids:
            self._cores = allowed_cores(opts.server_pids)
        if not opts.active:
            return self
        self.out_dir.mkdir(parents=True, exist_ok=True)
        cfg = {
            "out_dir": str(self.out_dir),
            "server_pids": list(opts.server_pids),
            "metrics_urls": [[u, redact_url(u)] for u in opts.metrics_urls],
            "sample_interval_s": opts.sample_interval_s,
            "scrape_interval_s": opts.scrape_interval_s,
            "parent_pid": os.getpid(),
            "cpus": self._cores.get("affinity"),
        }
        env = dict(os.environ)
        prepend_pythonpath(env, satpoint_root())  # the agent imports this satpoint, however it was imported
        self._log = (self.out_dir / LOG_FILE).open("wb")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "satpoint.observe.agent"],  # the configuration on stdin: argv is public
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            close_fds=True,
            bufsize=0,
        )
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(cfg).encode() + b"\n")
            self._proc.stdin.flush()
        except OSError:
            pass
        line = self._read_line(START_TIMEOUT_S) or ""
        if line.split(" ", 1)[0] != "ready":
            self.problems.append("the observer process did not start: nothing was seen of the server")
            self.stop()
            return self
        try:
            self._gpu = dict(json.loads(line.split(" ", 1)[1]).get("gpu") or {})
        except (IndexError, ValueError, AttributeError):
            self._gpu = {}
        return self

    def _read_line(self, timeout_s: float) -> str | None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            return None
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        if not ready:
            return None
        return proc.stdout.readline().decode(errors="replace").strip() or None

    def mark(self, tag: str) -> None:
        """Sample and scrape now, tagged ``tag``; returns once it is written (or after a timeout).  A mark the
        observer does not take within ``MARK_TIMEOUT_S`` is recorded as missed (in ``problems``) and never
        taken later: its scrapes would not bracket the segment's requests."""
        deadline = time.monotonic() + MARK_TIMEOUT_S
        answer = self._ask(f"mark {deadline:.6f} {tag}", MARK_TIMEOUT_S)
        if answer is None and not self.running:
            return
        if answer != "ok":
            self.missed_marks.append(tag)
            self.problems.append(
                f"the observer did not take the mark {tag!r} within {MARK_TIMEOUT_S:g} s: it is missing "
                "(that segment's server-side counts are not compared)"
            )

    def flame_start(self, request: dict[str, Any]) -> bool:
        """Ask the observer to run py-spy (``request``: ``command``, ``start_at_mono``, ``duration_s``,
        ``output``); False when there is no observer to ask."""
        return self._ask("flame " + json.dumps(request), MARK_TIMEOUT_S) == "ok"

    def flame_stop(self) -> dict[str, Any]:
        """Stop the recording (if it still runs) and return what happened (``PySpyRecording.stop``)."""
        line = self._ask("flame_stop", FLAME_STOP_TIMEOUT_S)
        if line is None or not line.startswith("ok "):
            return {"error": "the observer process did not answer: the flame graph was not recorded"}
        try:
            return dict(json.loads(line[3:]))
        except ValueError:
            return {"error": f"the observer's answer could not be read: {line[:200]!r}"}

    def _ask(self, command: str, timeout_s: float) -> str | None:
        """Send ``command`` under a new sequence number; its answer (without the number), or None when none
        came within ``timeout_s``.  Answers to earlier commands (which came too late) are discarded."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.poll() is not None:
            return None
        self._seq += 1
        seq = str(self._seq)
        try:
            proc.stdin.write(f"{seq} {command}\n".encode())
            proc.stdin.flush()
        except OSError:
            return None
        until = time.monotonic() + timeout_s
        while (left := until - time.monotonic()) > 0:
            line = self._read_line(left)
            if line is None:
                return None
            got, _, answer = line.partition(" ")
            if got == seq:
                return answer
        return None

    def describe(self) -> dict[str, Any]:
        """The header's ``observe`` block: what was watched, the server's allowed cores, what was not seen."""
        opts = self.options
        not_seen = []
        if not opts.server_pids:
            not_seen.append(NO_PIDS)
        if not opts.metrics_urls:
            not_seen.append(NO_METRICS)
        gpu_why = self._gpu.get("not_seen")
        if isinstance(gpu_why, str) and gpu_why:
            not_seen.append(gpu_why)
        return {
            "server_pids": list(opts.server_pids),
            "metrics_urls": [redact_url(u) for u in opts.metrics_urls],
            "sample_interval_s": opts.sample_interval_s,
            "scrape_interval_s": opts.scrape_interval_s,
            **self._cores,
            "samples_file": SAMPLES_FILE if opts.server_pids else None,
            "scrapes_file": SCRAPES_FILE if opts.metrics_urls else None,
            "gpus": list(self._gpu.get("devices") or []),
            "not_seen": not_seen,
            "problems": list(self.problems),
            "missed_marks": list(self.missed_marks),
        }

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.write(b"quit\n")
                    proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
            log = self.out_dir / LOG_FILE
            if log.exists() and log.stat().st_size == 0:
                log.unlink()

    def __enter__(self) -> Observer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
