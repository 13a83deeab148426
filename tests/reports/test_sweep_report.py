"""The sweep's outputs as functions of sweep.json: table order, CSV columns, the report's plots, and the
report drawing in headless Chromium (skipped without one)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from satpoint.experiments.sweep import SweepConfig, analyse
from satpoint.experiments.sweep_servers import BaseServer
from satpoint.reports.html.sweep import numeric_knobs, render_sweep, write_sweep_report
from satpoint.reports.sweep import csv_rows, print_sweep, write_sweep_csv
from tests.reports.test_browser import Browser, chromium_binary


def _figures(sat: float, p99: float, cpu: float) -> dict[str, Any]:
    return {
        "saturation_rps": sat,
        "unstable_rps": sat * 1.08,
        "max_throughput_rps": sat * 0.9,
        "low_load": {"rps": sat * 0.2, "p50_ms": 2.0, "p99_ms": 3.0, "verdict": "stable"},
        "at_operating_point": {"rps": sat * 0.85, "p50_ms": 2.5, "p99_ms": p99, "verdict": "stable"},
        "at_rps": None,
        "server_at_saturation": {"rps": sat, "cpu_cores": cpu, "cpu_us_per_request": cpu / sat * 1e6},
        "server_at_operating_point": None,
        "rss_mb_max": 300.0,
        "diagnosis": ["cpu_bound"],
        "lower_bound": False,
        "interrupted": False,
    }


def make_doc() -> dict[str, Any]:
    """A finished sweep over workers x protocol on the embedded MLServer, two measurements per point."""
    cfg = SweepConfig(sets=("workers=0,1,2", "protocol=rest,grpc"), server=BaseServer(kind="mlserver"))
    points = cfg.points()
    sat = {0: 900.0, 1: 400.0, 2: 600.0}
    ms = []
    for p in points:
        w, proto = p.values["workers"], p.values["protocol"]
        base = sat[int(w)] * (1.2 if proto == "grpc" else 1.0)
        for r, jitter in ((1, 0.97), (2, 1.03)):
            ms.append(
                {
                    "point": p.id,
                    "repeat": r,
                    "phase": "grid",
                    "dir": f"points/{p.dirname}/m{r}",
                    "status": "done",
                    "server_cores": 1,
                    "duration_s": 90.0,
                    "figures": _figures(base * jitter, 5.0 + int(w), 0.98),
                }
            )
    doc: dict[str, Any] = {
        "kind": "sweep",
        "sweep_version": 1,
        "config": cfg.to_dict(),
        "measurements": ms,
        "created_unix": 0,
    }
    doc.update(analyse(cfg, points, ms))
    return doc


def test_table_csv_and_recommendation_follow_the_objective(tmp_path: Path) -> None:
    doc = make_doc()
    assert doc["order"][:2] == ["p02", "p01"]  # workers=0 grpc, then workers=0 rest
    best = doc["best"]["saturation"]
    assert best["point"] == "p02" and best["separated"]
    rows = csv_rows(doc)
    assert [r["id"] for r in rows] == doc["order"]
    assert rows[0]["knob.workers"] == 0 and rows[0]["knob.protocol"] == "grpc"
    assert rows[0]["server_cpu_cores_at_saturation"] == pytest.approx(0.98)
    path = write_sweep_csv(doc, tmp_path / "sweep.csv")
    with path.open() as fh:
        read = list(csv.DictReader(fh))
    assert len(read) == 6 and read[0]["id"] == "p02"
    console = Console(record=True, width=220)
    print_sweep(console, doc)
    text = console.export_text()
    assert "median (min–max)" in text and "beats the runner-up" in text
    # workers=2 vs workers=1 with the same protocol: 1.5x, on one core the ideal is 1x
    assert "workers=2 protocol=rest: 1.50x one worker's saturation; the ideal is 1x" in text


def test_report_has_the_front_one_plot_per_numeric_knob_and_links(tmp_path: Path) -> None:
    doc = make_doc()
    assert numeric_knobs(doc) == ["workers"]
    page = render_sweep(doc)
    assert page.count('class="plotly-graph-div"') == 3  # front, workers, latency
    assert "points/p01-workers=0_protocol=rest/m1/report.html" in page
    assert "ideal: one worker × min(workers, cores)" in page
    assert "https://" not in page.split("<script")[0]  # no external resources in the head
    assert doc["pareto_front"], "the front is never empty when points have figures"


@pytest.fixture(scope="module")
def rendered_sweep(tmp_path_factory: pytest.TempPathFactory) -> Any:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no Chromium found (apt-get install -y chromium)")
    work = tmp_path_factory.mktemp("sweep-browser")
    page = write_sweep_report(make_doc(), work / "report.html")
    browser = Browser(binary, work)
    try:
        browser.start("sweep", page)
        yield browser.collect()["sweep"]
    finally:
        browser.close()


@pytest.mark.slow
def test_sweep_report_draws_in_a_browser(rendered_sweep: Any) -> None:
    r = rendered_sweep
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.dom.get("ready") == "1"
    assert json.loads(r.dom["errors"]) == []
    assert int(r.dom["plots"]) == int(r.dom["drawn"]) == 3
    assert len(re.findall(r'class="main-svg"', r.stdout)) >= 3
    assert r.console == []


def test_report_rewrites_the_files_and_moves_nothing(tmp_path: Path) -> None:
    """`sweep --report DIR` reads: a measurement cut off while running keeps its status and its folder."""
    from satpoint.experiments.sweep import SWEEP_FILE, rewrite_sweep

    doc = make_doc()
    doc["measurements"][-1]["status"] = "running"
    cut = tmp_path / doc["measurements"][-1]["dir"]
    cut.mkdir(parents=True)
    (tmp_path / SWEEP_FILE).write_text(json.dumps(doc))
    out = rewrite_sweep(tmp_path)
    assert cut.is_dir() and [p.name for p in cut.parent.iterdir()] == ["m2"]
    assert out["measurements"][-1]["status"] == "running" and "resumed" not in out
    assert (tmp_path / "sweep.csv").is_file() and (tmp_path / "report.html").is_file()


def test_points_under_a_cgroup_limit_show_their_throttling_and_memory_peak() -> None:
    """The throttled share at saturation/85 % and the cgroup's memory peak: in the terminal table and the
    HTML points table when a point ran under a limit; absent otherwise."""
    plain = make_doc()
    assert "throttled periods" not in render_sweep(plain)
    doc = make_doc()
    for m in doc["measurements"]:
        f = m["figures"]
        f["server_at_saturation"]["throttled_share"] = 0.42
        f["server_at_operating_point"] = {"rps": 1.0, "cpu_cores": 0.5, "throttled_share": 0.05}
        f["memory_peak_mb"] = 301.0
    doc.update(
        analyse(
            SweepConfig.from_dict(doc["config"]), SweepConfig.from_dict(doc["config"]).points(), doc["measurements"]
        )
    )
    page = render_sweep(doc)
    assert "throttled periods at sat./85 %" in page and "42%/5%" in page and "301" in page
    console = Console(record=True, width=260)
    print_sweep(console, doc)
    assert "42%" in console.export_text()


def test_satpoint_report_rewrites_a_sweep_folder_and_refuses_a_newer_one(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from satpoint.cli.main import app
    from satpoint.experiments.sweep import SWEEP_FILE

    doc = make_doc()
    (tmp_path / SWEEP_FILE).write_text(json.dumps(doc))  # as 0.1.0 wrote it: sweep_version, no tool_version
    r = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "sweep" in r.output and "sweep.csv" in r.output and (tmp_path / "report.html").is_file()
    written = json.loads((tmp_path / SWEEP_FILE).read_text())
    assert (written["schema_version"], written["kind"], written["sweep_version"]) == (1, "sweep", 1)
    (tmp_path / SWEEP_FILE).write_text(json.dumps({**written, "schema_version": 2, "tool_version": "9.0.0"}))
    r = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "written by satpoint 9.0.0, schema_version 2" in r.output and "reads 1" in r.output
