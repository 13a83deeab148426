"""End-to-end: a token passed with --header (and credentials in the URL, a metrics URL's query, a
--reconfigure command, the embedded server's --env) appear nowhere in the results folder, in what
satpoint prints or in the argv of any process it starts, yet reach the server."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.servers.sim.process import SimServer
from tests.http_stub import QuietHandler, serving

pytestmark = pytest.mark.slow

TOKEN = "sk-TEST-SECRET-123"
API_KEY = "ak-TEST-SECRET-456"
USER, PASSWORD = "alice", "pw-TEST-SECRET-789"
QUERY_TOKEN = "qt-TEST-SECRET-000"
SECRETS = [TOKEN, API_KEY, PASSWORD, QUERY_TOKEN, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()]
HEADERS = [f"Authorization: Bearer {TOKEN}", f"X-API-Key: {API_KEY}", "Seldon-Model: sim"]


def satpoint(*args: str | Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "satpoint", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _url(protocol: str, port: int) -> str:
    if protocol == "rest":
        return f"http://{USER}:{PASSWORD}@127.0.0.1:{port}/?token={QUERY_TOKEN}&tenant=ml"
    return f"grpc://{USER}:{PASSWORD}@127.0.0.1:{port}"  # a gRPC target has no query


def _contents(folder: Path) -> list[tuple[str, bytes]]:
    """Every file of the folder as bytes, and every member of the .npz archives decompressed."""
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        out.append((str(path), path.read_bytes()))
        if path.suffix == ".npz":
            with zipfile.ZipFile(path) as z:
                out += [(f"{path}:{name}", z.read(name)) for name in z.namelist()]
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_a_token_appears_nowhere_in_the_results_or_the_output(tmp_path: Path, protocol: str) -> None:
    out = tmp_path / "results"
    headers = [a for h in HEADERS for a in ("--header", h)]
    with SimServer(slots=50, service_ms=2, protocol=protocol) as sim:
        url = _url(protocol, sim.port)
        base = ["--url", url, "--protocol", protocol, *headers, "--stage", "50:0:1"]
        ran = satpoint("run", "--model", "sim", *base, "--out", out)  # with report.html
        reported = satpoint("report", out)
        analyzed = satpoint("analyze", out)
        wrong_model = satpoint("run", "--model", "nope", *base, "--out", tmp_path / "nope")
    unreachable = satpoint("run", "--model", "sim", *base[2:], "--url", _url(protocol, _free_port()))
    bad_header = satpoint("run", "--url", url, "--model", "sim", "--stage", "1:0:1", "--header", f"Bearer {TOKEN}")

    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert reported.returncode == 0 and analyzed.returncode == 0
    for r in (wrong_model, unreachable, bad_header):
        assert r.returncode == 2, r.stderr + r.stdout
    assert "nope" in wrong_model.stderr
    printed = [ran, reported, analyzed, wrong_model, unreachable, bad_header]
    files = _contents(out)
    assert {Path(name).name for name, _ in files} >= {"results.json", "summary.json", "intervals.csv", "report.html"}
    assert any(name.endswith(".npz") for name, _ in files)
    for secret in SECRETS:
        for r in printed:
            assert secret not in r.stdout and secret not in r.stderr, f"{secret} printed by {r.args[3:5]}"
        for name, data in files:
            assert secret.encode() not in data, f"{secret} written to {name}"
    # what is kept: header names, harmless values, the URL's shape
    results = (out / "results.json").read_text()
    assert '"Authorization: Bearer ***"' in results and '"X-API-Key: ***"' in results
    assert '"Seldon-Model: sim"' in results
    shown_url = f"{USER}:***@127.0.0.1:{sim.port}" + ("/?token=***&tenant=ml" if protocol == "rest" else "")
    assert shown_url in results and shown_url in (out / "summary.json").read_text()
    assert "Authorization" in (out / "report.html").read_text()


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_the_secrets_still_go_on_the_wire(protocol: str) -> None:
    """Only what is written or printed is redacted: the prepared requests carry every credential."""
    headers = tuple((k.strip(), v.strip()) for k, _, v in (h.partition(":") for h in HEADERS))
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    with SimServer(slots=4, service_ms=1, protocol=protocol) as sim:
        # the URL's userinfo becomes an Authorization: Basic header when no Authorization header is given
        prepared = prepare(Target(_url(protocol, sim.port), "sim", protocol=protocol, headers=headers[1:]), 4)
        with_bearer = prepare(Target(_url(protocol, sim.port), "sim", protocol=protocol, headers=headers), 4)
    if protocol == "rest":
        request = prepared.builder.requests[0]
        assert f"/v2/models/sim/infer?token={QUERY_TOKEN}&tenant=ml HTTP/1.1".encode() in request
        assert f"Authorization: Basic {basic}".encode() in request and f"X-API-Key: {API_KEY}".encode() in request
        assert f"Authorization: Bearer {TOKEN}".encode() in with_bearer.builder.requests[0]
    else:
        assert ("authorization", f"Basic {basic}") in prepared.builder.metadata
        assert ("x-api-key", API_KEY) in prepared.builder.metadata
        assert ("authorization", f"Bearer {TOKEN}") in with_bearer.builder.metadata


# -- every command: no file, no line of output, no child's argv ---------------------------------------------
METRICS_TOKEN = "mt-TEST-SECRET-321"
ENV_TOKEN = "hf-TEST-SECRET-654"
ALL_SECRETS = [*SECRETS, METRICS_TOKEN, ENV_TOKEN]
#: one short search: a sim of 1 slot x 2.5 ms (400 rps; the probe's first stage a quarter of it, so the staircase
#: brackets it in three or four stages), stages of about a second: what is examined is where the secrets went
SHORT_FIND = [
    "--precision", "0.5", "--ramp", "0.3", "--min-hold", "0.8", "--max-hold", "1", "--min-requests", "50",
]  # fmt: skip


@dataclass
class Ran:
    name: str
    returncode: int
    stdout: str
    stderr: str
    argvs: list[list[str]] = field(default_factory=list)  # every descendant's argv seen while it ran


def satpoint_watched(name: str, *args: str | Path, timeout: float = 150) -> Ran:
    """Run satpoint and read the argv of every process it starts, every 20 ms, until it exits."""
    own = [sys.executable, "-m", "satpoint", *map(str, args)]
    proc = subprocess.Popen(own, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[tuple[int, tuple[str, ...]], list[str]] = {}
    done = threading.Event()

    def watch() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                children = root.children(recursive=True)
            except psutil.Error:
                return
            for child in children:
                try:
                    argv = child.cmdline()
                except psutil.Error:
                    continue
                # a child between fork and exec (or a forked worker) shows satpoint's own argv, which holds
                # what the user typed: no new exposure; what is examined is what satpoint passes on
                if argv and argv != own:
                    seen.setdefault((child.pid, tuple(argv)), argv)
            done.wait(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        watcher.join(5)
    return Ran(name, proc.returncode, out, err, list(seen.values()))


@pytest.fixture(scope="module")
def metrics_url() -> Iterator[str]:
    """A Prometheus endpoint behind a query token (it answers only with the token)."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            ok = f"token={METRICS_TOKEN}" in self.path
            self.reply(200 if ok else 403, b"model_infer_request_success_total 1\n" if ok else b"forbidden\n")

    with serving(Handler) as url:
        yield f"{url}/metrics?token={METRICS_TOKEN}"


def _assert_nowhere(runs: list[Ran], folders: list[Path]) -> None:
    for secret in ALL_SECRETS:
        for r in runs:
            assert secret not in r.stdout and secret not in r.stderr, f"{secret} printed by {r.name}"
            for argv in r.argvs:
                assert secret not in " ".join(argv), f"{secret} in the argv of a process of {r.name}: {argv}"
        for folder in folders:
            for name, data in _contents(folder):
                assert secret.encode() not in data, f"{secret} written to {name}"


def test_find_sweep_and_compare_write_print_and_pass_no_secret(tmp_path: Path, metrics_url: str) -> None:
    """find (a metrics URL with a token), sweep (remote, a --reconfigure that echoes the token) and compare,
    against one sim; the embedded MLServer's --env in test_the_embedded_servers_env_values_stay_private."""
    headers = [a for h in HEADERS for a in ("--header", h)]
    out = {name: tmp_path / name for name in ("find", "sweep", "compare")}
    with SimServer(slots=1, service_ms=2.5) as sim:
        url = _url("rest", sim.port)
        found = satpoint_watched(
            "find", "find", "--url", url, "--model", "sim", *headers, "--metrics-url", metrics_url,
            "--start-rps", "100", "--max-rps", "250", "--budget-s", "16", "--no-profile", "--no-confirm", *SHORT_FIND,
            "--out", out["find"],
        )  # fmt: skip
        reconfigure = f"echo applying replicas={{replicas}} with --token={TOKEN}; sleep 0.5"
        swept = satpoint_watched(
            "sweep", "sweep", "--server", "remote", "--url", url, "--model", "sim", *headers,
            "--metrics-url", metrics_url, "--set", "replicas=1", "--reconfigure", reconfigure,
            "--remeasure-top", "0", "--find-budget-s", "12", *SHORT_FIND, "--out", out["sweep"],
        )  # fmt: skip
        resumed = satpoint_watched("resume", "sweep", "--resume", out["sweep"], *headers)
        # compare --budget-s 9: its search's first stage (no later one is examined), then its profile
        compared = satpoint_watched(
            "compare", "compare", "--url", url, "--model", "sim", *headers, "--protocols", "rest",
            "--budget-s", "9", *SHORT_FIND, "--out", out["compare"],
        )  # fmt: skip
        reported = satpoint_watched("report", "report", out["find"])
    runs = [found, swept, resumed, compared, reported]
    for r in (found, swept, compared, reported):
        assert r.returncode == 0, f"{r.name}: {r.stderr[-3000:]}{r.stdout[-3000:]}"
    # resuming it shows the recorded command redacted, asks for what was not written, and runs nothing
    assert resumed.returncode == 2 and "give --url again" in " ".join(resumed.stderr.split()), resumed.stderr
    assert f"as recorded: {reconfigure.replace(TOKEN, '***')}" in " ".join(resumed.stdout.split())
    assert not resumed.argvs
    _assert_nowhere(runs, list(out.values()))
    # what was watched really ran, and its argv was read: the observer, the reconfigure command's shell
    assert any("satpoint.observe.agent" in " ".join(a) for a in found.argvs), found.argvs
    assert any("SATPOINT_RECONFIGURE" in " ".join(a) for a in swept.argvs), swept.argvs
    assert any(a[:1] == ["sleep"] for a in swept.argvs), swept.argvs
    # ...and what was kept: the command with its placeholder, its output redacted, the URLs' shapes
    doc = json.loads((out["sweep"] / "sweep.json").read_text())
    (m,) = doc["measurements"]
    assert m["status"] == "done", m
    assert m["reconfigure"]["command"] == "echo applying replicas=1 with --token=***; sleep 0.5"
    assert m["reconfigure"]["output"].strip() == "applying replicas=1 with --token=***"
    server = doc["config"]["server"]
    assert server["url"].startswith(f"http://{USER}:***@") and server["metrics_urls"] == [
        metrics_url.replace(METRICS_TOKEN, "***")
    ]
    scrapes = (out["find"] / "server-metrics.jsonl").read_text().splitlines()
    assert scrapes and all(json.loads(line)["error"] is None for line in scrapes)  # the token reached it


def test_the_embedded_servers_env_values_stay_private(tmp_path: Path) -> None:
    """The embedded MLServer gets --env's values in its environment; results, sweep.json, the output and the
    argv of every process show the secret one's name only."""
    out = tmp_path / "sweep"
    # --find-budget-s 10: the search holds one stage (the budget counts it as its ramp and hold plus about
    # 5.7 s of segment overhead, so a second never fits); what is examined is where the values went
    swept = satpoint_watched(
        "sweep", "sweep", "--set", "workers=1", "--env", f"HF_TOKEN={ENV_TOKEN}", "--env", "OMP_NUM_THREADS=1",
        "--remeasure-top", "0", "--find-budget-s", "10", *SHORT_FIND, "--out", out,
        timeout=240,
    )  # fmt: skip
    assert swept.returncode == 0, swept.stderr[-3000:] + swept.stdout[-3000:]
    _assert_nowhere([swept], [out])
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["config"]["server"]["env"] == {"HF_TOKEN": "***", "OMP_NUM_THREADS": "1"}
    (m,) = doc["measurements"]
    assert m["server"]["settings"]["env"] == {"HF_TOKEN": "***", "OMP_NUM_THREADS": "1"}
    assert any("mlserver" in " ".join(a) for a in swept.argvs), swept.argvs
