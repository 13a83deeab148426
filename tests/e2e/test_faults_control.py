"""End-to-end rows of the fault matrix around the run rather than in it: a control endpoint that redirects
(and proxy variables that would capture the control calls), and an observer that stops answering.

Each run is short (100 rps for 3-4 s against ``SimServer``), every subprocess has a timeout, every due
request is accounted for, the exit code is the documented one and ``satpoint report`` renders the folder
(where the run got as far as writing one)."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from typer.testing import CliRunner

import satpoint
from satpoint.cli.main import app
from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Outcome
from satpoint.plan import Stage
from satpoint.servers.sim.process import SimServer

pytestmark = pytest.mark.slow
SATPOINT = [sys.executable, "-m", "satpoint"]
TOKEN = "sk-CONTROL-SECRET-55"


@contextmanager
def recording_server(answer: Callable[[http.server.BaseHTTPRequestHandler], None]) -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that answers with ``answer`` and records ``METHOD path Authorization``."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            seen.append(f"{self.command} {self.path} {self.headers.get('Authorization')}")
            answer(self)

        do_GET = do_POST = do_CONNECT = _any

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _status(code: int, headers: dict[str, str] | None = None, body: bytes = b"") -> Callable[[Any], None]:
    def answer(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(code)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return answer


def _accounted(out: Path, stage: str) -> None:
    """Every due request has its row: sent + never sent = due."""
    rows = satpoint.load(out).rows()
    due = len(due_times([Stage.parse(stage)], "constant", 0))
    sent = ~np.isnan(rows["sent"])
    never_sent = rows["outcome"] == Outcome.NOT_SENT
    assert len(rows["intended"]) == due
    assert int(sent.sum()) + int(never_sent.sum()) == due and not (sent & never_sent).any()


def _renders(out: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "report.html").stat().st_size > 10_000


def test_a_redirecting_control_endpoint_is_an_error_naming_the_location(tmp_path: Path) -> None:
    """Readiness answered with 307 elsewhere: exit 2 before any load, the Location named (redacted), and
    nothing, the Authorization header least of all, reaches the other address."""
    out = tmp_path / "run"
    with recording_server(_status(200, body=b"{}")) as (elsewhere, reached):
        location = f"{elsewhere}/v2/health/ready?token=loc-SECRET-1"
        with recording_server(_status(307, {"Location": location})) as (url, asked):
            r = subprocess.run(
                [*SATPOINT, "run", "--url", url, "--model", "m", "--header", f"Authorization: Bearer {TOKEN}",
                 "--stage", "100:0:3", "--out", str(out)],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
    assert r.returncode == 2, r.stderr + r.stdout
    assert "Traceback" not in r.stderr
    assert "HTTP 307" in r.stderr and f"{elsewhere}/v2/health/ready?token=***" in r.stderr, r.stderr
    assert "loc-SECRET-1" not in r.stderr + r.stdout and TOKEN not in r.stderr + r.stdout
    assert reached == []  # no request followed the redirect
    assert asked == [f"GET /v2/health/ready Bearer {TOKEN}"]  # one control call, no load
    assert not out.exists() or not list(out.glob("segment-*"))


def test_proxy_variables_capture_no_control_call(tmp_path: Path) -> None:
    """With http_proxy/https_proxy/all_proxy set, the pre-flight (like the load) goes straight to the target."""
    out = tmp_path / "run"
    stage = "100:0:3"
    with recording_server(_status(502)) as (proxy, proxied), SimServer(slots=10, service_ms=2) as sim:
        env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
        env.update({k: proxy for k in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy")})
        r = subprocess.run(
            [*SATPOINT, "run", "--url", sim.url, "--model", "sim", "--header", f"Authorization: Bearer {TOKEN}",
             "--stage", stage, "--out", str(out), "--no-html"],
            capture_output=True, text=True, timeout=90, env=env,
        )  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    assert proxied == []
    _accounted(out, stage)
    summary = json.loads((out / "summary.json").read_text())
    assert [st["verdict"] for st in summary["stages"]] == ["stable"]
    _renders(out)


def _agent_of(pid: int) -> psutil.Process | None:
    try:
        for child in psutil.Process(pid).children(recursive=True):
            if "satpoint.observe.agent" in " ".join(child.cmdline()):
                return child
    except psutil.Error:
        return None
    return None


def _wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_an_observer_that_stops_answering_leaves_its_mark_missing_not_shifted(tmp_path: Path) -> None:
    """The observer is stopped (SIGSTOP) while the stage runs: the run completes on time, the end mark it
    never took is flagged missing (no scrape is tagged with it, no cross-check made of the wrong window),
    and when it resumes its late answer is discarded."""
    out = tmp_path / "run"
    stage = "100:0:4"
    metrics_answer = _status(200, body=b"model_infer_request_success_total 3\n")
    with recording_server(metrics_answer) as (metrics, _), SimServer(slots=10, service_ms=2) as sim:
        proc = subprocess.Popen(
            [*SATPOINT, "run", "--url", sim.url, "--model", "sim", "--stage", stage, "--out", str(out),
             "--no-html", "--metrics-url", f"{metrics}/metrics"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            _wait_for(lambda: (out / "segment-000.shard-0.rows").exists(), 30, "the stage's first rows")
            agent = _agent_of(proc.pid)
            assert agent is not None
            agent.send_signal(signal.SIGSTOP)  # started: its start mark was taken
            header = out / "results.json"
            _wait_for(lambda: "'end 0'" in header.read_text(), 40, "the end mark to be given up")
            agent.send_signal(signal.SIGCONT)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, stderr + stdout
    assert not agent.is_running() or agent.status() == psutil.STATUS_ZOMBIE
    _accounted(out, stage)
    summary = json.loads((out / "summary.json").read_text())
    problems = " ".join(summary["observed"]["problems"])
    assert "'end 0'" in problems and "missing" in problems, problems
    scrapes = [json.loads(line) for line in (out / "server-metrics.jsonl").read_text().splitlines()]
    tags = [s["tag"] for s in scrapes]
    assert "start 0" in tags and "end 0" not in tags, tags
    (st,) = summary["stages"]
    assert all(b.get("cross_check") is None for b in st["server_metrics"]), st["server_metrics"]
    _renders(out)
