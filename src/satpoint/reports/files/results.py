"""Everything written from a results folder: summary.json, intervals.csv, report.html.

All of it is a function of the results data, so ``satpoint report DIR`` rewrites it offline.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from satpoint.analysis.server.flamegraph import SVG_FILE
from satpoint.analysis.summary.build import build_summary
from satpoint.analysis.summary.model import parse_summary
from satpoint.metrics.documents import write_document
from satpoint.metrics.results import Results
from satpoint.metrics.stats import intervals

SUMMARY_FILE = "summary.json"
INTERVALS_FILE = "intervals.csv"
INTERVAL_COLUMNS = [
    "segment",
    "second",
    "stage",
    "offered",
    "throughput",
    "errors",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_max_ms",
    "send_lag_p99_ms",
    "outstanding",
]


def write_intervals(out_dir: Path, results: Results) -> Path:
    path = out_dir / INTERVALS_FILE
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(INTERVAL_COLUMNS)
        for seg in results.segments:
            for iv in intervals(seg.records, seg.spans):
                lat = iv.latency_ms
                w.writerow(
                    [
                        seg.index,
                        iv.second,
                        iv.stage + 1 if iv.stage >= 0 else "",
                        iv.offered,
                        iv.throughput,
                        iv.errors,
                        lat["p50"],
                        lat["p90"],
                        lat["p99"],
                        lat["max"],
                        iv.send_lag_p99_ms,
                        iv.inflight_end,
                    ]
                )
    return path


def write_summary(out_dir: Path, results: Results) -> dict[str, Any]:
    summary = build_summary(results)
    pipeline = out_dir / "pipeline.json"  # a pipeline's find: its figures stay beside the summary rewritten
    if pipeline.is_file():
        block = json.loads(pipeline.read_text())
        summary["pipeline"] = {k: v for k, v in block.items() if k not in ("schema_version", "tool_version", "kind")}
    write_document(out_dir / SUMMARY_FILE, parse_summary(summary))  # through its model: summary.schema.json
    return summary


def write_flamegraph(out_dir: Path, summary: dict[str, Any]) -> Path | None:
    """flamegraph.svg, drawn from the speedscope recording the summary names (None: there is none)."""
    from satpoint.reports.files.flamegraph_svg import write_flamegraph_svg

    fg = summary.get("flamegraph") or {}
    name = fg.get("speedscope")
    if not name or not (out_dir / name).exists():
        return None
    stage = f"stage {fg.get('stage')}, " if fg.get("stage") else ""
    title = f"py-spy flame graph of pid {fg.get('pid')} and its children ({stage}{fg.get('target_rps') or 0:.1f} rps)"
    return write_flamegraph_svg(out_dir / name, out_dir / SVG_FILE, title)


def write_all(out_dir: Path, results: Results, html: bool = True) -> dict[str, Any]:
    """Write every file of the folder: ``out_dir``, or the rescue folder once ``out_dir`` refused a write."""
    out_dir = results.rescue_dir or out_dir
    summary = write_summary(out_dir, results)
    write_intervals(out_dir, results)
    write_flamegraph(out_dir, summary)
    if html:
        try:
            from satpoint.reports.html.report import write_report
        except ImportError:
            pass
        else:
            write_report([out_dir], out_dir / "report.html")
    return summary
