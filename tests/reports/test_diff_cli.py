"""``satpoint diff`` on recorded run folders: exit codes, diff.json, Markdown, $GITHUB_STEP_SUMMARY, JUnit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from junitparser import Failure, JUnitXml, Skipped
from typer.testing import CliRunner

from satpoint import SCHEMA_VERSION, __version__, api
from satpoint.analysis.diff.verdict import DiffDoc
from satpoint.cli.common import console
from satpoint.cli.diff_cmd import baseline_gate
from satpoint.cli.main import app
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import Results, Segment, append_segment, write_header
from satpoint.plan import Stage
from satpoint.reports.files.diff import noted_baseline_target


def run_folder(
    out: Path, service_ms: float, seed: int, rate: float = 100.0, hold_s: float = 10.0, noise: float = 0.1
) -> Path:
    """A recorded ``run`` of one stage: every request answered after ``service_ms`` times correlated noise
    (neighbouring requests alike, as under queueing)."""
    rng = np.random.default_rng(seed)
    n = int(rate * (1 + hold_s))
    t = np.arange(n) / rate
    rec = Records.empty(t)
    rec.sent[:] = t + 0.0002
    e = np.zeros(n)
    z = rng.normal(0, 0.3, n)
    for i in range(1, n):
        e[i] = 0.9 * e[i - 1] + z[i]
    rec.done[:] = rec.sent + service_ms / 1000 * np.exp(noise * e)
    rec.outcome[:] = Outcome.OK
    rec.status[:] = 200
    header = {
        "schema_version": SCHEMA_VERSION, "tool_version": __version__, "kind": "run", "created_unix": 1.7e9,
        "config": {"mode": "open_loop"}, "target": {"url": "http://127.0.0.1:1", "model": "m", "protocol": "rest"},
    }  # fmt: skip
    results = Results(header=header)
    write_header(out, results)
    seg = Segment(0, "run", [Stage(rate, 1.0, hold_s)], "constant", 0, 1.7e9, rec)
    append_segment(out, results, seg)
    return out


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    return (
        run_folder(tmp_path / "base", 10.0, seed=0),
        run_folder(tmp_path / "slower", 16.0, seed=1),
        run_folder(tmp_path / "same", 10.0, seed=2),
    )


def test_a_slower_service_is_a_regression_exit_3(folders: tuple[Path, Path, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    base, slower, _ = folders
    step = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    md, xml = tmp_path / "diff.md", tmp_path / "junit.xml"
    r = CliRunner().invoke(app, ["diff", str(base), str(slower), "--markdown", str(md), "--junit", str(xml)])
    assert r.exit_code == 3, r.output
    doc = DiffDoc.model_validate(json.loads((slower / "diff.json").read_text()))
    verdicts = {m.metric: m.verdict for m in doc.metrics}
    assert verdicts["latency_p50_ms"] == "regression"
    assert verdicts["service_p50_ms"] == "regression"
    assert verdicts["error_rate"] == "no_change"
    assert doc.verdict == "regression" and doc.compared == "run"
    p50 = next(m for m in doc.metrics if m.metric == "latency_p50_ms")
    assert p50.point == "100 rps" and p50.single
    assert p50.change == pytest.approx(0.6, abs=0.05)
    assert p50.base.low is not None and p50.base.high is not None and p50.base.low < p50.base.value < p50.base.high
    # blocks sized from the rows' own correlation (AR(1) at 0.9 per request), at least 12 of them
    assert p50.base.blocks is not None and p50.base.blocks >= 12 and p50.base.block_rows is not None
    # the Markdown: a table row per metric, also appended to the step summary
    text = md.read_text()
    assert "| latency_p50_ms | 100 rps |" in text and "regression" in text.splitlines()[0]
    assert step.read_text().strip() == text.strip()
    # the JUnit file, read back by a JUnit parser: one case per metric and point, the regressions failed
    suites = list(JUnitXml.fromfile(str(xml)))
    cases = {c.name: c for s in suites for c in s}
    assert len(cases) == len(doc.metrics)
    failed = {n for n, c in cases.items() if any(isinstance(x, Failure) for x in c.result)}
    assert failed == {f"{m.metric} @ {m.point}" for m in doc.metrics if m.verdict == "regression"}
    assert cases["error_rate @ 100 rps"].is_passed
    assert "regression" in next(iter(cases["latency_p50_ms @ 100 rps"].result)).message


def test_two_runs_of_the_same_service_are_no_change_exit_0(folders: tuple[Path, Path, Path], tmp_path: Path) -> None:
    base, _, same = folders
    out = tmp_path / "d.json"
    r = CliRunner().invoke(app, ["diff", str(base), str(same), "--json", str(out), "--no-html"])
    assert r.exit_code == 0, r.output
    doc = DiffDoc.model_validate(json.loads(out.read_text()))
    assert {m.metric: m.verdict for m in doc.metrics}["latency_p50_ms"] == "no_change"
    assert doc.verdict != "regression"


def test_fail_on_inconclusive(tmp_path: Path) -> None:
    # latencies so noisy (slow swings between neighbours) that a 20 % change stays inside the ranges
    base = run_folder(tmp_path / "noisy-base", 10.0, seed=0, noise=1.5)
    slower = run_folder(tmp_path / "noisy-slower", 12.0, seed=1, noise=1.5)
    args = ["diff", str(base), str(slower), "--tolerance", "5%", "--json", str(tmp_path / "d.json"), "--no-html"]
    r = CliRunner().invoke(app, args)
    doc = DiffDoc.model_validate(json.loads((tmp_path / "d.json").read_text()))
    p50 = next(m for m in doc.metrics if m.metric == "latency_p50_ms")
    assert p50.verdict == "inconclusive" and p50.tolerance == 0.05
    assert p50.change is not None and abs(p50.change) > 0.05 and p50.gap == 0
    assert not doc.regressed and r.exit_code == 0, r.output
    xml = tmp_path / "j.xml"
    r = CliRunner().invoke(app, [*args, "--fail-on-inconclusive", "--junit", str(xml)])
    assert r.exit_code == 3
    case = next(c for s in JUnitXml.fromfile(str(xml)) for c in s if c.name == "latency_p50_ms @ 100 rps")
    assert isinstance(next(iter(case.result)), Failure)
    CliRunner().invoke(app, [*args, "--junit", str(xml)])
    case = next(c for s in JUnitXml.fromfile(str(xml)) for c in s if c.name == "latency_p50_ms @ 100 rps")
    assert isinstance(next(iter(case.result)), Skipped)


def test_usage_errors_exit_2(folders: tuple[Path, Path, Path], tmp_path: Path) -> None:
    base, slower, _ = folders
    assert CliRunner().invoke(app, ["diff", str(base), str(tmp_path / "nothing")]).exit_code == 2
    assert CliRunner().invoke(app, ["diff", str(base), str(slower), "--tolerance", "lots"]).exit_code == 2
    assert CliRunner().invoke(app, ["diff", str(base), str(slower), "p02"]).exit_code == 2


def test_baseline_gate_after_a_measurement(folders: tuple[Path, Path, Path]) -> None:
    """``run``/``find --baseline DIR``: the folder just measured is diffed against the baseline."""
    base, slower, same = folders
    assert baseline_gate(None, slower, 0) == 0
    assert baseline_gate(base, slower, 0) == 3
    assert DiffDoc.model_validate(json.loads((slower / "diff.json").read_text())).regressed
    assert baseline_gate(base, same, 0) == 0
    # a run that failed (its target lost: a crash under load) is diffed too: a regression is exit 3
    assert baseline_gate(base, slower, 1) == 3
    assert baseline_gate(base, same, 1) == 1  # else its own exit code stands
    assert baseline_gate(base, same, 130) == 130


def test_calibrate_counts_false_alarms_of_an_a_a_pair(folders: tuple[Path, Path, Path], tmp_path: Path) -> None:
    base, slower, same = folders
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(app, ["diff", str(base), str(same), "--calibrate", "--json", str(out), "--no-html"])
    assert r.exit_code == 0, r.output
    cal = DiffDoc.model_validate(json.loads(out.read_text())).calibration
    assert cal is not None and cal["false_alarms"] == [] and cal["false_alarm_rate"] == 0
    # a pair that differs, given as A/A: its regressions are counted as false alarms, and exit 0 all the same
    r = CliRunner().invoke(app, ["diff", str(base), str(slower), "--calibrate", "--json", str(out), "--no-html"])
    assert r.exit_code == 0, r.output
    doc = DiffDoc.model_validate(json.loads(out.read_text()))
    cal = doc.calibration
    assert cal is not None
    assert len(cal["false_alarms"]) == sum(m.verdict == "regression" for m in doc.metrics) > 0
    p50 = next(m for m in doc.metrics if m.metric == "latency_p50_ms")
    # a change called real (its interval beyond no change) is a false alarm at any tolerance below it
    assert p50.change is not None and p50.p_adjusted is not None and p50.p_adjusted <= 0.05
    assert cal["quiet_tolerance_by_metric"]["latency_p50_ms"] == pytest.approx(abs(p50.change), abs=1e-4)
    assert cal["quiet_tolerance"] >= abs(p50.change) - 1e-4
    assert any("false alarm" in n for n in doc.notes)


def test_error_rate_matches_the_summary_and_a_rise_is_a_regression(tmp_path: Path) -> None:
    base = run_folder(tmp_path / "base", 10.0, seed=0)
    new = run_folder(tmp_path / "errors", 10.0, seed=1)
    rec = Records.from_columns(dict(np.load(new / "segment-000.npz")))
    failed = np.arange(0, len(rec), 20)  # every 20th request answered 503: 5 %
    rec.outcome[failed] = Outcome.HTTP_ERROR
    rec.status[failed] = 503
    rec.outcome[np.arange(7, len(rec), 50)] = Outcome.UNFINISHED  # neither an answer nor an error: in the count
    np.savez(new / "segment-000.npz", **rec.columns())
    r = CliRunner().invoke(app, ["diff", str(base), str(new), "--no-html"])
    assert r.exit_code == 3, r.output
    doc = DiffDoc.model_validate(json.loads((new / "diff.json").read_text()))
    err = next(m for m in doc.metrics if m.metric == "error_rate")
    assert err.verdict == "regression" and err.absolute
    assert err.new.value == pytest.approx(0.05, abs=0.002)
    assert err.new.value == pytest.approx(api.load(new).summary.stages[0].error_rate, abs=1e-6)


def test_find_baseline_reads_the_target_and_tolerates_an_older_summary(folders: tuple[Path, Path, Path],
                                                                       tmp_path: Path) -> None:  # fmt: skip
    base, _, same = folders
    assert noted_baseline_target(None, console) == (None, "")
    rate, note = noted_baseline_target(base, console, "run")  # a (run) folder without summary.json at all
    assert rate is None and "no summary.json" in note
    (base / "summary.json").write_text(json.dumps({"kind": "find", "saturation_rps": 300.0}))  # an older layout
    rate, note = noted_baseline_target(base, console, "run")
    assert rate is None and "older layout" in note
    rec = {"margin": 0.15, "saturation_rps": 300.0, "target_rps_per_replica": 255.0}
    (base / "summary.json").write_text(json.dumps({"kind": "find", "recommendation": rec}))
    assert noted_baseline_target(base, console, "run") == (255.0, "")
    # why no target was held is in the diff's notes
    assert baseline_gate(base, same, 0, "the baseline's summary.json has no target") == 0
    assert "the baseline's summary.json has no target" in json.loads((same / "diff.json").read_text())["notes"]
    # a baseline that is not a results folder is refused before anything is measured
    r = CliRunner().invoke(app, ["find", "--url", "http://127.0.0.1:9", "--model", "m", "--baseline",
                                 str(tmp_path / "nothing"), "--out", str(tmp_path / "out")])  # fmt: skip
    assert r.exit_code == 2 and "not a results folder" in r.output, r.output
    assert not (tmp_path / "out").exists()


def test_the_overlay_page_has_the_verdicts_on_top_and_both_folders(folders: tuple[Path, Path, Path],
                                                                   tmp_path: Path) -> None:  # fmt: skip
    base, slower, same = folders
    assert CliRunner().invoke(app, ["diff", str(base), str(slower)]).exit_code == 3
    page = (slower / "diff.html").read_text()  # beside diff.json by default
    doc = DiffDoc.model_validate(json.loads((slower / "diff.json").read_text()))
    verdicts = page.index('id="verdicts"')
    assert verdicts < page.index('id="overlay"') < page.index('id="diff-latency"')
    rows = page[verdicts : page.index('id="overlay"')]
    for m in doc.metrics:  # one row per metric, with its verdict
        assert f"<td>{m.metric}</td><td>{m.point}</td>" in rows
    assert rows.count(">regression</span>") == sum(m.verdict == "regression" for m in doc.metrics) + 1
    assert "base: " in page and "new: " in page and 'id="diff-tp"' in page  # both sides, both figures
    assert "<script src=" not in page and "plotly.js v" in page  # self-contained: plotly.js inlined, no network
    out = tmp_path / "page" / "d.html"
    r = CliRunner().invoke(app, ["diff", str(base), str(same), "--html", str(out), "--json", str(tmp_path / "d.json")])
    assert r.exit_code == 0 and out.is_file() and not (same / "diff.html").exists()
    (slower / "diff.html").unlink()
    assert CliRunner().invoke(app, ["diff", str(base), str(slower), "--no-html"]).exit_code == 3
    assert not (slower / "diff.html").exists()
