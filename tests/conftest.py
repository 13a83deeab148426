"""Settings for the whole test session."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

# A suite started in the background by a shell without job control (`cmd &` in a script) inherits SIGINT
# ignored, and so would every process it starts: satpoint then never sees the Ctrl-C the tests send it.
# A handled signal is reset to its default in a child at exec, so a handler here gives the children theirs.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A test marked ``mlserver_in_process`` loads MLServer's modules into the test process.  MLServer's and
    tritonclient's gRPC modules both register ``inference.*`` in protobuf's default pool and cannot share a
    process; once an earlier test has imported tritonclient, such a test runs in a pytest process of its own
    (it passes only if it passes there)."""
    if pyfuncitem.get_closest_marker("mlserver_in_process") is None or "tritonclient.grpc" not in sys.modules:
        return None
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", pyfuncitem.nodeid]
    done = subprocess.run(cmd, cwd=pyfuncitem.config.rootpath, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise AssertionError(
            f"{pyfuncitem.nodeid} in a process of its own:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
        )
    return True
