"""``satpoint coldstart`` against a repository-API stub that echoes the caller's credentials in its load
errors (a cold start's and an overcommit load's): the token, the API key, the URL's password and query
token reach the server, yet appear in no file of the results folder and in nothing printed."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path
from urllib.parse import urlsplit

from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.experiments.coldstart import ColdStartResult
from tests.documents import assert_documents_valid
from tests.http_stub import QuietHandler, serving

TOKEN, API_KEY, PASSWORD, QUERY_TOKEN = "sk-COLD-SECRET-123", "ak-COLD-SECRET-456", "pw-COLD-SECRET-789", "qt-COLD-0"
BASIC = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
SECRETS = [TOKEN, API_KEY, PASSWORD, QUERY_TOKEN, BASIC]
META = {
    "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "output-0", "datatype": "FP32", "shape": [-1, 1]}],
}


def _handler(loaded: set[str], seen: list[str]) -> type[QuietHandler]:
    lock = threading.Lock()
    loads_of_b = [0]

    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the servers coldstart measures

        def _json(self, status: int, doc: object) -> None:
            body = b"" if doc is None else json.dumps(doc).encode()
            self.reply(status, body, {"Content-Type": "application/json"})

        def _route(self) -> list[str]:
            seen.append(f"{self.headers.get('Authorization')} {self.headers.get('X-API-Key')} {self.path}")
            return urlsplit(self.path).path.strip("/").split("/")

        def do_GET(self) -> None:
            p = self._route()
            if p[:2] == ["v2", "models"] and len(p) >= 3 and p[2] in loaded:
                return self._json(200, None if p[3:] == ["ready"] else {"name": p[2], **META})
            self._json(200 if p[:2] == ["v2", "health"] else 404, None)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            p = self._route()
            if p == ["v2", "repository", "index"]:
                return self._json(200, [{"name": m, "state": "READY"} for m in sorted(loaded)])
            if p[:3] == ["v2", "repository", "models"] and len(p) == 5:
                with lock:
                    if p[4] == "unload":
                        loaded.discard(p[3])
                        return self._json(200, None)
                    if p[3] == "b":
                        loads_of_b[0] += 1
                        if loads_of_b[0] in (1, 3):  # the first round's load, the overcommit run's first
                            echo = f"{self.headers.get('Authorization')} {self.headers.get('X-API-Key')} {self.path}"
                            return self._json(500, {"error": f"cannot load b for {echo}"})
                    loaded.add(p[3])
                return self._json(200, None)
            if p[:2] == ["v2", "models"] and p[3:] == ["infer"] and p[2] in loaded:
                return self._json(200, {"outputs": [{**META["outputs"][0], "shape": [1, 1], "data": [1]}]})
            self._json(404, {"error": f"Model {p[2] if len(p) > 2 else ''} not found"})

    return Handler


def test_no_secret_in_the_coldstart_folder_or_its_output(tmp_path: Path) -> None:
    seen: list[str] = []
    out = tmp_path / "cold"
    with serving(_handler({"a", "b"}, seen)) as base:
        url = base.replace("//", f"//alice:{PASSWORD}@") + f"/?token={QUERY_TOKEN}&tenant=ml"
        headers = ["--header", f"Authorization: Bearer {TOKEN}", "--header", f"X-API-Key: {API_KEY}"]
        args = ["coldstart", "-u", url, *headers, "--repeats", "1", "--during-rps", "50", "--warm", "1"]
        r = CliRunner().invoke(app, [*args, "--resident", "1", "--rate", "20", "--duration", "0.5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert any(TOKEN in s and API_KEY in s and QUERY_TOKEN in s for s in seen)  # sent, and echoed back
    summary = json.loads((out / "summary.json").read_text())
    assert summary["coldstart"]["load_failures"] == 1 and summary["overcommit"][0]["control_errors"]
    assert ColdStartResult(summary, out).document.coldstart["load_failures"] == 1  # the same, typed
    assert "cannot load b for *** ***" in summary["coldstart"]["load_errors"][0]
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(files) >= {"summary.json", "coldstart.json", "report.html", "overcommit-k1.csv"}
    assert assert_documents_valid(out) == {"coldstart.json": "coldstart-data", "summary.json": "coldstart-summary"}
    # report rewrites the summary from the repetitions: the same figures, also from a folder written before the
    # envelope (satpoint_version only)
    old = {k: v for k, v in summary.items() if k not in ("schema_version", "tool_version")}
    (out / "summary.json").write_text(json.dumps({**old, "coldstart": {}, "recommendation": {}}))
    (out / "report.html").unlink()
    again = CliRunner().invoke(app, ["report", str(out)])
    assert again.exit_code == 0, again.output
    assert "coldstart" in again.output and "report.html" in again.output
    assert json.loads((out / "summary.json").read_text()) == summary
    assert (out / "report.html").stat().st_size > 0
    assert assert_documents_valid(out)["summary.json"] == "coldstart-summary"
    for secret in SECRETS:
        assert secret not in r.output, f"{secret} printed"
        for name, data in files.items():
            assert secret.encode() not in data, f"{secret} written to {name}"
