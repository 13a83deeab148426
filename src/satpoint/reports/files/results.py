"""Everything written from a results folder: summary.json, stages.csv, intervals.csv, report.html.

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
from satpoint.reports.files.frames import origin_unix

SUMMARY_FILE = "summary.json"
INTERVALS_FILE = "intervals.csv"
INTERVAL_COLUMNS = [
    "segment",
    "second",
    "second_unix",  # the second's start in wall-clock (unix) time
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
            origin = origin_unix(seg)
            for iv in intervals(seg.records, seg.spans):
                lat = iv.latency_ms
                w.writerow(
                    [
                        seg.index,
                        iv.second,
                        round(origin + iv.second, 3),
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


STAGES_FILE = "stages.csv"
#: one row per stage of summary.json (``stages[]``), its steady window also in wall-clock (unix) time
STAGE_COLUMNS = [
    "segment",
    "stage",
    "target_rps",
    "offered_rps",
    "throughput_rps",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_p999_ms",
    "latency_max_ms",
    "requests",
    "errors",
    "error_rate",
    "verdict",
    "window_start_s",
    "window_end_s",
    "window_start_unix",
    "window_end_unix",
]


def write_stages(out_dir: Path, results: Results, summary: dict[str, Any]) -> Path:
    """``stages.csv``: what ``perf_analyzer -f`` gives, from the summary's stages (empty cells: no figure)."""
    origins = {seg.index: origin_unix(seg) for seg in results.segments}
    path = out_dir / STAGES_FILE
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(STAGE_COLUMNS)
        for st in summary.get("stages", []):
            lat, origin = st.get("latency_ms") or {}, origins.get(st["segment"])
            unix = [None if origin is None else round(origin + st[k], 3) for k in ("window_start_s", "window_end_s")]
            w.writerow(
                [st["segment"], st["index"], st["target_rps"], st["offered_rps"], st["throughput_rps"]]
                + [lat.get(p) for p in ("p50", "p90", "p99", "p999", "max")]
                + [st["requests"], sum((st.get("errors") or {}).values()), st["error_rate"], st["verdict"]]
                + [st["window_start_s"], st["window_end_s"], *unix]
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
    write_stages(out_dir, results, summary)
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
