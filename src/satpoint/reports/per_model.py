"""A model mix in the reports: the terminal's per-model table and the HTML report's section (a table and a
plot of each model's p99 against the offered rate), both from summary.json's ``models`` block
(``analysis.models.per_model``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:  # the HTML side's imports (plotly) stay out of the terminal's
    import plotly.graph_objects as go

    from satpoint.reports.html.data import FolderData

#: the terminal shows at most this many stages (the lowest, the first that saturated, the highest stable,
#: the last) and models (by weight) ...
MAX_STAGES = 6
MAX_MODELS = 30
#: ... and the HTML plot draws at most this many models' lines (by weight; the rest only in the table)
PLOT_MODELS = 20


def by_rate(block: dict[str, Any]) -> list[dict[str, Any]]:
    """The block's stages by offered rate (a search measures them out of order)."""
    return sorted(block.get("stages") or [], key=lambda s: (s["target_rps"], s["segment"], s["stage"]))


def shown_stages(block: dict[str, Any], limit: int = MAX_STAGES) -> list[dict[str, Any]]:
    """At most ``limit`` stages by rate: always the lowest, the last stable, the first not stable and the
    highest, the others evenly between."""
    stages = by_rate(block)
    if len(stages) <= limit:
        return stages
    keep = {0, len(stages) - 1}
    stable = [i for i, s in enumerate(stages) if s["verdict"] == "stable"]
    if stable:
        keep.add(stable[-1])
        if stable[-1] + 1 < len(stages):
            keep.add(stable[-1] + 1)
    step = (len(stages) - 1) / max(1, limit - 1)
    i = 0.0
    while len(keep) < limit and i < len(stages):
        keep.add(round(i))
        i += step
    return [stages[i] for i in sorted(keep)][:limit]


def top_models(block: dict[str, Any], limit: int) -> list[int]:
    """Model indices by weight (highest first), at most ``limit``."""
    weights = block.get("weights") or []
    return sorted(range(len(weights)), key=lambda k: -weights[k])[:limit]


def first_rise_line(block: dict[str, Any]) -> str:
    fr = block.get("first_rise")
    if not fr:
        return "no model's p50 and p99 rose to 2x their lowest-rate values in the stages measured"
    others = [m for m in fr.get("models_crossed", []) if m != fr["model"]]
    also = f" (also crossed there: {len(others)} other model(s))" if others else ""
    return (
        f"latency rose first for {fr['model']}: p99 {fr['p99_ms']:.1f} ms at {fr['target_rps']:g} rps "
        f"({fr['verdict']}), {fr['ratio']}x its {fr['baseline_p99_ms']:.1f} ms at {fr['baseline_target_rps']:g} rps"
        f"{also}"
    )


def growing_lines(block: dict[str, Any]) -> list[str]:
    """Stages judged stable as a whole in which a model's own queue grew (its outstanding count's slope above
    1 % of its offered rate, and above 1 request/s): the stage's verdict does not see one model past its
    capacity when the rest of the load hides it."""
    out = []
    for s in by_rate(block):
        if s["verdict"] != "stable":
            continue
        grew = [
            f"{d['model']} (+{d['queue_growth_rps']:.1f} req/s of {d['offered_rps']:g})"
            for d in s["models"]
            if d.get("queue_growth_rps", 0.0) > max(1.0, 0.01 * (d.get("offered_rps") or 0.0))
        ]
        if grew:
            out.append(f"  at {s['target_rps']:g} rps (stable as a whole) the queue of " + ", ".join(grew) + " grew")
    return out


def counts_line(block: dict[str, Any]) -> str:
    c = block.get("counts") or {}
    p = c.get("p_value")
    return (
        f"requests per model against the mix ({block.get('spec')}): chi-square {c.get('chi_square')} on "
        f"{c.get('dof')} degrees of freedom"
        + (f" (p = {p})" if p is not None else "")
        + f", max |z| {c.get('max_abs_z')}"
    )


def print_models(console: Console, summary: dict[str, Any]) -> None:
    """The terminal's per-model table (p99 per stage shown) and the model whose latency rose first."""
    block = summary.get("models")
    if not block:
        return
    stages = shown_stages(block)
    names = block["names"]
    shown = top_models(block, MAX_MODELS)
    table = Table(title=f"models ({len(names)}): p99 latency ms per stage (target rps, verdict)", title_justify="left")
    for col in ("model", "weight", "requests", "z"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for s in stages:
        table.add_column(f"{s['target_rps']:g} rps\n{s['verdict']}", justify="right")
    table.add_column("errors", justify="right")
    counts = block.get("counts") or {}
    for k in shown:
        cells = [escape(names[k]), f"{block['weights'][k]:.3f}", str(counts["requests"][k]), f"{counts['z'][k]:+.1f}"]
        for s in stages:
            p99 = s["models"][k]["latency_ms"].get("p99")
            cells.append("-" if p99 is None else f"{p99:.1f}")
        cells.append(str(sum(sum(s["models"][k]["errors"].values()) for s in block["stages"])))
        table.add_row(*cells)
    console.print(table)
    if len(shown) < len(names):
        console.print(f"  ({len(names) - len(shown)} models of lower weight are in summary.json's models block)")
    console.print(counts_line(block))
    console.print(first_rise_line(block))
    for line in growing_lines(block):
        console.print(line)


# HTML ----------------------------------------------------------------------------------------------------


def has_models(f: FolderData) -> bool:
    return bool(f.summary.get("models"))


def p99_plot(f: FolderData) -> go.Figure:
    """Each model's p99 latency (from the intended time) against the stage's offered rate."""
    import plotly.graph_objects as go

    from satpoint.reports.html.plots import _axis, _layout, _log_ms_axis

    block = f.summary["models"]
    stages = by_rate(block)
    fig = go.Figure()
    first = (block.get("first_rise") or {}).get("model")
    for k in top_models(block, PLOT_MODELS):
        name = block["names"][k]
        rows = [(s["models"][k]["offered_rps"], s["models"][k]["latency_ms"].get("p99")) for s in stages]
        fig.add_trace(
            go.Scatter(
                x=[r[0] for r in rows],
                y=[r[1] for r in rows],
                mode="lines+markers",
                name=f"{name} ({block['weights'][k]:.3f})",
                line={"width": 3 if name == first else 1.2},
            )
        )
    _layout(fig, "p99 latency per model against its offered rate (the first to rise drawn thick)")
    fig.update_layout(xaxis=_axis("model's offered rate (requests/s)"), yaxis=_log_ms_axis("p99 ms"))
    return fig


def model_table(f: FolderData) -> str:
    """Per model: weight, requests and z over the run, then p50/p99 and answered rps in each shown stage."""
    from satpoint.reports.html.tables import esc

    block = f.summary["models"]
    stages = shown_stages(block, 8)
    counts = block.get("counts") or {}
    head = "".join(
        f"<th>{s['target_rps']:g} rps<br>{esc(s['verdict'])}<br>p50 / p99 ms · answered/s</th>" for s in stages
    )
    rows = []
    for k in top_models(block, len(block["names"])):
        cells = []
        for s in stages:
            d = s["models"][k]
            lat = d["latency_ms"]
            p50, p99 = lat.get("p50"), lat.get("p99")
            txt = "-" if p99 is None else f"{p50:.1f} / {p99:.1f} · {d['answered_rps']:g}"
            if d.get("error_rate"):
                txt += f" · {100 * d['error_rate']:.1f}% err"
            cells.append(f"<td>{esc(txt)}</td>")
        rows.append(
            f"<tr><td>{esc(block['names'][k])}</td><td>{block['weights'][k]:.4f}</td>"
            f"<td>{counts['requests'][k]}</td><td>{counts['z'][k]:+.2f}</td>{''.join(cells)}</tr>"
        )
    return (
        f"<table><thead><tr><th>model</th><th>weight</th><th>requests</th><th>z</th>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def models_section(folders: list[FolderData], figure_html: Any) -> list[str]:
    """The report's "Models" section: per folder with a mix, what was counted, who rose first, a plot, a table."""
    from satpoint.reports.html.tables import esc

    mine = [f for f in folders if has_models(f)]
    if not mine:
        return []
    out = ['<h2 id="models">Models of the mix</h2>']
    for n, f in enumerate(mine):
        block = f.summary["models"]
        if len(folders) > 1:
            out.append(f'<h3><span class="swatch" style="background:{esc(f.colour)}"></span>{esc(f.label)}</h3>')
        out.append(f"<p>{esc(counts_line(block))}<br><b>{esc(first_rise_line(block))}</b><br>")
        out.append(f'<span class="muted">rule: {esc(block.get("rise_rule", ""))}</span></p>')
        out.append(f'<div class="plot">{figure_html(p99_plot(f), f"models-p99-{n}")}</div>')
        out.append(f'<div class="scroll">{model_table(f)}</div>')
    return out
