"""End-to-end: the fault matrix. ``satpoint run`` against a server that misbehaves one way at a time.

For every fault the run completes (or stops cleanly), every due request of the plan is accounted for
(sent + never sent = due), errors land in the expected classes, the exit code is the documented one, the
results folder is complete and ``satpoint report`` renders it. The documentation's "What happens when the
server misbehaves" (docs/reference/fault-matrix.md) is this table.

Each fault runs once per module (``runs`` caches it), so a test that asks more of one run costs nothing.
Every run is short (200 rps for 3-4 s), every subprocess has a timeout, servers are ``SimServer`` context
managers, and a process still alive at the end is killed by pid.

The REST client is being changed (idle connections closed before a server's keep-alive timeout; a request
that fails on a *reused* connection before any response byte is resent once on a fresh one, recorded as a
retry; a 5xx with a body classed by its status; a connect timeout): where the class depends on that, the
allowed classes hold before and after, and a comment says what the class becomes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from typer.testing import CliRunner

import satpoint
from satpoint.cli.main import app
from satpoint.engine.schedule import due_times
from satpoint.metrics.checkpoint import read_shard_file
from satpoint.metrics.records import Outcome
from satpoint.plan import Stage
from satpoint.servers.sim.process import SimServer

pytestmark = pytest.mark.slow
SATPOINT = [sys.executable, "-m", "satpoint"]
TIMEOUT_S = 1.0  # --timeout of every run: a stalled request must end by it
CONNECTION_GONE = {"conn_refused", "conn_reset", "conn_error"}


@dataclass(frozen=True)
class Fault:
    """One row of the matrix: the server's fault, the plan, and what satpoint must make of it."""

    sim: dict[str, Any]  # SimServer's fault arguments
    exit_code: int
    allowed: frozenset[str]  # error classes (summary.json's stages[].errors) that may appear
    required: frozenset[str] = frozenset()  # ... and those that must
    verdict: str | None = None  # every stage's verdict, when it is certain
    stage: str = "200:0:3"
    arrival: str = "constant"
    kill_server: bool = False  # "process killed": SIGKILL the server once the run has rows
    extra: tuple[str, ...] = field(default=())


# fault_after=1 spares the pre-flight's test request (the first inference request) where the fault would
# otherwise make the run stop before it starts; test_preflight_* covers that case.
MATRIX: dict[str, Fault] = {
    # a partial answer, then a TCP reset: the connection died mid-response. Bytes had arrived, so the
    # client's resend-once rule (reused connection, no response byte yet) does not apply: conn_reset stays.
    "reset-mid-response": Fault(
        {"fault": "reset-mid-response", "fault_rate": 0.2, "fault_after": 1},
        exit_code=0,
        allowed=frozenset({"conn_reset"}),
        required=frozenset({"conn_reset"}),
        verdict="failing",
    ),
    # the server closes (FIN) after N answers without Connection: close. A request sent on the connection
    # while the FIN is on its way fails before any response byte: the client resends it once on a fresh
    # connection (recorded as retried), so nothing fails.
    "close-after": Fault(
        {"fault": "close-after", "close_after": 5},
        exit_code=0,
        allowed=frozenset(),
    ),
    # Connection: close on every answer: the client opens a connection per request, nothing fails.
    "connection-close": Fault(
        {"fault": "connection-close"},
        exit_code=0,
        allowed=frozenset(),
    ),
    # the server closes connections idle for 5 ms. A request sent on one just as it closes fails before
    # any response byte (Poisson gaps make that happen a few times per run); the client resends it once
    # on a fresh connection, so nothing fails.
    "idle-timeout": Fault(
        {"fault": "idle-timeout", "idle_timeout_s": 0.005},
        exit_code=0,
        allowed=frozenset(),
        arrival="poisson",
    ),
    # not HTTP (an invalid Content-Length): malformed
    "malformed": Fault(
        {"fault": "malformed", "fault_rate": 0.2, "fault_after": 1},
        exit_code=0,
        allowed=frozenset({"malformed"}),
        required=frozenset({"malformed"}),
        verdict="failing",
    ),
    # headers and half the body, then a close: the connection ended before a full response, conn_reset
    # (response bytes had arrived: no resend, before or after the client's change)
    "truncated": Fault(
        {"fault": "truncated", "fault_rate": 0.2, "fault_after": 1},
        exit_code=0,
        allowed=frozenset({"conn_reset"}),
        required=frozenset({"conn_reset"}),
        verdict="failing",
    ),
    # the status line, then the rest of the headers 300 ms later: slow, not failed
    "slow-headers": Fault(
        {"fault": "slow-headers", "slow_headers_ms": 300, "fault_after": 1},
        exit_code=0,
        allowed=frozenset(),
    ),
    # ... and slower than --timeout: timeout (a status line that arrived does not extend the deadline)
    "slow-headers-past-timeout": Fault(
        {"fault": "slow-headers", "slow_headers_ms": 1500, "fault_rate": 0.2, "fault_after": 1},
        exit_code=0,
        allowed=frozenset({"timeout"}),
        required=frozenset({"timeout"}),
        verdict="failing",
    ),
    # the server hangs for good after ~1 s of answers: every later request times out at --timeout and the
    # run ends on time. Requests still get connections accepted, so this is a failing stage (exit 0), not
    # a target that stopped answering (refused/reset connections, exit 1).
    "stall": Fault(
        {"fault": "stall", "fault_after": 200},
        exit_code=0,
        allowed=frozenset({"timeout"}),
        required=frozenset({"timeout"}),
        verdict="failing",
    ),
    # 503 with a JSON body framed by Content-Length, keep-alive: http_503
    "error-body": Fault(
        {"fault": "error-body", "fault_rate": 0.2, "fault_after": 1},
        exit_code=0,
        allowed=frozenset({"http_503"}),
        required=frozenset({"http_503"}),
        verdict="failing",
    ),
    # 503 with a JSON body that ends when the connection closes (no Content-Length; legal HTTP/1.1, what
    # HTTP/1.0-style error pages of proxies look like): the connection's end completes the body, so it is
    # classed by its status (test_eof_framed_error_body_is_classed_by_its_status).
    "error-body-eof": Fault(
        {"fault": "error-body", "error_framing": "eof", "fault_rate": 0.2, "fault_after": 1},
        exit_code=0,
        allowed=frozenset({"http_503"}),
        verdict="failing",
    ),
    # the server's process is SIGKILLed mid-run: refused connections from then on, the run says the
    # target stopped answering and exits 1, with everything measured before kept
    "process-killed": Fault(
        {},
        exit_code=1,
        allowed=frozenset(CONNECTION_GONE),
        required=frozenset({"conn_refused"}),
        verdict="failing",
        stage="200:0:4",
        kill_server=True,
    ),
}


@dataclass
class Run:
    name: str
    fault: Fault
    out: Path
    returncode: int
    stdout: str
    stderr: str
    summary: dict[str, Any]
    rows: dict[str, Any]
    due: int


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()


def _wait_for(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _has_rows(out: Path) -> bool:
    path = out / "segment-000.shard-0.rows"
    got = read_shard_file(path) if path.exists() else None
    return got is not None and len(got.records) > 0


def _run(name: str, base: Path, started: list[int]) -> Run:
    fault = MATRIX[name]
    out = base / name
    cmd = [
        *SATPOINT, "run", "--model", "sim", "--stage", fault.stage, "--arrival", fault.arrival,
        "--timeout", str(TIMEOUT_S), "--out", str(out), "--no-html", *fault.extra,
    ]  # fmt: skip
    with SimServer(slots=20, service_ms=2, **fault.sim) as sim:
        proc = subprocess.Popen([*cmd, "--url", sim.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(proc.pid)
        if fault.kill_server:
            _wait_for(lambda: _has_rows(out), 30, "the run's first checkpoint")
            os.kill(sim.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=90)
    due = len(due_times([Stage.parse(fault.stage)], fault.arrival, 0))  # type: ignore[arg-type]
    summary = json.loads((out / "summary.json").read_text())
    return Run(name, fault, out, proc.returncode, stdout, stderr, summary, satpoint.load(out).rows(), due)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Run]]:
    """Each fault's run, made once per module on first use."""
    base = tmp_path_factory.mktemp("faults")
    done: dict[str, Run] = {}
    started: list[int] = []

    def get(name: str) -> Run:
        if name not in done:
            done[name] = _run(name, base, started)
        return done[name]

    yield get
    _kill(started)


def _error_classes(summary: dict[str, Any]) -> set[str]:
    return {cls for st in summary["stages"] for cls, n in st["errors"].items() if n}


def _all_row_classes(rows: dict[str, Any]) -> set[str]:
    """The classes of every finished row that failed (not just the stages' steady windows)."""
    outcomes = rows["outcome"]
    classes = set()
    for o, status in zip(outcomes, rows["status"], strict=True):
        o = Outcome(int(o))
        if o in (Outcome.OK, Outcome.UNFINISHED, Outcome.NOT_SENT):
            continue
        classes.add(f"http_{status}" if o == Outcome.HTTP_ERROR else o.name.lower())
    return classes


@pytest.mark.parametrize("name", list(MATRIX))
def test_fault(name: str, runs: Callable[[str], Run]) -> None:
    run = runs(name)
    fault = run.fault
    context = f"{name}: exit {run.returncode}\n{run.stderr[-2000:]}"

    # the documented exit code, and no traceback
    assert run.returncode == fault.exit_code, context
    assert "Traceback" not in run.stderr, context

    # every due request is accounted for: sent + never sent = due
    rows = run.rows
    n = len(rows["intended"])
    assert n == run.due, context
    sent = ~np.isnan(rows["sent"])
    never_sent = rows["outcome"] == Outcome.NOT_SENT
    assert int(sent.sum()) + int(never_sent.sum()) == run.due, context
    assert not (sent & never_sent).any()
    assert set(np.unique(rows["outcome"]).tolist()) <= {int(o) for o in Outcome}

    # errors land in the right classes: in the stages' windows and in every row
    classes = _error_classes(run.summary)
    assert classes <= fault.allowed, context
    assert fault.required <= classes, context
    assert _all_row_classes(rows) <= fault.allowed, context
    if fault.verdict is not None:
        assert [st["verdict"] for st in run.summary["stages"]] == [fault.verdict], context

    # the run said where the target stopped answering exactly when it exits 1
    assert (run.summary["target_lost"] is not None) == (fault.exit_code == 1), run.summary["target_lost"]
    assert not run.summary["interrupted"]

    # the results folder is complete (no checkpoint left behind), and `satpoint report` renders it
    names = {p.name for p in run.out.iterdir()}
    assert {"results.json", "segment-000.npz", "summary.json", "intervals.csv"} <= names, names
    assert not [p for p in names if p.endswith(".rows")], names
    result = CliRunner().invoke(app, ["report", str(run.out)])
    assert result.exit_code == 0, result.output
    assert (run.out / "report.html").stat().st_size > 10_000


def test_stall_ends_by_the_per_request_timeout(runs: Callable[[str], Run]) -> None:
    rows = runs("stall").rows
    timed_out = rows["outcome"] == Outcome.TIMEOUT
    assert timed_out.sum() > 0.5 * len(timed_out)  # the server hung after ~1 s of a 3 s stage
    # the generator expires requests every 0.25 s: a timeout fires within that of --timeout (plus slack)
    late_s = 0.25 + 0.5
    waited = rows["done"][timed_out] - rows["sent"][timed_out]
    assert waited.min() >= TIMEOUT_S - 0.01 and waited.max() < TIMEOUT_S + late_s
    assert np.nanmax(rows["done"]) < rows["intended"].max() + TIMEOUT_S + late_s  # so the run ended on time


def test_slow_headers_show_in_latency_not_in_errors(runs: Callable[[str], Run]) -> None:
    (stage,) = runs("slow-headers").summary["stages"]
    assert stage["errors"] == {} and stage["error_rate"] == 0
    assert stage["latency_ms"]["p50"] >= 300  # every answer's headers were held 300 ms


def test_error_body_status_is_recorded(runs: Callable[[str], Run]) -> None:
    rows = runs("error-body").rows
    failed = rows["outcome"] == Outcome.HTTP_ERROR
    assert set(rows["status"][failed].tolist()) == {503}
    assert failed.mean() == pytest.approx(0.2, abs=0.06)  # --fault-rate 0.2


def test_eof_framed_error_body_is_classed_by_its_status(runs: Callable[[str], Run]) -> None:
    assert _error_classes(runs("error-body-eof").summary) == {"http_503"}


def test_killed_server_is_named_as_lost_with_what_came_before_kept(runs: Callable[[str], Run]) -> None:
    run = runs("process-killed")
    assert "the target stopped answering during stage 1 (200 rps)" in " ".join(run.stderr.split())
    assert (run.rows["outcome"] == Outcome.OK).sum() > 50


@pytest.mark.parametrize("fault", ["reset-mid-response", "truncated", "error-body"])
def test_preflight_hit_by_the_fault_stops_before_any_load(fault: str, tmp_path: Path) -> None:
    """Every inference answer faulty from the first: the pre-flight's test request fails, exit 2, one line."""
    out = tmp_path / "r"
    with SimServer(slots=4, service_ms=2, fault=fault) as sim:
        proc = subprocess.run(
            [*SATPOINT, "run", "--url", sim.url, "--model", "sim", "--stage", "50:0:1", "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert not list(out.glob("segment-*")), "no load was sent"
