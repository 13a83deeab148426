"""A sweep over the model count (``models=``): the table of figures per count and the plot of the server's
memory against the count with the fitted lines (functions of ``sweep.json``'s ``models_memory``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
from rich.table import Table

HEADS = (
    "group",
    "models",
    "saturation rps",
    "p99 ms at target",
    "RSS MB ready",
    "PSS MB ready",
    "RSS MB max (load)",
    "start s",
)


def _cell(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def models_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """One row of text per measured count, group by group."""
    rows = []
    for g in (doc.get("models_memory") or {}).get("groups") or []:
        for c in g["counts"]:
            sat = ("≥ " if c["lower_bound"] else "") + _cell(c["saturation_rps"])
            rows.append(
                [
                    g["group"] or "-",
                    str(c["models"]),
                    sat if c["saturation_rps"] is not None else "-",
                    _cell(c["p99_ms_at_target"]),
                    _cell(c["rss_mb_at_ready"]),
                    _cell(c["pss_mb_at_ready"]),
                    _cell(c["rss_mb_max"]),
                    _cell(c["startup_s"]),
                ]
            )
    return rows


def models_table(doc: Mapping[str, Any]) -> Table:
    t = Table(title="against the model count (RSS summed over the server's processes)")
    for h in HEADS:
        t.add_column(h, justify="left" if h == "group" else "right")
    for row in models_rows(doc):
        t.add_row(*row)
    return t


def memory_plot(doc: Mapping[str, Any]) -> go.Figure:
    """The server's RSS once ready and at most under load against the model count, per group, with the
    fitted lines."""
    fig = go.Figure()
    for g in (doc.get("models_memory") or {}).get("groups") or []:
        counts = [c["models"] for c in g["counts"]]
        name = g["group"] or "server"
        for key, fit_key, label in (
            ("rss_mb_at_ready", "fit_at_ready", "once ready"),
            ("rss_mb_max", "fit_under_load", "under load (max)"),
        ):
            ys = [c[key] for c in g["counts"]]
            if all(y is None for y in ys):
                continue
            fig.add_trace(go.Scatter(x=counts, y=ys, mode="markers", name=f"{name}: {label}"))
            fit = g.get(fit_key)
            if fit is not None:
                xs = [min(counts), max(counts)]
                fig.add_trace(
                    go.Scatter(
                        x=xs,
                        y=[fit["intercept_mb"] + fit["mb_per_model"] * x for x in xs],
                        mode="lines",
                        line={"dash": "dash"},
                        name=f"{name}: fit {label}, {fit['mb_per_model'] * 1024:.0f} KB per model",
                    )
                )
    budget = (doc.get("models_memory") or {}).get("budget_mb")
    if budget is not None:
        fig.add_hline(y=budget, line={"dash": "dot", "color": "#b42318"}, annotation_text=f"budget {budget:g} MB")
    fig.update_layout(
        title="server memory against the model count",
        height=440,
        template="plotly_white",
        margin={"l": 70, "r": 30, "t": 60, "b": 60},
        xaxis={"title": "models"},
        yaxis={"title": "RSS summed over the process tree, MB", "rangemode": "tozero"},
        legend={"orientation": "h", "y": -0.18},
    )
    return fig
