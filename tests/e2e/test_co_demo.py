"""End-to-end: `satpoint demo co` logic against a pausing sim subprocess (shortened runs)."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import psutil
import pytest
from rich.console import Console

from satpoint.experiments.co_demo import COMPARISON_FILE, CoDemoConfig, run_co_demo
from satpoint.reports.terminal.co_demo import print_co_demo
from satpoint.reports.terminal.progress import EventPrinter
from tests.documents import assert_documents_valid

pytestmark = pytest.mark.slow


def sim_children() -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if "satpoint.servers.sim.server" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE
    ]


def test_closed_loop_hides_the_pauses_the_open_loop_shows(tmp_path: Path) -> None:
    # 8 s per run: the 6.4 s steady window always holds a whole 1 s pause (period 4 s)
    cfg = CoDemoConfig(duration_s=8.0)
    out = io.StringIO()
    con = Console(file=out, width=140)
    t = time.perf_counter()
    outcome = run_co_demo(cfg, tmp_path, stop=threading.Event(), on_event=EventPrinter(con))
    assert time.perf_counter() - t < 30
    assert not sim_children()  # the server was stopped by its PID

    cmp = outcome.comparison
    o, c = cmp["open_loop"], cmp["closed_loop"]
    assert o["mode"] == "open_loop" and c["mode"] == "closed_loop"
    # open loop: ~25 % of requests are due during a pause and wait up to 1 s for its end
    assert o["latency_ms"]["p99"] > 500
    assert o["latency_ms"]["p50"] < 50
    assert o["throughput_rps"] == pytest.approx(200, rel=0.05)
    # closed loop: only the users' in-flight requests see a pause, a fraction far below 1 %
    assert c["latency_ms"]["p99"] < o["latency_ms"]["p99"] / 3
    assert c["latency_ms"]["max"] > 500  # the pause is still there, in the max
    assert c["throughput_rps"] < o["throughput_rps"]  # it stopped sending while the server was frozen

    # everything is written: both results folders, the comparison, and one overlaid report
    for d in (outcome.open_dir, outcome.closed_dir):
        assert (d / "results.json").exists() and (d / "summary.json").exists()
    closed_summary = json.loads((outcome.closed_dir / "summary.json").read_text())
    assert closed_summary["mode"] == "closed_loop"
    assert closed_summary["warnings"][0].startswith("CLOSED LOOP")
    saved = json.loads((tmp_path / "comparison.json").read_text())
    assert saved["open_loop"]["latency_ms"] == o["latency_ms"]
    kinds = assert_documents_valid(tmp_path)
    assert kinds["comparison.json"] == "comparison" and sorted(set(kinds.values())) == [
        "comparison",
        "results",
        "summary",
    ]
    if outcome.report is not None:
        assert outcome.report.exists() and outcome.report.stat().st_size > 10_000
    else:
        assert any("report.html skipped" in n for n in outcome.notes)

    # satpoint report rewrites both runs and the comparison from them: the same figures
    from typer.testing import CliRunner

    from satpoint.cli.main import app

    again = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert again.exit_code == 0, again.output
    rewritten = json.loads((tmp_path / "comparison.json").read_text())
    assert rewritten["open_over_closed"] == saved["open_over_closed"] and rewritten["users"] == saved["users"]
    assert assert_documents_valid(tmp_path) == kinds

    print_co_demo(con, outcome.comparison, str(tmp_path / COMPARISON_FILE))
    text = out.getvalue()
    for word in ("p99", "p99.9", "throughput", "closed loop", "coordinated omission"):
        assert word in text


def test_bad_demo_options_are_rejected() -> None:
    with pytest.raises(ValueError):
        CoDemoConfig(pause_s=5.0, pause_every_s=4.0).validate()
    with pytest.raises(ValueError):
        CoDemoConfig(rate_rps=100_000.0).validate()
