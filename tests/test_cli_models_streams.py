"""The command line of model mixes, overcommit, cold starts and streams: bad values are one line and exit 2,
before anything is started or sent (the target below refuses connections; nothing may reach it)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app

DEAD = ["--url", "http://127.0.0.1:9"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["coldstart", "--repeats", "0"], "--repeats must be >= 1, got 0"),
        (["coldstart", "--resident", "0"], "--resident: each K must be >= 1"),
        (["run", *DEAD, "--model", "a", "--model", "b", "--mix", "zipf:x", "--stage", "10:0:1"], "zipf:S"),
        (
            ["run", *DEAD, "--model", "a", "--model", "b", "--resident", "1", "--procs", "2", "--stage", "10:0:1"],
            "--resident emulates one scheduler",
        ),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert says in " ".join(r.output.split())
    assert "Traceback" not in r.output


def test_the_new_commands_and_options_are_in_help() -> None:
    runner = CliRunner(env={"COLUMNS": "200"})  # option names unwrapped
    r = runner.invoke(app, ["coldstart", "--help"])
    assert r.exit_code == 0 and "--resident" in r.output and "--repeats" in r.output
    r = runner.invoke(app, ["run", "--help"])
    text = " ".join(r.output.split())
    for option in ("--stream", "--mix", "--models-from-server", "--resident"):
        assert option in text, option
