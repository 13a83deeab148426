"""The sweep's report.html (a function of ``sweep.json``): the front, one curve per numeric knob, the table.

Self-contained like the run report (plotly.js inlined, no network) and with the same self-check: the page
records in ``<body data-plots data-drawn data-errors>`` whether every plot drew.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from satpoint.reports.html.embed import figure_html
from satpoint.reports.html.report import REPORT_ERRORS_BOX, page_head, page_tail
from satpoint.reports.html.tables import esc, fmt_time, table
from satpoint.reports.sweep import (
    QUALITY_HEADS,
    has_quality,
    has_stream,
    median_range,
    quality_cells,
    scaling_text,
    sorted_rows,
    stream_cells,
)
from satpoint.reports.sweep_models import memory_plot

FRONT_COLOUR = "#b42318"
POINT_COLOUR = "#0969da"


def _layout(fig: go.Figure, title: str, x: str, y: str, **kw: Any) -> go.Figure:
    fig.update_layout(
        title=title,
        height=440,
        template="plotly_white",
        margin={"l": 70, "r": 30, "t": 60, "b": 60},
        xaxis={"title": x, **kw.pop("xaxis", {})},
        yaxis={"title": y, "rangemode": "tozero", **kw.pop("yaxis", {})},
        legend={"orientation": "h", "y": -0.18},
        **kw,
    )
    return fig


def front_plot(doc: Mapping[str, Any]) -> go.Figure:
    """Saturation (x) vs p99 at the operating point (y), every point; the non-dominated front drawn."""
    rows = [r for r in doc["points"] if r["saturation_rps"] and r["at_operating_point"]["p99_ms"]]
    front = set(doc.get("pareto_front") or [])
    fig = go.Figure()
    for on_front in (False, True):
        sel = [r for r in rows if (r["id"] in front) == on_front]
        if not sel:
            continue
        fig.add_trace(
            go.Scatter(
                x=[r["saturation_rps"]["median"] for r in sel],
                y=[r["at_operating_point"]["p99_ms"]["median"] for r in sel],
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [r["saturation_rps"]["max"] - r["saturation_rps"]["median"] for r in sel],
                    "arrayminus": [r["saturation_rps"]["median"] - r["saturation_rps"]["min"] for r in sel],
                },
                mode="markers+text",
                text=[r["id"] for r in sel],
                textposition="top center",
                hovertext=[r["label"] for r in sel],
                marker={"size": 11, "color": FRONT_COLOUR if on_front else POINT_COLOUR},
                name="on the front" if on_front else "dominated",
            )
        )
    line = sorted((r for r in rows if r["id"] in front), key=lambda r: r["saturation_rps"]["median"])
    if len(line) > 1:
        fig.add_trace(
            go.Scatter(
                x=[r["saturation_rps"]["median"] for r in line],
                y=[r["at_operating_point"]["p99_ms"]["median"] for r in line],
                mode="lines",
                line={"color": FRONT_COLOUR, "dash": "dot"},
                name="front",
                hoverinfo="skip",
            )
        )
    return _layout(
        fig,
        "saturation vs p99 at 85 % of saturation (right and low is better)",
        "saturation point, rps (median, bars: range)",
        "p99 at 85 % of saturation, ms",
    )


def numeric_knobs(doc: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for r in doc["points"]:
        for k, v in r["knobs"].items():
            if isinstance(v, int | float) and not isinstance(v, bool) and k not in names:
                names.append(k)
    return [k for k in names if len({r["knobs"].get(k) for r in doc["points"]}) > 1]


def knob_plot(doc: Mapping[str, Any], knob: str) -> go.Figure:
    """Saturation vs one numeric knob, one line per combination of the other knobs; for ``workers`` the
    ideal (one worker × min(workers, cores)) and a marker at the core count."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in doc["points"]:
        if knob not in r["knobs"] or not r["saturation_rps"]:
            continue
        rest = " ".join(f"{k}={v}" for k, v in r["knobs"].items() if k != knob) or "saturation"
        groups.setdefault(rest, []).append(r)
    fig = go.Figure()
    cores: set[int] = set()
    for name, rs in groups.items():
        rs = sorted(rs, key=lambda r: r["knobs"][knob])
        sat = [r["saturation_rps"] for r in rs]
        fig.add_trace(
            go.Scatter(
                x=[r["knobs"][knob] for r in rs],
                y=[s["median"] for s in sat],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [s["max"] - s["median"] for s in sat],
                    "arrayminus": [s["median"] - s["min"] for s in sat],
                },
                mode="lines+markers",
                name=name,
                hovertext=[r["label"] for r in rs],
            )
        )
        if knob == "workers":
            ideal = [(r["knobs"][knob], r["scaling"]) for r in rs if (r.get("scaling") or {}).get("ideal")]
            if ideal:
                one = next((r["saturation_rps"]["median"] for r in rs if r["knobs"][knob] == 1), None)
                if one:
                    fig.add_trace(
                        go.Scatter(
                            x=[x for x, _ in ideal],
                            y=[one * s["ideal"] for _, s in ideal],
                            mode="lines",
                            line={"dash": "dash", "color": "#8c959f"},
                            name=f"ideal: one worker × min(workers, cores) ({name})",
                        )
                    )
            cores.update(int(r["server_cores"]) for r in rs if r.get("server_cores"))
    for c in sorted(cores):
        fig.add_vline(x=c, line={"dash": "dot", "color": "#6a737d"}, annotation_text=f"{c} server core(s)")
    return _layout(fig, f"saturation vs {knob}", knob, "saturation point, rps (median, bars: range)")


def low_load_plot(doc: Mapping[str, Any]) -> go.Figure:
    """p50/p99 at low load and at 85 % of saturation per point: what batching costs at low rates."""
    rows = [r for r in doc["points"] if r["saturation_rps"]]
    ids = [r["id"] for r in rows]
    fig = go.Figure()
    for key, label in (("low_load", "low load"), ("at_operating_point", "85 % of saturation")):
        for pct in ("p50_ms", "p99_ms"):
            fig.add_trace(
                go.Bar(
                    x=ids,
                    y=[(r[key][pct] or {}).get("median") for r in rows],
                    name=f"{pct[:3]} at {label}",
                    hovertext=[r["label"] for r in rows],
                )
            )
    return _layout(fig, "latency at low load and at the operating point", "point", "latency, ms", barmode="group")


def _table_html(doc: Mapping[str, Any]) -> str:
    front = set(doc.get("pareto_front") or [])
    head = [
        "point",
        "knobs",
        "n",
        "saturation rps",
        "max throughput rps",
        "inferences/s",
        "rps/core",
        "low-load p50 ms",
        "low-load p99 ms",
        "p99 ms at 85 %",
        "server cores at saturation",
        "server CPU µs/request",
        "diagnosis",
        "vs 1 worker",
    ]
    srv = [r.get("server") or {} for r in sorted_rows(doc)]
    limited = any(x.get("throttled_share_at_saturation") or x.get("memory_peak_mb") for x in srv)  # cgroup limits
    if limited:
        head += ["throttled periods at sat./85 %", "cgroup peak MB"]
    quality = has_quality(doc)
    if quality:
        head += list(QUALITY_HEADS)
    streamed = has_stream(doc)  # --stream: time to first chunk and gaps at 85 %
    if streamed:
        head += ["TTFC p99 ms at 85 %", "gap p99 ms at 85 %"]
    rows = []
    for r in sorted_rows(doc):
        sc = r.get("scaling")
        x = r.get("server") or {}
        th = (x.get("throttled_share_at_saturation"), x.get("throttled_share_at_operating_point"))
        limit_cells = [
            "/".join(f"{v['median']:.0%}" if v else "-" for v in th),
            median_range(x.get("memory_peak_mb"), ".0f"),
        ]
        rows.append(
            [
                esc(r["id"]) + (" ★" if r["id"] in front else ""),
                esc(r["label"]),
                str(r["measurements"]),
                esc(median_range(r["saturation_rps"])) + (" ≥" if r.get("lower_bound") else ""),
                esc(median_range(r["max_throughput_rps"])),
                esc(median_range(r["inferences_per_s"])),
                esc(median_range(r["rps_per_core"])),
                esc(median_range(r["low_load"]["p50_ms"], ".2f")),
                esc(median_range(r["low_load"]["p99_ms"], ".2f")),
                esc(median_range(r["at_operating_point"]["p99_ms"], ".2f")),
                esc(median_range(r["server"]["cpu_cores_at_saturation"], ".2f")),
                esc(median_range(r["server"]["cpu_us_per_request"], ".0f")),
                esc(", ".join(r["server"]["diagnosis"]) or "-"),
                esc(scaling_text(sc)),
                *([esc(c) for c in limit_cells] if limited else []),
                *([esc(c) for c in quality_cells(r)] if quality else []),
                *([esc(c) for c in stream_cells(r["at_operating_point"])] if streamed else []),
            ]
        )
    return table(head, rows, "stages")


def _measurements_html(doc: Mapping[str, Any]) -> str:
    rows = []
    for m in doc.get("measurements", []):
        f = m.get("figures") or {}
        link = (
            f'<a href="{esc(m["dir"])}/report.html">{esc(m["dir"])}</a>' if m.get("status") == "done" else esc(m["dir"])
        )
        rows.append(
            [
                esc(m["point"]),
                str(m["repeat"]),
                esc(m.get("phase", "")),
                esc(m["status"]) + (f": {esc(m.get('error'))}" if m.get("error") else ""),
                esc(f.get("saturation_rps")),
                esc(f.get("unstable_rps")),
                esc(m.get("duration_s")),
                link,
            ]
        )
    return table(
        ["point", "measurement", "phase", "status", "saturation rps", "unstable rps", "seconds", "folder"], rows
    )


def render_sweep(doc: Mapping[str, Any]) -> str:
    plots: list[tuple[str, go.Figure]] = [("sweep-front", front_plot(doc))]
    plots += [(f"sweep-knob-{i}", knob_plot(doc, k)) for i, k in enumerate(numeric_knobs(doc))]
    plots.append(("sweep-latency", low_load_plot(doc)))
    if doc.get("models_memory"):
        plots.append(("sweep-models-memory", memory_plot(doc)))
    title = f"satpoint sweep: {' · '.join(doc['config']['sets'])}"
    out: Sequence[str] = [
        *page_head(title),
        f'<div class="sub">server {esc(doc["config"]["server"]["kind"])} · objective {esc(doc["objective"])} · '
        f"created {fmt_time(doc.get('created_unix'))}</div>",
        REPORT_ERRORS_BOX,
        "<h2>Recommendation</h2>",
        "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in doc.get("recommendation") or []) + "</ul>",
        *([f'<p class="muted">the sweep stopped early: {esc(doc["stopped"])}</p>'] if doc.get("stopped") else []),
        f"<h2>Points, by {esc(doc['objective'])}</h2>",
        '<p class="muted">median (min–max) over each point\'s measurements; ★ = on the front (no other point '
        "has both a higher saturation and a lower p99 at 85 % of saturation); ≥ = a lower bound.</p>",
        f'<div class="scroll">{_table_html(doc)}</div>',
        "<h2>Plots</h2>",
        *(f'<div class="plot">{figure_html(fig, div)}</div>' for div, fig in plots),
        "<h2>Measurements</h2>",
        f'<div class="scroll">{_measurements_html(doc)}</div>',
        page_tail(),
    ]
    return "\n".join(out)


def write_sweep_report(doc: Mapping[str, Any], path: Path) -> Path:
    path.write_text(render_sweep(doc), encoding="utf-8")
    return path
