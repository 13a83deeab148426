"""``sweep --stream`` and ``compare --stream``: time to first chunk and gaps per point and per protocol, in
sweep.json, sweep.csv, the tables and compare.json, and a sweep diff at ``--at-rps`` (synthetic summaries)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from rich.console import Console

from satpoint.analysis.diff.compare import sweep_points_diff
from satpoint.analysis.sweep.conclusions import measurement_figures
from satpoint.experiments.compare import compare_rows
from satpoint.experiments.sweep import SweepConfig, analyse
from satpoint.reports.html.sweep import render_sweep
from satpoint.reports.sweep import csv_rows, print_sweep, write_sweep_csv
from satpoint.reports.terminal.compare import compare_table
from tests.reports.test_sweep_report import make_doc


def stream_block(ttfc_p99: float, gap_p99: float) -> dict[str, Any]:
    return {"ttfc_ms": {"p50": ttfc_p99 / 2, "p99": ttfc_p99}, "gap_ms": {"p50": gap_p99 / 2, "p99": gap_p99}}


def test_a_measurement_keeps_ttfc_and_gaps_where_it_keeps_latency() -> None:
    stage = {"target_rps": 51.0, "offered_rps": 51.0, "verdict": "stable", "latency_ms": {"p50": 5.5, "p99": 8.5}}
    summary = {
        "stages": [dict(stage, target_rps=20.0, offered_rps=20.0), dict(stage, stream=stream_block(30.0, 6.0))],
        "saturation_rps": 60.0,
        "unstable_rps": 80.0,
        "search": {"confirmation": {"rate_rps": 51.0, "verdict": "stable"}},
        "latency_at": [
            {"offered_rps": 40.0, "latency_ms": {"p50": 5.0}, "verdict": "stable", "stream": stream_block(20.0, 4.0)}
        ],
    }
    f = measurement_figures(summary, at_rps=40.0)
    op = f["at_operating_point"]
    assert (op["ttfc_p50_ms"], op["ttfc_p99_ms"], op["gap_p50_ms"], op["gap_p99_ms"]) == (15.0, 30.0, 3.0, 6.0)
    assert f["at_rps"]["ttfc_p99_ms"] == 20.0
    assert "ttfc_p99_ms" not in f["low_load"]  # that stage did not stream: no stream keys at all


def streamed_doc() -> dict[str, Any]:
    doc = make_doc()
    for i, m in enumerate(doc["measurements"]):
        op, low = m["figures"]["at_operating_point"], m["figures"]["low_load"]
        op.update(ttfc_p50_ms=10.0, ttfc_p99_ms=40.0 + i, gap_p50_ms=5.0, gap_p99_ms=9.0)
        low.update(ttfc_p50_ms=8.0, ttfc_p99_ms=12.0, gap_p50_ms=5.0, gap_p99_ms=6.0)
    cfg = SweepConfig.from_dict(doc["config"])
    doc.update(analyse(cfg, cfg.points(), doc["measurements"]))
    return doc


def test_sweep_points_carry_ttfc_and_gap_p99_in_json_csv_and_tables(tmp_path: Path) -> None:
    plain = make_doc()
    assert "ttfc_p99_ms" not in plain["points"][0]["at_operating_point"]  # a sweep without --stream: unchanged
    doc = streamed_doc()
    p01 = next(r for r in doc["points"] if r["id"] == "p01")  # measurements 0 and 1
    assert p01["at_operating_point"]["ttfc_p99_ms"] == {"median": 40.5, "min": 40.0, "max": 41.0, "n": 2}
    assert p01["low_load"]["gap_p99_ms"]["median"] == 6.0
    row = next(r for r in csv_rows(doc) if r["id"] == "p01")
    assert row["operating_point_ttfc_p99_ms"] == 40.5 and row["operating_point_gap_p99_ms"] == 9.0
    assert row["low_load_ttfc_p99_ms"] == 12.0 and row["at_rps_ttfc_p99_ms"] is None
    with write_sweep_csv(plain, tmp_path / "sweep.csv").open() as fh:
        assert next(iter(csv.DictReader(fh)))["operating_point_ttfc_p99_ms"] == ""  # the column, empty
    console = Console(record=True, width=300)
    print_sweep(console, doc)
    text = console.export_text()
    assert "TTFC p99 ms at 85 %" in text and "40.5 (40.0–41.0)" in text
    assert "TTFC p99 ms at 85 %" in render_sweep(doc)
    console = Console(record=True, width=300)
    print_sweep(console, plain)
    assert "TTFC" not in console.export_text()


def test_a_sweep_diff_compares_ttfc_at_rps() -> None:
    doc = make_doc()
    for row, ttfc in zip(doc["points"][:2], (20.0, 40.0), strict=True):
        row["at_rps"] = {k: {"median": v, "min": v * 0.99, "max": v * 1.01, "n": 2}
                         for k, v in (("p50_ms", 5.0), ("p99_ms", 9.0), ("ttfc_p99_ms", ttfc))}  # fmt: skip
    verdicts = {m.metric: m.verdict for m in sweep_points_diff(doc, "s", "p01", "p02", 0.05).metrics}
    assert verdicts["ttfc_p99_ms"] == "regression" and verdicts["latency_p99_ms"] == "no_change"
    assert "gap_p99_ms" not in verdicts  # neither point has it


def test_compare_shows_ttfc_and_gaps_per_protocol() -> None:
    def summary(ttfc_p99: float, stream: bool) -> dict[str, Any]:
        at = {"offered_rps": 100.0, "latency_ms": {"p50": 5.0, "p99": 9.0}, "verdict": "stable"}
        return {
            "target": {"stream": stream},
            "saturation_rps": 120.0,
            "generator": {},
            "latency_at": [dict(at, stream=stream_block(ttfc_p99, 4.0)) if stream else at],
        }

    doc = compare_rows({"rest": summary(30.0, True), "grpc": summary(20.0, True)})
    rest = doc["protocols"]["rest"]
    assert rest["stream"] is True
    assert rest["latency_at"][0]["stream"] == {"ttfc_p50_ms": 15.0, "ttfc_p99_ms": 30.0, "gap_p50_ms": 2.0,
                                               "gap_p99_ms": 4.0}  # fmt: skip
    console = Console(record=True, width=120)
    console.print(compare_table(doc))
    text = console.export_text()
    assert "TTFC p99 at 100 rps (ms)" in text and "30.00" in text and "gap p99 at 100 rps (ms)" in text
    plain = compare_rows({"rest": summary(0.0, False)})
    assert "stream" not in plain["protocols"]["rest"] and "stream" not in plain["protocols"]["rest"]["latency_at"][0]
    console = Console(record=True, width=120)
    console.print(compare_table(plain))
    assert "TTFC" not in console.export_text()
