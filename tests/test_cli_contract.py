"""The command line's contract on every command: ``-h`` is ``--help``, every ``--help`` ends with the exit
codes, ``satpoint --version`` prints the version; ``coldstart --slo`` is a gate (exit 3 when no resident
set met it) and is refused without the overcommit runs it judges."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer
from typer.testing import CliRunner

from satpoint._version import __version__
from satpoint.cli.main import app
from tests.http_stub import QuietHandler, serving


def _commands() -> list[list[str]]:
    """Every command's path, from the command objects (``["run"]``, ``["demo", "co"]``...)."""
    out: list[list[str]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)  # a group (typer's own click: no isinstance on click.Group)
        if subs is None:
            out.append(path)
        for name, sub in (subs or {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def test_every_command_is_walked() -> None:
    names = {" ".join(p) for p in _commands()}
    assert {"run", "find", "sweep", "compare", "coldstart", "diff", "sim", "report", "analyze", "version"} <= names
    assert "demo co" in names


@pytest.mark.parametrize("path", _commands(), ids=lambda p: " ".join(p))
def test_h_is_help_and_every_help_ends_with_the_exit_codes(path: list[str]) -> None:
    short, long = (CliRunner().invoke(app, [*path, flag], terminal_width=200) for flag in ("-h", "--help"))
    assert short.exit_code == 0 and long.exit_code == 0, short.output
    assert short.output == long.output
    text = " ".join(long.output.split())
    for code in ("0 done", "1 ran, but the results are incomplete", "2 bad input, before any load",
                 "3 a gate failed", "4 no answer", "130 interrupted"):  # fmt: skip
        assert code in text, f"{' '.join(path)} --help lacks {code!r}"


def test_top_level_version_and_help() -> None:
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"satpoint {__version__}"
    assert CliRunner().invoke(app, ["-h"]).exit_code == 0
    # the model's version on run/find is --model-version; --version there still works, hidden, with a warning
    assert "--model-version" in " ".join(CliRunner().invoke(app, ["run", "-h"], terminal_width=200).output.split())


@pytest.mark.parametrize("command", ["run", "find"])
def test_the_old_model_version_spelling_still_works_with_a_warning(command: str) -> None:
    """``--version 2`` asks the server for version 2 as ``--model-version 2`` does, with a warning; both
    together are refused."""
    asked: list[str] = []

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.reply(200 if "health" in self.path else 404, b'{"error": "no"}', {"Content-Type": "application/json"})

    with serving(Handler) as url:
        base = [command, "-u", url, "-m", "m", *(["-s", "10:0:1"] if command == "run" else [])]
        new, old = (CliRunner().invoke(app, [*base, flag, "2"]) for flag in ("--model-version", "--version"))
        both = CliRunner().invoke(app, [*base, "--model-version", "2", "--version", "2"])
    assert "--version is now --model-version" in " ".join(old.output.split())
    assert "--version is now" not in new.output
    assert new.exit_code == old.exit_code == 2, new.output + old.output
    assert sum("/v2/models/m/versions/2" in p for p in asked) >= 2, asked
    assert both.exit_code == 2 and "--version is the old spelling of --model-version" in both.output


META = {
    "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "output-0", "datatype": "FP32", "shape": [-1, 1]}],
}


def _repository(loaded: set[str]) -> type[QuietHandler]:
    """A server with two models, a and b, that loads and unloads them on request and answers in ~no time."""
    lock = threading.Lock()

    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def _json(self, status: int, doc: object) -> None:
            body = b"" if doc is None else json.dumps(doc).encode()
            self.reply(status, body, {"Content-Type": "application/json"})

        def do_GET(self) -> None:
            p = urlsplit(self.path).path.strip("/").split("/")
            if p[:2] == ["v2", "models"] and len(p) >= 3 and p[2] in loaded:
                return self._json(200, None if p[3:] == ["ready"] else {"name": p[2], **META})
            self._json(200 if p[:2] == ["v2", "health"] else 404, None)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            p = urlsplit(self.path).path.strip("/").split("/")
            if p == ["v2", "repository", "index"]:
                return self._json(200, [{"name": m, "state": "READY"} for m in sorted(loaded)])
            if p[:3] == ["v2", "repository", "models"] and len(p) == 5:
                with lock:
                    (loaded.discard if p[4] == "unload" else loaded.add)(p[3])
                return self._json(200, None)
            if p[:2] == ["v2", "models"] and p[3:] == ["infer"] and p[2] in loaded:
                return self._json(200, {"outputs": [{**META["outputs"][0], "shape": [1, 1], "data": [1]}]})
            self._json(404, {"error": "not found"})

    return Handler


@pytest.mark.parametrize(("slo", "code"), [(["--slo", "p99<1us"], 3), (["--slo-p99-ms", "0.001"], 3),
                                           (["--slo", "p99<30s"], 0)])  # fmt: skip
def test_coldstart_slo_is_a_gate(tmp_path: Path, slo: list[str], code: int) -> None:
    out = tmp_path / "cold"
    with serving(_repository({"a", "b"})) as url:
        args = ["coldstart", "-u", url, "--repeats", "1", "--during-rps", "0", "--warm", "1", "--resident", "1"]
        r = CliRunner().invoke(app, [*args, "--rate", "20", "--duration", "0.5", *slo, "--out", str(out)])
    assert r.exit_code == code, r.output
    rec = json.loads((out / "summary.json").read_text())["recommendation"]
    assert (rec["resident_for_slo"] is None) == (code == 3) and rec["resident_tried"] == [1]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--slo", "p99<100ms"], "the overcommit runs: give --resident"),
        (["--slo-p99-ms", "100"], "the overcommit runs: give --resident"),
        (["--resident", "1", "--slo", "p50<100ms"], "one p99 objective"),
        (["--resident", "1", "--slo", "p99<1s", "--slo-p99-ms", "9"], "not with --slo-p99-ms"),
    ],
)
def test_coldstart_slo_is_refused_where_it_cannot_judge(args: list[str], says: str) -> None:
    r = CliRunner().invoke(app, ["coldstart", "-u", "http://127.0.0.1:9", *args])
    assert r.exit_code == 2 and says in " ".join(r.output.split()), r.output
    assert "cannot reach" not in r.output


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "--url", "http://127.0.0.1:9", "--model", "m", "--set", "protocol=rest", "--threshold", "p99<<1"],
        ["sweep", "--server", "sim", "--set", "workers=1", "--dry-run", "--threshold", "p99<1s"],
        ["compare", "--url", "http://127.0.0.1:9", "--model", "m", "--protocols", "rest", "--slo", "error_rate<1%"],
        ["compare", "--url", "http://127.0.0.1:9", "--model", "m", "--protocols", "rest", "--threshold", "nope<1"],
    ],
)
def test_sweep_and_compare_gates_are_refused_before_any_load(args: list[str]) -> None:
    """A gate that cannot be judged (a bad expression, an SLO on no latency, a dry run that measures
    nothing) is bad input: exit 2, before any connection."""
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "error:" in r.output, r.output
    assert "cannot reach" not in r.output and "──" not in r.output


def test_an_internal_error_is_not_bad_input(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A defect (here a KeyError inside ``diff``) is one line naming it an internal error, exit 1, not the
    bad-input exit 2; ``satpoint --debug`` lets its traceback through.  Bad input stays exit 2."""

    def broken(*args: object) -> None:
        raise KeyError("p99")

    monkeypatch.setattr("satpoint.cli.diff_cmd.parse_tolerances", broken)
    r = CliRunner().invoke(app, ["diff", str(tmp_path), str(tmp_path)])
    assert r.exit_code == 1, r.output
    assert "internal error: KeyError: 'p99' (--debug for the traceback)" in " ".join(r.output.split())
    debug = CliRunner().invoke(app, ["--debug", "diff", str(tmp_path), str(tmp_path)])
    assert isinstance(debug.exception, KeyError)
    monkeypatch.undo()
    bad = CliRunner().invoke(app, ["diff", str(tmp_path), str(tmp_path), "--tolerance", "lots"])
    assert bad.exit_code == 2 and "internal error" not in bad.output, bad.output


def test_run_rate_duration_is_the_one_stage_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run --rate 50 --duration 2m`` runs ``--stage 50:0:120``; it is refused with --stage, and --rate
    needs --duration."""
    seen: list[object] = []

    def capture(target: object, stages: object, **kw: object) -> None:
        seen.append(stages)
        raise ValueError("captured")

    monkeypatch.setattr("satpoint.cli.main.keep_loaded", lambda target: None)
    monkeypatch.setattr("satpoint.api.run", capture)
    base = ["run", "-u", "http://127.0.0.1:9", "-m", "m"]
    r = CliRunner().invoke(app, [*base, "--rate", "50", "--duration", "2m"])
    assert seen == [["50:0:120"]], r.output
    both = CliRunner().invoke(app, [*base, "--rate", "50", "--duration", "2", "-s", "10:0:1"])
    assert both.exit_code == 2 and "run --rate does not use --stage" in " ".join(both.output.split())
    alone = CliRunner().invoke(app, [*base, "--rate", "50"])
    assert alone.exit_code == 2 and "--rate R needs --duration D" in alone.output


def test_one_url_option_the_scheme_picks_the_protocol_on_sweep_and_compare() -> None:
    """``-u`` twice on sweep and compare: an http(s):// URL for REST, a grpc(s):// one for gRPC; two of one
    protocol are refused in one line, exit 2, before any load."""
    from satpoint.cli.contract import split_urls

    assert split_urls(["http://h:1", "grpc://h:2"], None) == ("http://h:1", "grpc://h:2")
    assert split_urls(["grpcs://h:2"], None) == (None, "grpcs://h:2")
    assert split_urls(["h:1"], "h:2") == ("h:1", "h:2")  # the old --grpc-url spelling
    for command in (["sweep", "--set", "workers=1,2"], ["compare", "-m", "m"]):
        r = CliRunner().invoke(app, [*command, "-u", "grpc://127.0.0.1:9", "-u", "grpc://127.0.0.1:10"])
        assert r.exit_code == 2 and "2 gRPC" in " ".join(r.output.split()), (command, r.output)
        r = CliRunner().invoke(app, [*command, "-u", "http://127.0.0.1:9", "--grpc-url", "x:1", "-u", "grpc://y:2"])
        assert r.exit_code == 2 and "2 gRPC" in " ".join(r.output.split()), (command, r.output)
