"""The public API: its names, its cheap import, the documentation's example, typed summaries that mirror the JSON."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import satpoint
from satpoint.analysis.summary.build import build_summary
from satpoint.analysis.summary.model import FindSummary, RunSummary, parse_summary
from satpoint.servers.sim.model import SimConfig
from tests.reports.html.test_html import make_find, make_run

ROOT = Path(__file__).resolve().parents[1]

API = [
    "BaseServer",
    "SweepConfig",
    "sweep",
    "CoDemoConfig",
    "CompareConfig",
    "EmbeddedMLServer",
    "Event",
    "FindOptions",
    "FindResult",
    "FindSummary",
    "LoadOptions",
    "LoadedResults",
    "MLServerSettings",
    "Message",
    "ModelMix",
    "ObserveOptions",
    "Outcome",
    "FlamegraphOptions",
    "PayloadError",
    "PlanError",
    "RayOptions",
    "RunConfig",
    "RunResult",
    "RunSummary",
    "SCHEMA_VERSION",
    "SatpointError",
    "SegmentFinished",
    "SegmentStarted",
    "SimServer",
    "Snapshot",
    "Stage",
    "StageResult",
    "Target",
    "TargetUnreachable",
    "Verdict",
    "VerdictRules",
    "__version__",
    "co_demo",
    "compare",
    "find",
    "load",
    "report",
    "run",
    "run_closed_loop",
]


def test_all_is_pinned_and_every_name_resolves_with_a_docstring() -> None:
    assert sorted(satpoint.__all__) == sorted(API)
    for name in satpoint.__all__:
        value = getattr(satpoint, name)
        if callable(value) and name not in ("Event",):
            assert value.__doc__, f"satpoint.{name} has no docstring"
    with pytest.raises(AttributeError):
        satpoint.no_such_name  # noqa: B018


def test_import_satpoint_loads_nothing_else() -> None:
    code = "import satpoint, sys; print(sorted(m for m in sys.modules if m.startswith('satpoint')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['satpoint', 'satpoint._version']"


def _models(m: BaseModel) -> list[BaseModel]:
    out = [m]
    for value in m.__dict__.values():
        items = value if isinstance(value, list) else [value]
        out.extend(x for item in items if isinstance(item, BaseModel) for x in _models(item))
    return out


def _assert_mirrors(model: BaseModel, doc: dict[str, Any]) -> None:
    """Field for field: no JSON key the model does not declare, and dumping gives the JSON back."""
    for sub in _models(model):
        assert not sub.model_extra, f"{type(sub).__name__} lacks fields {sorted(sub.model_extra or {})}"
    assert model.model_dump(exclude_unset=True) == json.loads(json.dumps(doc, default=str))


def test_typed_summaries_mirror_summary_json(tmp_path: Path) -> None:
    cfg = SimConfig(slots=4, service_ms=10.0)
    find_doc = build_summary(make_find(tmp_path / "find", cfg, 25.0))
    typed = parse_summary(find_doc)
    assert isinstance(typed, FindSummary)
    _assert_mirrors(typed, find_doc)
    assert typed.saturation_rps == find_doc["saturation_rps"]
    assert typed.recommendation is not None
    assert typed.recommendation.target_rps_per_replica == find_doc["recommendation"]["target_rps_per_replica"]

    run_doc = build_summary(make_run(tmp_path / "run", cfg, [satpoint.Stage(100, 1, 5)], timeouts=3))
    run_typed = parse_summary(run_doc)
    assert type(run_typed) is RunSummary
    _assert_mirrors(run_typed, run_doc)
    assert run_typed.stages[0].errors == run_doc["stages"][0]["errors"]


def test_load_reads_a_folder_and_its_rows(tmp_path: Path) -> None:
    cfg = SimConfig(slots=4, service_ms=10.0)
    results = make_run(tmp_path / "run", cfg, [satpoint.Stage(100, 1, 5)])
    loaded = satpoint.load(tmp_path / "run")
    assert loaded.config.kind == "run"
    assert loaded.summary.stages[0].verdict == "stable"
    rows = loaded.rows()
    assert len(rows["intended"]) == sum(len(s.records) for s in results.segments)
    assert set(rows) == {"intended", "sent", "done", "outcome", "status", "waited", "retried", "segment"}
    with pytest.raises(FileNotFoundError):
        satpoint.load(tmp_path / "missing")


def test_bad_input_is_rejected_before_any_load() -> None:
    target = satpoint.Target("http://127.0.0.1:9", "m")  # nothing listens on the discard port
    with pytest.raises(ValueError, match="monotonically"):
        satpoint.run(target, ["100:1:2", "50:1:2"])
    with pytest.raises(ValueError, match="threshold"):
        satpoint.run(target, ["100:1:2"], thresholds=["p99<<3"])
    with pytest.raises(satpoint.SatpointError):
        satpoint.run(target, ["100:1:2"])  # unreachable: a clear error, not a traceback
    with pytest.raises(satpoint.SatpointError, match="embedded server"):  # server= with a target is refused
        satpoint.find(target, server=satpoint.MLServerSettings(parallel_workers=2))


API_PAGE = ROOT / "docs" / "reference" / "python-api.md"


def _readme_example() -> str:
    """The example of the documentation's Python API page (before its generated reference)."""
    text = API_PAGE.read_text()
    section = text.split("# Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Python API page opens with one example"
    return blocks[0]


@pytest.mark.slow
def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ns: dict[str, Any] = {}
    exec(compile(_readme_example(), str(API_PAGE), "exec"), ns)  # the page's own code, as written
    run_result, found, loaded = ns["result"], ns["found"], ns["loaded"]
    # 100 rps and 200 rps are half the sim's capacity or less: both stages stable
    assert [s.verdict for s in run_result.summary.stages] == ["stable", "stable"]
    assert len(ns["rows"]["intended"]) == 50 + 300 + 150 + 600  # the schedule's due requests, every one
    assert loaded.summary.stages[1].throughput_rps == pytest.approx(200, rel=0.05)
    assert 0.75 * 400 <= found.saturation_rps <= 1.05 * 400
    assert found.summary.recommendation.replicas >= 1000 / found.saturation_rps
    assert any(m.startswith("probe:") for m in ns["messages"]) and any("rps →" in m for m in ns["messages"])
    assert (tmp_path / "results/api-find/summary.json").exists()
    assert (tmp_path / "results/overlay.html").stat().st_size > 10_000


@pytest.mark.slow
def test_run_reports_progress_as_events_in_order(tmp_path: Path) -> None:
    events: list[satpoint.Event] = []
    with satpoint.SimServer(slots=8, service_ms=5) as sim:
        result = satpoint.run(sim.target(), ["50:0:2"], out=tmp_path / "r", html=False, on_event=events.append)
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "SegmentStarted" and kinds[-1] == "SegmentFinished"
    assert "Snapshot" in kinds
    assert isinstance(events[-1], satpoint.SegmentFinished) and events[-1].requests == 100
    assert result.out_dir == tmp_path / "r" and not result.interrupted


@pytest.mark.slow
def test_a_budget_too_small_for_the_first_stage_says_what_it_needs(tmp_path: Path) -> None:
    messages: list[str] = []
    with satpoint.SimServer(slots=4, service_ms=10) as sim:
        found = satpoint.find(
            sim.target(),
            options=satpoint.FindOptions(budget_s=5, budget_given=True, min_hold_s=6, max_hold_s=15, min_requests=2000),
            out=tmp_path / "f",
            html=False,
            on_event=lambda e: messages.append(e.text) if isinstance(e, satpoint.Message) else None,
        )
    assert found.saturation_rps is None and found.summary.stages == []
    (line,) = [m for m in messages if m.startswith("budget of 5 s")]
    assert "cannot hold the first stage" in line and "give a larger --budget-s" in line
