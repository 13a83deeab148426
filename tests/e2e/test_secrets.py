"""End-to-end: a token passed with --header (and credentials in the URL) appear nowhere in the results
folder or in what satpoint prints, yet reach the server."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.servers.sim_process import SimServer

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
