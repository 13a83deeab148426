"""``run --trace`` takes every trace option ``find --trace`` takes (time unit, model filter, Prometheus
selection) and honours it; a trace-only option without ``--trace`` is refused (one line, exit 2); a mix's
replay keeps every model of the mix, not its first one only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.cli.opts.duration_opts import RENAMED
from satpoint.traffic.trace_plan import TraceOptions, build

T0 = 1_767_225_600.0
URL = "http://127.0.0.1:9"  # nothing listens: everything here happens before any connection


class Captured(ValueError):
    pass


def _capture(monkeypatch: pytest.MonkeyPatch, where: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def fake(target: Any, trace: TraceOptions, *args: Any, **kwargs: Any) -> Any:
        seen["trace"] = trace
        raise Captured("captured")

    monkeypatch.setattr(where, fake)
    return seen


def test_run_trace_passes_the_time_unit_model_filter_and_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _capture(monkeypatch, "satpoint.cli.main.run_trace")
    args = ["run", "--url", URL, "--model", "iris", "--trace", "t.csv", "--trace-time-unit", "ms"]
    r = CliRunner().invoke(app, [*args, "--trace-model", "other", "--trace-select", "pod=a", "--no-html"])
    assert r.exit_code == 2 and "captured" in r.output, r.output
    trace = seen["trace"]
    assert (trace.time_unit, trace.model, trace.select) == ("ms", "other", (("pod", "a"),))
    r = CliRunner().invoke(app, ["run", "--url", URL, "--model", "iris", "--trace", "t.csv", "--no-html"])
    assert seen["trace"].model == "iris"  # the default filter: --model, as find --trace
    r = CliRunner().invoke(app, [*args, "--trace-model", "*", "--no-html"])
    assert seen["trace"].model is None
    r = CliRunner().invoke(app, [*args, "--trace-select", "nolabel", "--no-html"])
    assert r.exit_code == 2 and "label=value" in r.output


@pytest.mark.parametrize(
    ("command", "where"),
    [("run", "satpoint.cli.main.run_trace"), ("find", "satpoint.cli.find_cmd.find_headroom")],
)
def test_a_mix_replays_the_rows_of_every_model_of_the_mix(
    command: str, where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = _capture(monkeypatch, where)
    args = [command, "--url", URL, "--model", "a", "--model", "b", "--trace", "t.csv", "--no-html"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "captured" in r.output, r.output
    assert seen["trace"].model == ("a", "b")
    path = tmp_path / "t.csv"
    path.write_text("timestamp,model\n" + "".join(f"{T0 + k * 0.1:.3f},{'abc'[k % 3]}\n" for k in range(300)))
    sched = build(TraceOptions(path, model=("a", "b")))
    assert sched.info["replayed"] == 200 and sched.info["dropped"]["by_model"] == {"c": 100}


@pytest.mark.parametrize(
    "extra",
    [
        ["--trace-stage-s", "30"],
        ["--trace-time-column", "ts"],
        ["--trace-time-unit", "ms"],
        ["--trace-model", "x"],
        ["--trace-select", "a=b"],
        ["--server-slots", "4"],
        ["--speed", "2"],
    ],
)
def test_run_refuses_trace_options_without_a_trace(extra: list[str]) -> None:
    r = CliRunner().invoke(app, ["run", "--url", URL, "--model", "m", "--stage", "5:0:1", *extra])
    assert r.exit_code == 2, r.output
    said = RENAMED.get(extra[0], extra[0])  # an old spelling is refused under its new one
    assert said in r.output and "only with --trace" in r.output
