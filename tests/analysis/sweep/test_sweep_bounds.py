"""A sweep over measurements whose search did not bracket the capacity: real ``find`` summaries made by the
search against the offline twin of the simulator (known capacity), a budget that ends the staircase early,
a max_rps below the capacity, and a target that stops answering.  An unbracketed measurement is a lower
bound with an open range (tied with every point above it), a lost target is a failed measurement (out of
the medians, measured again on resume), and ``--slo`` with the default objective ranks by the SLO."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from satpoint.analysis.sweep.conclusions import measurement_figures
from satpoint.cli.main import app
from satpoint.config import FindOptions, VerdictRules
from satpoint.experiments.sweep import SWEEP_FILE, SweepConfig, SweepState, analyse, rewrite_sweep
from satpoint.experiments.sweep_servers import BaseServer
from satpoint.procedures.saturation import Budget, run_find
from satpoint.procedures.search_run import SearchRun
from satpoint.reports.files.results import write_all
from satpoint.reports.sweep import print_sweep
from satpoint.servers.sim.model import SimConfig
from tests.analysis.search.test_search import FakeClock, find_results, timed_measure

QUICK = {"cooldown_s": 0, "ramp_s": 1, "min_hold_s": 3, "max_hold_s": 4, "min_requests": 400, "profile": False}


def offline_find(folder: Path, slots: int, opts: FindOptions, lose_at: int | None = None) -> dict[str, Any]:
    """A find on the offline simulator (``slots`` × 10 ms: ``slots`` × 100 rps) on a fake clock, written
    to ``folder`` as the sweep writes each measurement."""
    clock = FakeClock()
    results = find_results(opts, 50.0)
    measure = timed_measure(SimConfig(slots=slots, service_ms=10.0), clock, 0.5, lose_at=lose_at)
    run = SearchRun(
        results, folder, measure, opts, cooldown=lambda a, b=0.0: None, budget=Budget(opts.budget_s, 0.0, clock)
    )
    run_find(run, VerdictRules(), 50.0)
    return write_all(folder, results, html=False)


@pytest.fixture(scope="module")
def searches(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("searches")
    made = {
        # 400 rps, bracketed and confirmed
        "bracketed": (4, FindOptions(budget_s=1e9, precision=0.1, **QUICK), None),  # type: ignore[arg-type]
        # 800 rps, but the budget ends the staircase before any rate overloads it
        "budget": (8, FindOptions(budget_s=17, precision=0.1, **QUICK), None),  # type: ignore[arg-type]
        # 800 rps, but the search may not go above 300
        "max_rps": (8, FindOptions(budget_s=1e9, precision=0.1, max_rps=300, **QUICK), None),  # type: ignore[arg-type]
        # 400 rps; the target goes away during the third stage
        "lost": (4, FindOptions(budget_s=1e9, precision=0.1, **QUICK), 2),  # type: ignore[arg-type]
    }
    out = {}
    for name, (slots, opts, lose_at) in made.items():
        out[name] = root / name
        offline_find(out[name], slots, opts, lose_at)
    return out


def _summary(folder: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((folder / "summary.json").read_text())
    return doc


def test_an_unbracketed_measurement_is_a_lower_bound_and_says_why(searches: dict[str, Path]) -> None:
    bracketed = measurement_figures(_summary(searches["bracketed"]))
    assert 360 <= bracketed["saturation_rps"] <= 410 and bracketed["unstable_rps"] is not None
    assert not bracketed["lower_bound"] and bracketed["lower_bound_reasons"] == []
    budget = _summary(searches["budget"])
    assert not budget["search"]["finished"] and budget["unstable_rps"] is None
    f = measurement_figures(budget)
    assert f["lower_bound"] and f["lower_bound_reasons"] == ["budget"]
    capped = _summary(searches["max_rps"])
    assert capped["search"]["finished"] and capped["saturation_rps"] == 300.0
    f = measurement_figures(capped)
    assert f["lower_bound"] and f["lower_bound_reasons"] == ["max_rps"]
    f = measurement_figures(_summary(searches["lost"]))
    assert f["target_lost"] and f["lower_bound_reasons"] == ["target_lost"]


def _sweep_folder(out: Path, searches: dict[str, Path], slo: tuple[str, ...] = ()) -> Path:
    """A recorded sweep: p01 (workers=4) measured twice, the second search losing its target; p02
    (workers=8, twice the capacity) measured once, its search cut by the budget at a quarter of it."""
    cfg = SweepConfig(sets=("workers=4,8",), server=BaseServer(kind="sim"), slo=slo, remeasure_top=0)
    points = cfg.points()
    taken = [(points[0], 1, "bracketed"), (points[0], 2, "lost"), (points[1], 1, "budget")]
    ms = []
    for p, repeat, name in taken:
        rel = f"points/{p.dirname}/m{repeat}"
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).symlink_to(searches[name], target_is_directory=True)
        # recorded as an earlier version did: every search that was not interrupted was "done"
        figures = measurement_figures(_summary(searches[name]))
        ms.append({"point": p.id, "repeat": repeat, "phase": "grid", "dir": rel, "status": "done", "figures": figures})
    doc: dict[str, Any] = {
        "kind": "sweep",
        "sweep_version": 1,
        "config": cfg.to_dict(),
        "measurements": ms,
        "created_unix": 0,
    }
    doc.update(analyse(cfg, points, ms))
    (out / SWEEP_FILE).write_text(json.dumps(doc))
    return out


def test_a_sweep_does_not_rank_a_lower_bound_or_a_lost_target(searches: dict[str, Path], tmp_path: Path) -> None:
    out = _sweep_folder(tmp_path / "sweep", searches)
    doc = rewrite_sweep(out)
    statuses = [(m["point"], m["repeat"], m["status"]) for m in doc["measurements"]]
    assert statuses == [("p01", 1, "done"), ("p01", 2, "failed"), ("p02", 1, "done")]
    assert "stopped answering" in doc["measurements"][1]["error"]
    rows = {r["id"]: r for r in doc["points"]}
    # the lost search's 100 rps is not in p01's median: one measurement, the bracketed one
    bracketed = _summary(searches["bracketed"])
    assert rows["p01"]["measurements"] == 1
    assert rows["p01"]["saturation_rps"]["median"] == bracketed["saturation_rps"]
    assert rows["p01"]["bracket_rps"] == [bracketed["saturation_rps"], bracketed["unstable_rps"]]
    assert not rows["p01"]["lower_bound"]
    # p02's search never overloaded its server: a lower bound, open upwards, tied with p01
    assert rows["p02"]["lower_bound"] and rows["p02"]["lower_bound_reasons"] == ["budget"]
    assert rows["p02"]["bracket_rps"][1] is None
    assert rows["p02"]["saturation_rps"]["median"] < rows["p01"]["saturation_rps"]["min"]
    best = doc["best"]["saturation"]
    assert best["point"] == "p01" and best["tied_with"] == ["p02"] and not best["separated"]
    assert "no clear winner" in best["text"] and "lower bound" in best["text"]
    assert "beyond the noise" not in best["text"]
    text = "\n".join(doc["recommendation"])
    assert "workers=8" in text and "is a lower bound (the search's budget ran out" in text
    # the table flags it, and the failed measurement is listed
    console = Console(record=True, width=250)
    print_sweep(console, doc)
    shown = console.export_text()
    p02_line = next(line for line in shown.splitlines() if line.lstrip("│ ").startswith("p02"))
    assert "≥" in p02_line
    assert "≥ = a lower bound" in shown and "p01 measurement 2 failed" in shown
    csv_rows = {r["id"]: r for r in csv.DictReader((out / "sweep.csv").open())}
    assert csv_rows["p02"]["lower_bound_reasons"] == "budget" and csv_rows["p01"]["lower_bound"] == "False"
    # resume measures the lost search again (its folder moved aside), keeps the others
    state = SweepState.resume(out)
    assert [(m["point"], m["repeat"]) for m in state.measurements] == [("p01", 1), ("p02", 1)]
    assert [p.name for p in (out / "points" / "p01-workers=4").iterdir() if "-cut-" in p.name]


def test_a_lower_bound_above_a_bracketed_range_wins(searches: dict[str, Path]) -> None:
    """An open range is open upwards only: a lower bound above a point's whole range is still clear of it,
    and as the best point its range has no upper end."""
    cfg = SweepConfig(sets=("workers=8,4",), server=BaseServer(kind="sim"), remeasure_top=0)
    points = cfg.points()
    capped = measurement_figures(_summary(searches["max_rps"]))  # 300, a lower bound
    low = dict(capped, saturation_rps=200.0, unstable_rps=230.0, lower_bound=False, lower_bound_reasons=[])
    ms = [
        {"point": points[0].id, "repeat": 1, "dir": "a", "status": "done", "figures": capped},
        {"point": points[1].id, "repeat": 1, "dir": "b", "status": "done", "figures": low},
    ]
    best = analyse(cfg, points, ms)["best"]["saturation"]
    assert best["point"] == "p01" and best["separated"] and best["tied_with"] == []
    assert best["range"] == [300.0, None]
    # the other way round, a point above a lower bound is tied with it: the bound may be higher
    high = dict(low, saturation_rps=500.0, unstable_rps=540.0)
    best = analyse(cfg, points, [ms[0], dict(ms[1], figures=high)])["best"]["saturation"]
    assert best["point"] == "p02" and best["tied_with"] == ["p01"] and not best["separated"]


def test_slo_with_the_default_objective_ranks_by_the_slo(searches: dict[str, Path], tmp_path: Path) -> None:
    out = _sweep_folder(tmp_path / "sweep", searches, slo=("p99<50ms",))
    doc = rewrite_sweep(out)
    assert doc["config"]["objective"] == "saturation" and doc["objective"] == "slo"
    head = doc["recommendation"][0]
    assert head.startswith("best for the highest saturation point meeting the latency objective (--slo): ")
    assert "no point has a figure" not in "\n".join(doc["recommendation"])
    assert doc["order"] == ["p01", "p02"]
    # and on the command line
    r = CliRunner().invoke(app, ["sweep", "--report", str(out)])
    assert r.exit_code == 0, r.output
    assert "no point has a figure" not in r.output
    assert "best for the highest saturation point meeting the latency objective" in r.output
