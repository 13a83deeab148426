"""``find --baseline`` and ``run --baseline`` on the command line, and ``diff --tail-tolerance``.

The measurement is replaced by the queue twin of the simulator (``tests.reports.html.test_html``): a fake
``api.find``/``api.run`` writes the folder a real one would (its search or stages, then the hold at the
target it was given), so what is tested is the command: the baseline's target read and handed to the
measurement, the diff against the baseline after it, the target hold judged, the exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from satpoint import api
from satpoint.analysis.diff import bootstrap as diff_bootstrap
from satpoint.analysis.diff.compare import Folder, diff_folders
from satpoint.analysis.diff.target import TARGET_HOLD_PURPOSE, baseline_target
from satpoint.analysis.diff.verdict import DiffDoc
from satpoint.analysis.summary.model import FindSummary, RunSummary
from satpoint.cli.main import app
from satpoint.config import RunConfig
from satpoint.metrics.results import Results, append_segment, load_results, new_header
from satpoint.plan import Stage
from satpoint.procedures.target_hold import run_target_stage
from satpoint.reports.files.diff import load_folder
from satpoint.reports.files.results import write_all
from satpoint.servers.sim.model import SimConfig
from tests.reports.html.test_html import make_find, offline_measure
from tests.reports.test_diff_cli import run_folder

SIM_300 = SimConfig(slots=3, service_ms=10.0, dist="const", seed=1)  # capacity 300 rps
SIM_200 = SimConfig(slots=2, service_ms=10.0, dist="const", seed=2)  # 200 rps: cannot hold a 255 rps target
URL = ["--url", "http://127.0.0.1:9", "--model", "sim"]


@pytest.fixture
def fewer_resamples(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wiring is under test, not the intervals: 50 block resamples instead of 400."""
    monkeypatch.setattr(diff_bootstrap, "N_BOOT", 50)


def hold(out: Path, results: Results, cfg: SimConfig, stage: Stage) -> dict[str, Any]:
    """The hold at a baseline's target from idle, one more segment, as ``target_hold`` records it."""
    seg = offline_measure(cfg, t0=2e9)([stage], 0.0, len(results.segments), TARGET_HOLD_PURPOSE)
    append_segment(out, results, seg)
    return write_all(out, results, html=False)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A find folder of a 300 rps server, with its recommendation's per-replica target in summary.json."""
    out = tmp_path_factory.mktemp("baseline") / "find-300"
    write_all(out, make_find(out, SIM_300, 100.0), html=False)
    return out


def fake_find(cfg: SimConfig, calls: list[dict[str, Any]]) -> Any:
    def find(target: Any = None, **kw: Any) -> api.FindResult:
        calls.append(kw)
        out = Path(kw["out"])
        results = make_find(out, cfg, 100.0)
        summary = write_all(out, results, html=False)
        if kw["hold_rps"] is not None:
            summary = hold(out, results, cfg, Stage(kw["hold_rps"], 1.0, 6.0))
        return api.FindResult(FindSummary.model_validate(summary), out)

    return find


def fake_run(cfg: SimConfig, calls: list[dict[str, Any]]) -> Any:
    def run(target: Any, stages: list[str], **kw: Any) -> api.RunResult:
        calls.append(kw)
        out = Path(kw["out"])
        plan = [Stage.parse(s) for s in stages]
        results = Results(new_header(RunConfig(kind="run"), {"url": "offline", "model": "sim"}, 2e9))
        append_segment(out, results, offline_measure(cfg, t0=2e9)(plan, 0.0, 0, "run"))
        summary = write_all(out, results, html=False)
        if kw["hold_rps"] is not None:
            summary = hold(out, results, cfg, run_target_stage(plan, kw["hold_rps"]))
        return api.RunResult(RunSummary.model_validate(summary), out)

    return run


def diff_json(folder: Path) -> DiffDoc:
    return DiffDoc.model_validate(json.loads((folder / "diff.json").read_text()))


@pytest.mark.usefixtures("fewer_resamples")
def test_find_baseline_holds_the_target_and_gates_on_it(base: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    target = json.loads((base / "summary.json").read_text())["recommendation"]["target_rps_per_replica"]
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(api, "find", fake_find(SIM_300, calls))
    same = tmp_path / "same"
    r = CliRunner().invoke(app, ["find", *URL, "--baseline", str(base), "--out", str(same), "--no-html"])
    assert r.exit_code == 0, r.output
    assert calls[-1]["hold_rps"] == pytest.approx(target)  # the baseline's target, handed to the measurement
    doc = diff_json(same)
    assert doc.target_hold is not None and doc.target_hold.held is True
    assert doc.target_hold.rate_rps == pytest.approx(target, abs=1e-3)
    assert next(m for m in doc.metrics if m.metric == "saturation_rps").verdict == "no_change"
    assert "holds the baseline's target" in r.output and (same / "diff.html").is_file()
    # a server of 200 rps: the target (~250 rps) is not held, the capacity fell: exit 3
    monkeypatch.setattr(api, "find", fake_find(SIM_200, calls))
    slower = tmp_path / "slower"
    r = CliRunner().invoke(app, ["find", *URL, "--baseline", str(base), "--out", str(slower), "--no-html"])
    assert r.exit_code == 3, r.output
    doc = diff_json(slower)
    assert doc.target_hold is not None and doc.target_hold.held is False and doc.target_hold.verdict != "stable"
    assert doc.verdict == "regression"
    # a run folder is no baseline for a find: refused before anything is measured
    n = len(calls)
    runs = run_folder(tmp_path / "a-run", 10.0, seed=0)
    r = CliRunner().invoke(app, ["find", *URL, "--baseline", str(runs), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "run folder" in r.output, r.output
    assert len(calls) == n and not (tmp_path / "x").exists()


@pytest.mark.usefixtures("fewer_resamples")
def test_run_baseline_holds_a_finds_target_and_carries_it_forward(base: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    target = json.loads((base / "summary.json").read_text())["recommendation"]["target_rps_per_replica"]
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(api, "run", fake_run(SIM_300, calls))
    stage = ["--stage", "100:1:4", "--stage", "200:1:5"]
    first = tmp_path / "run-1"
    r = CliRunner().invoke(app, ["run", *URL, *stage, "--baseline", str(base), "--out", str(first), "--no-html"])
    assert r.exit_code == 0, r.output
    assert calls[-1]["hold_rps"] == pytest.approx(target)
    doc = diff_json(first)
    assert doc.compared == "run" and doc.base["kind"] == "find"
    assert doc.target_hold is not None and doc.target_hold.held is True
    assert "after the run's stages" in doc.target_hold.text
    assert not any(m.metric == "saturation_rps" for m in doc.metrics)  # a run does not search
    # the find's staircase held 100 and 200 rps stably: both compared; the run's hold at the target is judged
    # on its own (target_hold), not pooled with the find's confirmation at that rate
    assert {m.point for m in doc.metrics} == {"100 rps", "200 rps"}
    # the run folder keeps the target: the next run against it holds the same rate again
    carried, why = baseline_target(load_folder(first).doc, load_folder(first).purposes)
    assert carried == pytest.approx(target) and why == ""
    second = tmp_path / "run-2"
    monkeypatch.setattr(api, "run", fake_run(SIM_200, calls))
    r = CliRunner().invoke(app, ["run", *URL, *stage, "--baseline", str(first), "--out", str(second), "--no-html"])
    assert r.exit_code == 3, r.output  # a 200 rps server holds neither the target nor 200 rps as well
    assert calls[-1]["hold_rps"] == pytest.approx(target)
    doc = diff_json(second)
    assert doc.compared == "run" and doc.target_hold is not None and doc.target_hold.held is False
    # a run baseline without a target: the diff only, and the note says why nothing was held
    plain = run_folder(tmp_path / "plain", 10.0, seed=0, rate=100.0)
    write_all(plain, load_results(plain), html=False)
    third = tmp_path / "run-3"
    monkeypatch.setattr(api, "run", fake_run(SIM_300, calls))
    r = CliRunner().invoke(app, ["run", *URL, "--stage", "100:1:10", "--baseline", str(plain), "--out", str(third)])
    assert calls[-1]["hold_rps"] is None
    doc = diff_json(third)
    assert doc.target_hold is None and any("held no per-replica target" in n for n in doc.notes)
    # a baseline that is not a results folder: exit 2, nothing measured
    n = len(calls)
    r = CliRunner().invoke(
        app, ["run", *URL, *stage, "--baseline", str(tmp_path / "none"), "--out", str(tmp_path / "y")]
    )
    assert r.exit_code == 2 and "not a results folder" in r.output and len(calls) == n


@pytest.mark.usefixtures("fewer_resamples")
def test_a_run_against_a_find_with_nothing_else_in_common_is_judged_by_the_hold(base: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    results = Results(new_header(RunConfig(kind="run"), {"url": "offline", "model": "sim"}, 2e9))
    append_segment(out, results, offline_measure(SIM_300, t0=2e9)([Stage(150.0, 1.0, 4.0)], 0.0, 0, "run"))
    hold(out, results, SIM_300, Stage(240.0, 1.0, 4.0))  # not a rate of the find (251 rps its target)
    doc = diff_folders(load_folder(base), load_folder(out))
    assert not doc.metrics and doc.target_hold is not None and doc.target_hold.held
    assert doc.verdict == "no_change" and "nothing could be compared" not in doc.notes
    assert diff_folders(load_folder(base), Folder(str(out), "run", load_folder(out).doc, {})).verdict == "inconclusive"
    with pytest.raises(ValueError, match="different kinds"):
        diff_folders(load_folder(out), load_folder(base))  # a find is not compared with a run baseline


def test_run_target_stage_is_the_plans_first_ramp_and_longest_hold() -> None:
    plan = [Stage(100.0, 2.0, 5.0), Stage(200.0, 1.0, 12.0), Stage(300.0, 1.0, 8.0)]
    assert run_target_stage(plan, 255.0) == Stage(255.0, 2.0, 12.0)


def test_tail_tolerance_on_the_command_line(tmp_path: Path) -> None:
    """Same median, wider tails: p90/p99 ~8 % / ~13 % higher, tight enough to be told apart from no change (the rule
    alone: `--run-spread 0`, one run a side trusted).
    The default tail tolerance (20 %) calls no regression; ``--tail-tolerance 5%`` does, on the tails only
    (p50 keeps ``--tolerance``)."""
    b = run_folder(tmp_path / "b", 10.0, seed=0, noise=0.1, hold_s=30.0)  # >= 2 000 rows in the window: a p99
    n = run_folder(tmp_path / "n", 10.0, seed=1, noise=0.2, hold_s=30.0)
    out = tmp_path / "d.json"
    verdicts = {}
    for tail in ("20%", "5%"):
        r = CliRunner().invoke(
            app,
            ["diff", str(b), str(n), "--tail-tolerance", tail, "--run-spread", "0", "--json", str(out), "--no-html"],
        )
        doc = DiffDoc.model_validate(json.loads(out.read_text()))
        assert doc.tail_tolerance == float(tail[:-1]) / 100 and doc.tolerance == 0.05
        verdicts[tail] = (r.exit_code, {m.metric: (m.verdict, m.tolerance) for m in doc.metrics})
    code, v = verdicts["20%"]
    assert code == 0 and all(verdict != "regression" for verdict, _ in v.values())
    assert v["latency_p99_ms"][1] == 0.2 and v["latency_p50_ms"][1] == 0.05
    code, v = verdicts["5%"]
    assert code == 3
    assert v["latency_p90_ms"] == ("regression", 0.05) and v["latency_p99_ms"] == ("regression", 0.05)
    assert v["latency_p50_ms"][0] != "regression"
    r = CliRunner().invoke(app, ["diff", str(b), str(n), "--tail-tolerance", "wide"])
    assert r.exit_code == 2 and "--tail-tolerance" in r.output
