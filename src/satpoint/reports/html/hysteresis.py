"""report.html's hysteresis section (``find --hysteresis``): the steps down from an overload, as a table
and a plot of completions against the offered rate."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from satpoint.reports.html.data import FolderData
from satpoint.reports.html.tables import esc, fmt_ms, fmt_num, fmt_rps, table

STATE_COLOURS = {"overloaded": "#d62728", "draining": "#ff7f0e", "recovered": "#2ca02c"}


def _state(s: str) -> str:
    return f'<span class="verdict" style="background:{STATE_COLOURS.get(s, "#999")}">{esc(s or "–")}</span>'


def hysteresis_table(h: dict[str, Any]) -> str:
    rows = [
        [
            esc(f"{100 * float(s['fraction']):.0f} %"),
            fmt_rps(s.get("offered_rps")),
            fmt_rps(s.get("throughput_rps")),
            fmt_ms(s.get("latency_p50_ms")),
            fmt_ms(s.get("reference_p50_ms")),
            esc(f"{float(s['queue_slope_rps']):+.1f}"),
            fmt_num(s.get("cpu_us_per_request"), 0),
            _state(str(s.get("state", ""))),
            esc(s.get("why", "")),
        ]
        for s in h.get("steps") or []
    ]
    head = [
        "of saturation",
        "offered",
        "throughput",
        "p50 ms (last half)",
        "stable p50 ms",
        "queue /s",
        "CPU µs/req",
        "state",
        "why",
    ]
    return table(head, rows, "stages")


def hysteresis_figures(h: dict[str, Any]) -> str:
    def pct(v: Any) -> str:
        return "–" if v is None else f"{100 * float(v):.0f} %"

    items = [
        ("overload step (collapse_rps)", fmt_rps(h.get("collapse_rps"))),
        (
            "completions while overloaded",
            f"{fmt_rps(h.get('overload_throughput_rps'))} ({pct(h.get('goodput_share'))})",
        ),
        ("drains from (recovery_rps)", f"{fmt_rps(h.get('recovery_rps'))} ({pct(h.get('recovery_share'))})"),
        ("latency back from", fmt_rps(h.get("recovered_rps"))),
        ("metastable", fmt_num(h.get("metastable"))),
    ]
    cells = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in items)
    return f"<table>{cells}</table><p>{esc(h.get('explanation', ''))}</p>"


def hysteresis_plot(h: dict[str, Any], saturation_rps: float | None) -> go.Figure:
    """Completions against the offered rate, step by step (the x axis runs down, as the load did)."""
    steps = h.get("steps") or []
    fig = go.Figure()
    xs = [float(s["offered_rps"]) for s in steps]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[float(s["throughput_rps"]) for s in steps],
            mode="lines+markers",
            name="completions/s",
            line={"color": "#555"},
            marker={"size": 10, "color": [STATE_COLOURS.get(s.get("state", ""), "#999") for s in steps]},
            text=[f"{s['state']}: {s.get('why', '')}" for s in steps],
        )
    )
    if xs:
        fig.add_trace(
            go.Scatter(
                x=[max(xs), min(xs)],
                y=[max(xs), min(xs)],
                mode="lines",
                name="completions = offered",
                line={"dash": "dot", "color": "#aaa"},
            )
        )
    if saturation_rps:
        fig.add_vline(x=saturation_rps, line_dash="dash", annotation_text="saturation point")
    fig.update_layout(
        title="hysteresis: completions as the load steps down from the overload",
        xaxis={"title": "offered rps (stepping down)", "autorange": "reversed"},
        yaxis={"title": "completions/s"},
        height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig


def has_hysteresis(f: FolderData) -> bool:
    return bool(f.summary.get("hysteresis"))
