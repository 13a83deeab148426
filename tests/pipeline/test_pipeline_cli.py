"""``satpoint pipeline``: bad input is one line and exit code 2, before any load."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.servers.sim.process import SimServer

URL = "http://127.0.0.1:9"  # nothing listens: a refusal must come before any connection
CYCLE = """\
apiVersion: mlops.seldon.io/v1alpha1
kind: Pipeline
metadata: {name: loop}
spec:
  steps:
  - {name: a, inputs: [b]}
  - {name: b, inputs: [a]}
  output: {steps: [b]}
"""


def _error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize(
    ("text", "args", "said"),
    [
        ("kind: Pipeline\nspec: [unclosed\n", [], "not YAML"),
        (CYCLE, [], "a cycle: a -> b -> a"),
        (None, [], "a pipeline spec file or --step models"),
        (None, ["--step", "a", "--step", "b"], "--pipeline-model"),
        (CYCLE.replace("inputs: [b]", "inputs: []"), ["--step", "a"], "one of the two"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, text: str | None, args: list[str], said: str) -> None:
    spec: list[str] = []
    if text is not None:
        (tmp_path / "p.yaml").write_text(text)
        spec = [str(tmp_path / "p.yaml")]
    r = CliRunner().invoke(app, ["pipeline", *spec, "--url", URL, *args, "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    line = _error_line(r.output)
    assert said in line and "cannot reach" not in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_step_the_server_does_not_serve_is_refused_before_any_load(tmp_path: Path) -> None:
    with SimServer(slots=2, service_ms=1, extra_args=["--pipeline", "a,b", "--model", "p"]) as sim:
        args = ["pipeline", "--url", sim.url, "--step", "a", "--step", "zz", "--pipeline-model", "p"]
        r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert "zz" in _error_line(r.output)
    assert not (tmp_path / "out").exists()
