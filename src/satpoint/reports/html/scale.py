"""``scale-test``'s page, ``scale.html``: offered and answered load, p50 and the objective's percentile, and the
replica counts on one time axis (the run clock), the seconds over the objective shaded, the step and the fall
marked; then the figures of the ``scale`` block (a pure function of it)."""

from __future__ import annotations

from html import escape as esc
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from satpoint.reports.html.embed import figure_html
from satpoint.reports.html.report import page_head, page_tail

_FIGURES = (
    ("time to the desired count", "time_to_desired_s"),
    ("time to the replicas (last one ready)", "time_to_replicas_s"),
    ("time to recover", "time_to_recover_s"),
    ("seconds over the objective", "seconds_over_slo"),
    ("requests over the objective", "requests_over_slo"),
    ("requests failed", "requests_failed"),
)


def timeline_figure(block: dict[str, Any]) -> go.Figure:
    """Three rows on one time axis: load (rps), latency (ms, log), replicas."""
    rows = block.get("timeline") or []
    metric = block["slo"]["metric"]
    t = [r["t_s"] + 0.5 for r in rows]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        subplot_titles=("load (rps)", "latency from the intended send time (ms; failed: not drawn)",
                                        "replicas"))  # fmt: skip
    fig.add_trace(go.Scatter(x=t, y=[r["offered"] for r in rows], name="offered", mode="lines"), row=1, col=1)
    fig.add_trace(go.Scatter(x=t, y=[r["ok"] for r in rows], name="answered OK", mode="lines"), row=1, col=1)
    fig.add_trace(go.Scatter(x=t, y=[r["failed"] for r in rows], name="failed", mode="lines"), row=1, col=1)
    fig.add_trace(go.Scatter(x=t, y=[r["p50_ms"] for r in rows], name="p50", mode="lines"), row=2, col=1)
    fig.add_trace(go.Scatter(x=t, y=[r.get(f"{metric}_ms") for r in rows], name=metric, mode="lines"), row=2, col=1)
    fig.add_hline(y=block["slo"]["limit_ms"], line_dash="dot", row=2, col=1)
    for key in ("ready", "desired"):
        fig.add_trace(
            go.Scatter(x=t, y=[r[key] for r in rows], name=f"replicas {key}", mode="lines", line_shape="hv"),
            row=3, col=1,
        )  # fmt: skip
    for r in rows:
        if r["over"]:
            fig.add_vrect(x0=r["t_s"], x1=r["t_s"] + 1, fillcolor="red", opacity=0.12, line_width=0)
    for x in (block["step_s"], block["down_s"]):
        fig.add_vline(x=x, line_dash="dash")
    fig.update_yaxes(type="log", row=2, col=1)
    fig.update_xaxes(title_text="seconds of the run (due times)", row=3, col=1)
    fig.update_layout(height=720, margin={"t": 40})
    return fig


def render_html(block: dict[str, Any]) -> str:
    parts = page_head("satpoint scale-test")
    parts.append(
        f"<p>{block['from_rps']:g} &rarr; {block['to_rps']:g} rps at {block['step_s']:g} s (ramp {block['ramp_s']:g}"
        f" s), back at {block['down_s']:g} s; objective {esc(block['slo']['metric'])} &le; "
        f"{block['slo']['limit_ms']:g} ms per second of due times; replicas from {esc(block['source'])}</p>"
    )
    parts.append(figure_html(timeline_figure(block), "scale-timeline"))
    parts.append("<table><tbody>")
    for label, key in _FIGURES:
        v = block.get(key)
        parts.append(f"<tr><th>{esc(label)}</th><td>{'-' if v is None else esc(str(v))}</td></tr>")
    parts.append("</tbody></table>")
    for note in block.get("notes") or []:
        parts.append(f"<p>note: {esc(note)}</p>")
    parts.append(page_tail())
    return "\n".join(parts)


def write_scale_html(block: dict[str, Any], path: Path) -> Path:
    path.write_text(render_html(block), encoding="utf-8")
    return path
