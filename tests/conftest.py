"""Settings for the whole test session."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests import xdist_alone as alone
from tests.xdist_alone import ALONE

# A suite started in the background by a shell without job control (`cmd &` in a script) inherits SIGINT
# ignored, and so would every process it starts: satpoint then never sees the Ctrl-C the tests send it.
# A handled signal is reset to its default in a child at exec, so a handler here gives the children theirs.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{ALONE}: runs while no other test runs (after the others, on one worker): what it asserts depends on the"
        " machine being otherwise idle (other processes' CPU, the machine's speed, a capacity or latency that a"
        " sibling worker's load would move)",
    )
    alone.configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    alone.unconfigure(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    alone.configure_node(node)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    alone.collection_finish(session)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (``addopts``) runs the tests marked ``alone`` after the others, by themselves."""
    return alone.AloneLastScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None


#: outcome of each ``mlserver_in_process`` test run apart: nodeid -> (outcome, message)
_APART: dict[str, tuple[str, str]] = {}


def _run_apart(items: list[pytest.Item], rootpath: Path) -> None:
    """Run ``items`` (one module's tests) in one pytest process of their own and record each one's outcome:
    one interpreter start and one import of MLServer's modules for the module, not one per test."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "apart.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "--durations=0",
               f"--junitxml={report}"]  # fmt: skip
        done = subprocess.run([*cmd, *(i.nodeid for i in items)], cwd=rootpath, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        output = f"{done.stdout[-4000:]}{done.stderr[-2000:]}"
        cases = {c.get("name"): c for c in ET.parse(report).iter("testcase")} if report.exists() else {}
    for item in items:
        case = cases.get(item.name)
        if case is None:
            _APART[item.nodeid] = ("failed", f"no outcome in the process of its own:\n{output}")
        elif (bad := next((e for e in case if e.tag in ("failure", "error")), None)) is not None:
            _APART[item.nodeid] = ("failed", f"{bad.get('message', '')}\n{bad.text or ''}\n{output}")
        elif (skipped := case.find("skipped")) is not None:
            _APART[item.nodeid] = ("skipped", skipped.get("message", ""))
        else:
            _APART[item.nodeid] = ("passed", "")


def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A test marked ``mlserver_in_process`` loads MLServer's modules into the test process.  MLServer's and
    tritonclient's gRPC modules both register ``inference.*`` in protobuf's default pool and cannot share a
    process; once an earlier test has imported tritonclient, such a test runs in a pytest process of its own,
    with the other tests of its module that are to run (it passes only if it passes there)."""
    if pyfuncitem.get_closest_marker("mlserver_in_process") is None or "tritonclient.grpc" not in sys.modules:
        return None
    if pyfuncitem.nodeid not in _APART:
        same = [
            i for i in pyfuncitem.session.items
            if isinstance(i, pytest.Function) and i.module is pyfuncitem.module and i.cls is None
            and i.get_closest_marker("mlserver_in_process") is not None and i.nodeid not in _APART
        ]  # fmt: skip
        _run_apart(same if pyfuncitem in same else [pyfuncitem], pyfuncitem.config.rootpath)
    outcome, message = _APART.pop(pyfuncitem.nodeid)
    if outcome == "skipped":
        pytest.skip(message)
    if outcome == "failed":
        raise AssertionError(f"{pyfuncitem.nodeid} in a process of its own:\n{message}")
    return True
