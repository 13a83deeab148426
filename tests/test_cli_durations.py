"""Every time option takes ``500ms``, ``30s``, ``2m``, ``1h`` or a bare number in its own unit (seconds; ms
for a ``*-ms`` option), as the command receives it; a malformed one is refused when parsed."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.cli.opts.duration_opts import UNIT_S, in_units, to_unit


@pytest.mark.parametrize(
    ("text", "unit_s", "value"),
    [("500ms", 1.0, "0.5"), ("30s", 1.0, "30"), ("2m", 1.0, "120"), ("1h", 1.0, "3600"), ("1.5s", 1e-3, "1500"),
     ("250us", 1e-3, "0.25"), ("45", 1.0, "45"), ("45", 1e-3, "45"), ("2 fortnights", 1.0, "2 fortnights")],
)  # fmt: skip
def test_a_duration_in_an_options_unit(text: str, unit_s: float, value: str) -> None:
    assert to_unit(text, unit_s) == value


def test_only_time_options_values_are_rewritten() -> None:
    args = ["--ramp", "500ms", "--think-ms=1s", "--trace-peak", "10m", "-m", "2m", "--", "--ramp", "1m"]
    assert in_units(args, UNIT_S) == ["--ramp", "0.5", "--think=1000", "--trace-peak", "10m", "-m", "2m", "--",
                                      "--ramp", "1m"]  # fmt: skip


def test_demo_co_receives_durations_in_its_units(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, ...]] = []

    class Captured(Exception):
        pass

    def capture(*args: Any) -> None:
        seen.append(args)
        raise Captured

    monkeypatch.setattr("satpoint.cli.demo_cmd.CoDemoConfig", capture)
    args = ["demo", "co", "--duration", "2m", "--think-ms", "0.5s", "--pause-every=1500ms", "--service-ms", "4"]
    CliRunner().invoke(app, args)
    got = seen[0]
    assert (got[1], got[3], got[5], got[6]) == (120.0, 500.0, 4.0, 1.5)  # duration, think_ms, service_ms, pause_every


def test_a_malformed_duration_is_refused_when_parsed() -> None:
    r = CliRunner().invoke(app, ["run", "-u", "http://127.0.0.1:9", "-m", "m", "-s", "1:0:1", "--timeout", "2 days"])
    assert r.exit_code == 2 and "Invalid value for '--timeout'" in " ".join(r.output.split()), r.output
    assert "cannot reach" not in r.output


def test_every_time_option_says_it_takes_durations() -> None:
    text = " ".join(CliRunner().invoke(app, ["find", "-h"], env={"COLUMNS": "250"}).output.split())
    assert "Times take 500ms, 30s, 2m or 1h" in text and "--min-hold DURATION" in text


_URL = ["-u", "http://127.0.0.1:9", "-m", "m"]


@pytest.mark.parametrize(
    ("where", "args", "new", "old", "read"),
    [
        ("satpoint.api.find", ["find", *_URL], "--budget", "--budget-s", lambda c: c[1]["options"].budget_s),
        ("satpoint.cli.sweep_cmd.run_sweep", ["sweep", *_URL, "--set", "protocol=rest"], "--budget", "--budget-s",
         lambda c: c[0][0].budget_s),
        ("satpoint.cli.sweep_cmd.run_sweep", ["sweep", *_URL, "--set", "protocol=rest"], "--search-budget",
         "--find-budget-s", lambda c: c[0][0].find.budget_s),
        ("satpoint.cli.compare_cmd.run_compare", ["compare", *_URL, "--protocols", "rest"], "--search-budget",
         "--budget-s", lambda c: c[0][0].find.budget_s),
        ("satpoint.cli.pipeline_cmd.find_pipeline", ["pipeline", "-u", "http://127.0.0.1:9", "--step", "a"],
         "--search-budget", "--budget-s", lambda c: c[1]["options"].budget_s),
    ],
)  # fmt: skip
def test_budgets_new_and_old_spellings_mean_the_same(
    monkeypatch: pytest.MonkeyPatch, where: str, args: list[str], new: str, old: str, read: Any
) -> None:
    """``--budget`` is the whole command's cap, ``--search-budget`` one search's; the old spellings are
    hidden aliases with their old meaning (compare's --budget-s was per protocol: one search)."""
    seen: list[tuple[Any, Any]] = []

    def capture(*a: Any, **kw: Any) -> None:
        seen.append((a, kw))
        raise ValueError("captured")

    monkeypatch.setattr("satpoint.cli.find_cmd.keep_loaded", lambda target: None)
    monkeypatch.setattr(where, capture)
    for flag in (new, old):
        r = CliRunner().invoke(app, [*args, flag, "5m"])
        assert "captured" in r.output, r.output
    assert [read(c) for c in seen] == [300.0, 300.0]
    both = CliRunner().invoke(app, [*args, new, "1", old, "1"])
    assert both.exit_code == 2 and f"{old} is the old spelling of {new}" in both.output
    assert old not in CliRunner().invoke(app, [args[0], "-h"], env={"COLUMNS": "250"}).output


def test_the_unit_left_the_names_and_the_old_spellings_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--think``, ``--service``, ``--pause`` (demo co) take what ``--think-ms``, ``--service-ms``,
    ``--pause-s`` took, in the same unit; the old spellings are hidden from --help."""
    seen: list[tuple[Any, ...]] = []

    def capture(*args: Any) -> None:
        seen.append(args)
        raise ValueError("captured")

    monkeypatch.setattr("satpoint.cli.demo_cmd.CoDemoConfig", capture)
    CliRunner().invoke(app, ["demo", "co", "--think", "20", "--service", "0.5s", "--pause", "250ms"])
    CliRunner().invoke(app, ["demo", "co", "--think-ms", "20", "--service-ms=500", "--pause-s", "0.25"])
    assert [(a[3], a[5], a[7]) for a in seen] == [(20.0, 500.0, 0.25)] * 2  # think_ms, service_ms, pause_s
    text = CliRunner().invoke(app, ["demo", "co", "-h"], env={"COLUMNS": "250"}).output
    assert "--think " in text and "--think-ms" not in text and "--pause-s" not in text
