"""Start ``satpoint sim`` as a subprocess for end-to-end tests; always stopped by its PID."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

_LINE = re.compile(r"listening on (http://[\d.]+:\d+)")


@contextmanager
def sim_server(*args: str, cpus: str | None = None) -> Iterator[str]:
    cmd = [sys.executable, "-m", "satpoint.servers.sim", "--port", "0", *args]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 20
        url = None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            m = _LINE.search(line)
            if m:
                url = m.group(1)
                break
        assert url, f"sim did not start (exit {proc.poll()})"
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
