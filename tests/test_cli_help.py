"""``--help`` that reads: every option of every command in a panel, a metavar that says what it takes,
choices refused when parsed (before any banner or load), rich markup in help texts escaped, completion on."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.cli.opts.help_opts import PANELS

URL = "http://127.0.0.1:9"


def _commands() -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs is None:
            out[" ".join(path)] = cmd
        for name, sub in (subs or {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_option_is_in_a_panel(name: str) -> None:
    cmd = _commands()[name]
    options = [p for p in cmd.params if p.opts and p.opts[0].startswith("-") and not p.hidden]
    assert [p.name for p in options if getattr(p, "rich_help_panel", None) not in PANELS] == []


def test_metavars_say_what_an_option_takes() -> None:
    text = CliRunner().invoke(app, ["run", "-h"], env={"COLUMNS": "250"}).output
    for shown in ("URL", "RPS:RAMP_S:HOLD_S", "KEY:VALUE", "DURATION", "<rest|grpc>"):
        assert shown in text, shown
    assert "<float>" not in text and "list[str]" not in text
    for panel in ("Target", "Load", "Generator", "Observe", "Traffic", "Distributed", "TLS", "Gates", "Output"):
        assert f"─ {panel} ─" in text, panel


def test_rich_markup_in_help_is_escaped() -> None:
    text = " ".join(CliRunner().invoke(app, ["find", "-h"], env={"COLUMNS": "250"}).output.split())
    assert "pip install 'satpoint[triton]')" in text


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["run", "-u", URL, "-m", "m", "-s", "10:0:1", "--protocol", "foo"], "--protocol"),
        (["find", "-u", URL, "-m", "m", "--server", "tritton"], "--server"),
        (["find", "-u", URL, "-m", "m", "--trace", "t.csv", "--trace-format", "xls"], "--trace-format"),
        (["sweep", "--set", "workers=1", "--objective", "fastest"], "--objective"),
        (["sweep", "--set", "workers=1", "--server", "k8s"], "--server"),
        (["sim", "--fault", "explode"], "--fault"),
        (["sim", "--dist", "normal"], "--dist"),
        (["coldstart", "--server", "torchserve"], "--server"),
    ],
)
def test_a_bad_choice_is_refused_when_parsed(args: list[str], option: str) -> None:
    r = CliRunner().invoke(app, args, terminal_width=200)
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and f"Invalid value for '{option}'" in text, text
    assert "cannot reach" not in text and "target" not in text  # refused before the banner


def test_shell_completion_is_offered() -> None:
    text = CliRunner().invoke(app, ["-h"], terminal_width=200).output
    assert "--install-completion" in text and "--show-completion" in text


def test_every_option_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SATPOINT_<COMMAND>_<PARAMETER>`` sets an option (the command line wins), and is said in the help;
    a variable for an option the mode does not use is refused as the option would be."""
    r = CliRunner().invoke(app, ["run", "-m", "m", "-s", "1:0:1"], env={"SATPOINT_RUN_URL": URL})
    assert r.exit_code == 2 and "cannot reach http://127.0.0.1:9" in r.output, r.output
    wins = CliRunner().invoke(app, ["run", "-u", URL, "-m", "m", "-s", "1:0:1"], env={"SATPOINT_RUN_URL": "x://y"})
    assert "cannot reach http://127.0.0.1:9" in wins.output, wins.output
    refused = CliRunner().invoke(app, ["run", "-u", URL, "-m", "m", "-s", "1:0:1"], env={"SATPOINT_RUN_USERS": "2"})
    assert refused.exit_code == 2 and "--stage" in refused.output and "cannot reach" not in refused.output
    text = " ".join(CliRunner().invoke(app, ["find", "-h"], env={"COLUMNS": "250"}).output.split())
    assert "SATPOINT_FIND_URL" in text and "SATPOINT_<COMMAND>_<PARAMETER>" in text


@pytest.mark.parametrize("name", ["run", "find", "sweep", "compare", "coldstart", "pipeline"])
def test_every_command_with_a_target_takes_u_and_m(name: str) -> None:
    params = {p.name: p.opts for p in _commands()[name].params}
    assert "-u" in params["url"]
    model = params.get("model") or params.get("model_names")
    assert name == "pipeline" or (model is not None and "-m" in model)
