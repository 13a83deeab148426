"""``satpoint diff`` of two ``find`` folders recorded offline (the queue twin of the simulator, no network)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from satpoint.analysis.diff.verdict import DiffDoc
from satpoint.cli.main import app
from satpoint.servers.sim.model import SimConfig
from tests.reports.html.test_html import make_find


@pytest.fixture(scope="module")
def finds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff-find")
    capacities = {"base": (3, 10.0, 1), "again": (3, 10.0, 2), "slower": (3, 3000 / 225, 3)}  # 300, 300, 225 rps
    out = {}
    for name, (slots, service_ms, seed) in capacities.items():
        out[name] = root / name
        make_find(out[name], SimConfig(slots=slots, service_ms=service_ms, dist="const", seed=seed), 100.0)
    return out


def diff_doc(base: Path, new: Path) -> tuple[int, DiffDoc]:
    r = CliRunner().invoke(app, ["diff", str(base), str(new)])
    return r.exit_code, DiffDoc.model_validate(json.loads((new / "diff.json").read_text()))


def test_a_lower_capacity_is_a_saturation_regression(finds: dict[str, Path]) -> None:
    code, doc = diff_doc(finds["base"], finds["slower"])
    assert code == 3
    assert doc.compared == "find"
    sat = next(m for m in doc.metrics if m.metric == "saturation_rps")
    assert sat.verdict == "regression" and sat.point == "search"
    assert sat.base.value is not None and sat.new.value is not None
    assert sat.new.value < sat.base.value
    assert sat.single and "rests on one measurement each" in sat.text
    # the staircase from the same start rate: the stages at 100 and 200 rps are compared at equal load
    assert {m.point for m in doc.metrics if m.metric == "latency_p50_ms"} >= {"100 rps", "200 rps"}
    # a rate only the base held (the slower server saturated there) is the saturation verdict's business
    compared = {m.point for m in doc.metrics if m.metric != "saturation_rps"}
    one_sided = [n for n in doc.notes if "held by the base side only" in n]
    assert one_sided and all(n.split(" rps")[0] + " rps" not in compared for n in one_sided)


def test_the_same_capacity_twice_is_not_a_regression(finds: dict[str, Path]) -> None:
    code, doc = diff_doc(finds["base"], finds["again"])
    assert code == 0
    sat = next(m for m in doc.metrics if m.metric == "saturation_rps")
    assert sat.verdict == "no_change"
    assert not doc.regressed


def test_a_baseline_with_an_older_summary_json_compares_from_its_rows(finds: dict[str, Path], tmp_path: Path) -> None:
    """The diff recomputes each side's summary from its rows (as ``satpoint report`` does): a baseline whose
    summary.json has an older layout (fewer fields), or none, is compared all the same."""
    old = tmp_path / "old-baseline"
    shutil.copytree(finds["base"], old)
    (old / "summary.json").write_text(json.dumps({"schema_version": 1, "kind": "find", "saturation_rps": 1.0}))
    code, doc = diff_doc(old, finds["slower"])
    assert code == 3
    sat = next(m for m in doc.metrics if m.metric == "saturation_rps")
    assert sat.verdict == "regression" and sat.base.value is not None and sat.base.value > 250
    (old / "summary.json").unlink()
    assert diff_doc(old, finds["slower"])[0] == 3
