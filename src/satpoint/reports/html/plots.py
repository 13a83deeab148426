"""The report's plotly figures, one function per plot; every folder is one trace group.

Why this module is long: each plot is one self-contained function (traces, axes, hover text) and they
share the styling helpers at the top (axes, layout, stage bands, verdict colours); the server's plots
(CPU and memory over time, server vs client per stage) and the phase series of a ``find`` joined them,
and splitting the plots from the helpers they all use would only scatter one page's look.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from satpoint.reports.html.data import Band, FolderData

FOLDER_COLOURS = ["#1f77b4", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22", "#393b79", "#7f7f7f"]
VERDICT_COLOURS = {
    "stable": "#2ca02c",
    "saturated": "#e6a700",
    "slo_violated": "#9467bd",
    "failing": "#d62728",
    "generator_limited": "#7b241c",
}
OTHER_VERDICT = "#7f7f7f"
ERROR_COLOURS = ["#d62728", "#ff7f0e", "#8c564b", "#e377c2", "#9467bd", "#bcbd22", "#7f7f7f", "#17becf"]
PCT_STYLE = {  # percentile -> (colour when one folder, dash)
    "p50": ("#1f77b4", "solid"),
    "p90": ("#17becf", "dash"),
    "p99": ("#ff7f0e", "dot"),
    "max": ("#d62728", "dashdot"),
}
SPECTRUM_TICKS = [1, 2, 10, 100, 1e3, 1e4, 1e5, 1e6]
SPECTRUM_LABELS = ["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"]
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
GRID = "#e3e6ea"


def _always(_: list[FolderData]) -> bool:
    return True


@dataclass(frozen=True)
class Plot:
    div_id: str
    title: str
    build: Callable[[list[FolderData]], go.Figure]
    #: whether the plot has anything to draw for these folders (server plots need server data)
    show: Callable[[list[FolderData]], bool] = _always


#: the search's phases (segment purposes) in the order they happen; each is its own series in the plots
#: against the offered rate, so the staircase, the refinement, the confirmation, the latency profile
#: and the flame graph's stage do not zig-zag across each other.  Lines join only monotonic sequences.
PHASES: dict[str, tuple[str, bool]] = {  # purpose -> (marker symbol, joined by a line)
    "run": ("circle", True),
    "staircase": ("circle", True),
    "refine": ("diamond", False),
    "confirm": ("square", False),
    "retest": ("diamond-open", False),
    "profile": ("triangle-up", True),
    "flamegraph": ("star", False),
    "closed_loop": ("circle", True),
}


def folder_colour(i: int) -> str:
    return FOLDER_COLOURS[i % len(FOLDER_COLOURS)]


def verdict_colour(v: str) -> str:
    return VERDICT_COLOURS.get(v, OTHER_VERDICT)


def _axis(title: str, **kw: Any) -> dict[str, Any]:
    return {
        "title": {"text": title},
        "gridcolor": GRID,
        "zerolinecolor": GRID,
        "linecolor": "#9aa0a6",
        "showline": True,
        "ticks": "outside",
        **kw,
    }


def _ms_label(v: float) -> str:
    if v >= 1000:
        return f"{v / 1000:g} s"
    return f"{v:g}"


#: 1-2-5 ticks for latency axes in ms (plotly's own log ticks print only the leading digit)
LOG_MS_TICKS = [m * 10.0**e for e in range(-3, 7) for m in (1, 2, 5)]


def _log_ms_axis(title: str, **kw: Any) -> dict[str, Any]:
    return _axis(
        title,
        type="log",
        tickvals=LOG_MS_TICKS,
        ticktext=[_ms_label(v) for v in LOG_MS_TICKS],
        **kw,
    )


def _layout(fig: go.Figure, title: str, height: int = 440, **kw: Any) -> go.Figure:
    fig.update_layout(
        template="none",
        title={"text": title, "x": 0.01, "xanchor": "left"},
        height=height,
        font={"family": FONT, "size": 12, "color": "#222"},
        paper_bgcolor="white",
        plot_bgcolor="white",
        margin={"l": 70, "r": 20, "t": 60, "b": 55},
        legend={"orientation": "v", "groupclick": "toggleitem"},
        hovermode="closest",
        **kw,
    )
    return fig


def _name(f: FolderData, what: str, many: bool) -> str:
    return f"{f.label} · {what}" if many else what


def _stage_hover(f: FolderData, number: int, s: dict[str, Any]) -> str:
    seg = next((x for x in f.results.segments if x.index == s["segment"]), None)
    purpose = f" ({seg.purpose})" if seg is not None and seg.purpose != "run" else ""
    return f"{f.label}<br>stage {number}{purpose}: target {s['target_rps']:g} rps<br>verdict {s.get('verdict', '')}"


def _sorted_stages(f: FolderData) -> list[tuple[int, dict[str, Any]]]:
    stages = list(enumerate(f.summary.get("stages", []), start=1))
    return sorted(stages, key=lambda ns: (ns[1]["offered_rps"], ns[0]))


@dataclass(frozen=True)
class PhaseSeries:
    """The stages of one phase (segment purpose; with ``find --repeats``, of one search) of a folder."""

    name: str
    symbol: str
    line: bool
    stages: list[tuple[int, dict[str, Any]]]  # (1-based stage number, stage document), in rate order


def phase_series(f: FolderData) -> list[PhaseSeries]:
    """A folder's stages split by phase, each in offered-rate order; phases in the order of ``PHASES``."""
    segs = {s.index: s for s in f.results.segments}
    repeats = len({s.repeat for s in f.results.segments}) > 1
    groups: dict[tuple[str, int], list[tuple[int, dict[str, Any]]]] = {}
    for n, st in _sorted_stages(f):
        seg = segs.get(int(st.get("segment", -1)))
        purpose = seg.purpose if seg is not None else "run"
        searching = purpose in ("staircase", "refine", "confirm", "retest")
        repeat = seg.repeat if seg is not None and repeats and searching else 0
        groups.setdefault((purpose, repeat), []).append((n, st))
    order = list(PHASES)

    def rank(key: tuple[str, int]) -> tuple[int, str, int]:
        return (order.index(key[0]) if key[0] in order else len(order), key[0], key[1])

    out = []
    for key in sorted(groups, key=rank):
        purpose, repeat = key
        symbol, line = PHASES.get(purpose, ("circle", False))
        name = (
            purpose
            if not repeat and not (repeats and purpose in ("staircase", "refine", "confirm", "retest"))
            else (f"{purpose} (search {repeat + 1})")
        )
        out.append(PhaseSeries(name, symbol, line, groups[key]))
    return out


def _verdict_legend(fig: go.Figure, folders: list[FolderData], **subplot: Any) -> None:
    seen = sorted({str(s.get("verdict", "")) for f in folders for s in f.summary.get("stages", [])})
    for v in seen:
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                marker={"color": verdict_colour(v), "size": 10, "line": {"color": "#444", "width": 1}},
                name=v or "(none)",
                legendgroup="verdicts",
                legendgrouptitle={"text": "verdict (marker fill)"},
                showlegend=True,
            ),
            **subplot,
        )


def _saturation_lines(fig: go.Figure, folders: list[FolderData]) -> None:
    for i, f in enumerate(folders):
        sat = f.summary.get("saturation_rps")
        if sat is None:
            continue
        label = f"saturation {sat:g} rps" + (f" ({f.label})" if len(folders) > 1 else "")
        fig.add_vline(
            x=sat,
            line={"color": f.colour, "dash": "dash", "width": 2},
            annotation={"text": label, "font": {"color": f.colour}, "yshift": -16 * i},
            annotation_position="top left",
        )


def throughput_vs_offered(folders: list[FolderData]) -> go.Figure:
    fig = go.Figure()
    top = 0.0
    many = len(folders) > 1
    for f in folders:
        phases = phase_series(f)
        for ph in phases:
            st = ph.stages
            xs = [s["offered_rps"] for _, s in st]
            ys = [s["throughput_rps"] for _, s in st]
            top = max([top, *xs, *ys])
            what = "achieved throughput" if len(phases) == 1 else ph.name
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines+markers" if ph.line else "markers",
                    name=_name(f, what, many) if len(phases) > 1 or not many else f.label,
                    legendgroup=f.label,
                    line={"color": f.colour, "width": 2},
                    marker={
                        "size": 11 if ph.symbol == "star" else 10,
                        "symbol": ph.symbol,
                        "color": [verdict_colour(str(s.get("verdict", ""))) for _, s in st],
                        "line": {"color": f.colour, "width": 2},
                    },
                    hovertext=[_stage_hover(f, n, s) for n, s in st],
                    hovertemplate="%{hovertext}<br>offered %{x:.1f}/s<br>throughput %{y:.1f}/s<extra></extra>",
                )
            )
    top = top * 1.05 or 1.0
    fig.add_trace(
        go.Scatter(
            x=[0, top],
            y=[0, top],
            mode="lines",
            name="y = x (all answered)",
            line={"color": "#888", "dash": "dot", "width": 1},
            hoverinfo="skip",
        )
    )
    _verdict_legend(fig, folders)
    _saturation_lines(fig, folders)
    return _layout(
        fig,
        "Achieved throughput vs offered rate (steady windows)",
        xaxis=_axis("offered rate (requests/s)", rangemode="tozero"),
        yaxis=_axis("throughput, OK answers/s", rangemode="tozero"),
    )


def latency_vs_offered(folders: list[FolderData]) -> go.Figure:
    fig = go.Figure()
    many = len(folders) > 1
    for f in folders:
        phases = phase_series(f)
        for ph in phases:
            st = ph.stages
            xs = [s["offered_rps"] for _, s in st]
            hover = [_stage_hover(f, n, s) for n, s in st]
            for pct, (colour, dash) in PCT_STYLE.items():
                line_colour = f.colour if many else colour
                what = f"latency {pct}" if len(phases) == 1 else f"{pct} · {ph.name}"
                fig.add_trace(
                    go.Scatter(
                        x=xs,
                        y=[s["latency_ms"].get(pct) for _, s in st],
                        mode="lines+markers" if ph.line else "markers",
                        name=_name(f, what, many),
                        legendgroup=f"{f.label} {ph.name}",
                        line={"color": line_colour, "dash": dash, "width": 2},
                        marker={
                            "size": 9,
                            "symbol": ph.symbol,
                            "color": [verdict_colour(str(s.get("verdict", ""))) for _, s in st],
                            "line": {"color": line_colour, "width": 1.5},
                        },
                        hovertext=hover,
                        hovertemplate=f"%{{hovertext}}<br>offered %{{x:.1f}}/s<br>{pct} %{{y:.3g}} ms<extra></extra>",
                    )
                )
    _verdict_legend(fig, folders)
    _saturation_lines(fig, folders)
    return _layout(
        fig,
        "Latency percentiles vs offered rate (steady windows; done − intended)",
        xaxis=_axis("offered rate (requests/s)", rangemode="tozero"),
        yaxis=_log_ms_axis("latency (ms, log)"),
    )


def _time_range(folders: list[FolderData]) -> list[float]:
    end = max((b.end_s for f in folders for b in f.bands), default=1.0)
    last = max((t for f in folders for t in f.series.t if t is not None), default=0.0)
    return [0.0, max(end, last + 0.5 * max(f.series.width_s for f in folders)) if folders else 1.0]


def _stage_bands(fig: go.Figure, folders: list[FolderData], labels: bool = True) -> None:
    """Shade every stage on a timeline figure: hold phases darker, ramps lighter (one colour per folder)."""
    many = len(folders) > 1
    shapes: list[dict[str, Any]] = []
    for f in folders:
        hold_op, ramp_op = (0.10, 0.04) if many else (0.14, 0.05)
        colour = f.colour if many else "#5b6b7c"
        for b in f.bands:
            if b.hold_start_s > b.start_s:
                shapes.append(_vrect(b.start_s, b.hold_start_s, colour, ramp_op))
            shapes.append(_vrect(b.hold_start_s, b.end_s, colour, hold_op))
    notes: list[dict[str, Any]] = []
    first = folders[0] if folders else None
    if labels and first is not None and len(first.bands) <= 40:
        for b in first.bands:
            notes.append(
                {
                    "x": 0.5 * (b.hold_start_s + b.end_s),
                    "y": 1.0,
                    "xref": "x",
                    "yref": "paper",
                    "yanchor": "bottom",
                    "text": f"{b.target_rps:.4g}",
                    "showarrow": False,
                    "font": {"size": 9, "color": "#555"},
                    "hovertext": _band_hover(first, b),
                }
            )
    # one assignment each: plotly's add_shape copies every earlier shape, quadratic in the stage count
    fig.update_layout(shapes=[*fig.layout.shapes, *shapes], annotations=[*fig.layout.annotations, *notes])


def _band_hover(f: FolderData, b: Band) -> str:
    where = f"segment {b.segment} ({b.purpose}) " if len(f.results.segments) > 1 else ""
    return f"{where}stage {b.stage + 1}: target {b.target_rps:g} rps, hold {b.hold_start_s:.1f}–{b.end_s:.1f} s"


def _vrect(x0: float, x1: float, colour: str, opacity: float) -> dict[str, Any]:
    return {
        "type": "rect",
        "xref": "x",
        "yref": "paper",
        "x0": round(x0, 3),
        "x1": round(x1, 3),
        "y0": 0,
        "y1": 1,
        "fillcolor": colour,
        "opacity": opacity,
        "line": {"width": 0},
        "layer": "below",
    }


def _time_note(folders: list[FolderData]) -> str:
    w = max((f.series.width_s for f in folders), default=1.0)
    per = "per second" if w <= 1 else f"per {w:g} s bucket"
    return f"seconds since the first segment started ({per}; shaded: hold, lighter: ramp; labels: target rps)"


def latency_throughput_over_time(folders: list[FolderData]) -> go.Figure:
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.07)
    many = len(folders) > 1
    for f in folders:
        s = f.series
        for key, ys, dash in (("p50", s.p50, "solid"), ("p99", s.p99, "dot")):
            fig.add_trace(
                go.Scatter(
                    x=s.t,
                    y=ys,
                    mode="lines",
                    name=_name(f, f"latency {key}", many),
                    legendgroup=f.label,
                    line={"color": f.colour if many else PCT_STYLE[key][0], "dash": dash, "width": 1.6},
                    hovertemplate=f"t=%{{x:.0f}} s<br>{key} %{{y:.3g}} ms<extra>{f.label}</extra>",
                ),
                row=1,
                col=1,
            )
        for name, ys, dash, colour in (
            ("throughput", s.throughput, "solid", f.colour if many else "#2ca02c"),
            ("offered", s.offered, "dot", f.colour if many else "#555"),
        ):
            fig.add_trace(
                go.Scatter(
                    x=s.t,
                    y=ys,
                    mode="lines",
                    name=_name(f, name, many),
                    legendgroup=f.label,
                    line={"color": colour, "dash": dash, "width": 1.6},
                    hovertemplate=f"t=%{{x:.0f}} s<br>{name} %{{y:.1f}}/s<extra>{f.label}</extra>",
                ),
                row=2,
                col=1,
            )
    _stage_bands(fig, folders)
    fig = _layout(fig, "Latency and throughput over time", height=620)
    fig.update_layout(margin={"t": 90})
    fig.update_xaxes(_axis(""), range=_time_range(folders))
    fig.update_xaxes(title_text=_time_note(folders), row=2, col=1)
    fig.update_yaxes(_log_ms_axis("latency p50 / p99 (ms, log)"), row=1, col=1)
    fig.update_yaxes(_axis("throughput / offered (req/s)"), rangemode="tozero", row=2, col=1)
    return fig


def _at(x: list[float], y: list[float], x0: float) -> float:
    """y at the first x >= x0 (the spectrum's grid is sorted)."""
    return next((yy for xx, yy in zip(x, y, strict=True) if xx >= x0), y[-1])


def _spectrum_text(x: list[float]) -> list[str]:
    return [f"{100 * (1 - 1 / v):.6g}%" for v in x]


def latency_spectrum(folders: list[FolderData]) -> go.Figure:
    fig = go.Figure()
    many = len(folders) > 1
    top = 1.0
    for f in folders:
        n = len(f.spectra)
        order = sorted(range(n), key=lambda k: (f.spectra[k].target_rps, k))
        rank = {k: r for r, k in enumerate(order)}
        for k, sp in enumerate(f.spectra):
            frac = rank[k] / (n - 1) if n > 1 else 1.0
            colour = f.colour if many else sample_colorscale("Viridis", [0.9 * frac])[0]
            top = max(top, sp.x[-1])
            what = f"#{sp.number} {sp.target_rps:.4g} rps ({sp.verdict})"
            fig.add_trace(
                go.Scatter(
                    x=sp.x,
                    y=sp.y_ms,
                    mode="lines",
                    name=_name(f, what, many),
                    legendgroup=f.label,
                    opacity=0.35 + 0.65 * frac if many else 1.0,
                    line={"color": colour, "width": 1.8},
                    text=_spectrum_text(sp.x),
                    hovertemplate=(
                        f"{f.label} stage #{sp.number}, {sp.target_rps:.4g} rps, n={sp.count}"
                        "<br>p %{text}: %{y:.3g} ms<extra></extra>"
                    ),
                )
            )
    x_end = math.log10(top * 1.25)
    ticks = [(v, lab) for v, lab in zip(SPECTRUM_TICKS, SPECTRUM_LABELS, strict=True) if math.log10(v) <= x_end]
    # latency axis: from a decade below the lowest 10th percentile (the few fastest answers would
    # otherwise stretch the log axis over decades nobody reads) to above the highest maximum
    lows = [_at(sp.x, sp.y_ms, 1 / 0.9) for f in folders for sp in f.spectra]
    highs = [sp.y_ms[-1] for f in folders for sp in f.spectra]
    y_range = None
    if lows and highs and min(lows) > 0:
        y_range = [math.log10(min(lows)) - 0.5, math.log10(max(highs)) + 0.15]
    return _layout(
        fig,
        "Latency percentile spectrum per stage (steady windows; OK and censored requests)",
        height=480,
        xaxis=_axis(
            "percentile",
            type="log",
            tickvals=[v for v, _ in ticks],
            ticktext=[lab for _, lab in ticks],
            range=[0, x_end],
        ),
        yaxis=_log_ms_axis("latency (ms, log)", range=y_range),
    )


def send_lag_over_time(folders: list[FolderData]) -> go.Figure:
    fig = go.Figure()
    many = len(folders) > 1
    for f in folders:
        fig.add_trace(
            go.Scatter(
                x=f.series.t,
                y=f.series.lag_p99,
                mode="lines",
                name=f.label if many else "send lag p99",
                legendgroup=f.label,
                line={"color": f.colour, "width": 1.6},
                hovertemplate="t=%{x:.0f} s<br>send lag p99 %{y:.3g} ms<extra>" + f.label + "</extra>",
            )
        )
    limit = folders[0].summary.get("rules", {}).get("generator_lag_p99_ms") if folders else None
    if limit is not None:
        fig.add_hline(
            y=float(limit),
            line={"color": VERDICT_COLOURS["generator_limited"], "dash": "dash", "width": 1},
            annotation={"text": f"generator-lag limit {float(limit):g} ms (p99, free slots)"},
            annotation_position="top right",
        )
    _stage_bands(fig, folders, labels=False)
    fig = _layout(
        fig,
        "Send lag over time (sent − intended, p99; includes waiting for a free slot)",
        height=360,
        xaxis=_axis(_time_note(folders), range=_time_range(folders)),
        yaxis=_axis("send lag p99 (ms)", rangemode="tozero"),
    )
    return fig


def errors_over_time(folders: list[FolderData]) -> go.Figure:
    fig = go.Figure()
    many = len(folders) > 1
    classes = sorted({c for f in folders for c in f.series.errors})
    colour = {c: ERROR_COLOURS[i % len(ERROR_COLOURS)] for i, c in enumerate(classes)}
    n = max(len(folders), 1)
    for i, f in enumerate(folders):
        s = f.series
        w = s.width_s * 0.9 / n
        offset = -0.45 * s.width_s + i * w
        base = [0.0] * len(s.t)
        for c in classes:
            col = s.errors.get(c)
            if col is None:
                continue
            keep = [j for j, v in enumerate(col) if v > 0 and s.t[j] is not None]
            if keep:
                fig.add_trace(
                    go.Bar(
                        x=[s.t[j] for j in keep],
                        y=[col[j] for j in keep],
                        base=[base[j] for j in keep],
                        width=w,
                        offset=offset,
                        name=_name(f, c, many),
                        legendgroup=f.label,
                        marker={"color": colour[c], "line": {"color": f.colour if many else colour[c], "width": 1}},
                        hovertemplate=f"t=%{{x:.0f}} s<br>{c} %{{y:.3g}}/s<extra>{f.label}</extra>",
                    )
                )
            base = [b + v for b, v in zip(base, col, strict=True)]
    if not fig.data:
        fig.add_annotation(
            text="no errors recorded",
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            showarrow=False,
            font={"size": 14, "color": "#2ca02c"},
        )
    _stage_bands(fig, folders, labels=False)
    return _layout(
        fig,
        "Errors per second by class (stacked)",
        height=360,
        barmode="overlay",
        xaxis=_axis(_time_note(folders), range=_time_range(folders)),
        yaxis=_axis("errors/s", rangemode="tozero"),
    )


def _has_server_samples(folders: list[FolderData]) -> bool:
    return any(f.server is not None for f in folders)


def server_over_time(folders: list[FolderData]) -> go.Figure:
    """The server's CPU (cores) and RSS over time, with the stage bands."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    many = len(folders) > 1
    for f in folders:
        srv = f.server
        if srv is None:
            continue
        fig.add_trace(
            go.Scatter(
                x=srv.t,
                y=srv.cores,
                mode="lines",
                name=_name(f, "server CPU (cores)", many),
                legendgroup=f.label,
                line={"color": f.colour if many else "#d62728", "width": 1.4},
                hovertemplate=f"t=%{{x:.1f}} s<br>%{{y:.2f}} cores<extra>{f.label}</extra>",
            ),
            row=1,
            col=1,
        )
        if srv.allowed_cores:
            fig.add_trace(
                go.Scatter(
                    x=[0, _time_range(folders)[1]],
                    y=[srv.allowed_cores, srv.allowed_cores],
                    mode="lines",
                    name=_name(f, f"cores allowed ({srv.allowed_cores:g})", many),
                    legendgroup=f.label,
                    line={"color": f.colour if many else "#555", "dash": "dash", "width": 1},
                    hoverinfo="skip",
                ),
                row=1,
                col=1,
            )
        fig.add_trace(
            go.Scatter(
                x=srv.t,
                y=srv.rss_mb,
                mode="lines",
                name=_name(f, "server RSS (MB)", many),
                legendgroup=f.label,
                line={"color": f.colour if many else "#1f77b4", "width": 1.6},
                hovertemplate=f"t=%{{x:.1f}} s<br>RSS %{{y:.1f}} MB<extra>{f.label}</extra>",
            ),
            row=2,
            col=1,
        )
    _stage_bands(fig, folders)
    fig = _layout(fig, "Server CPU and memory over time (its whole process tree, psutil)", height=560)
    fig.update_layout(margin={"t": 90})
    fig.update_xaxes(_axis(""), range=_time_range(folders))
    fig.update_xaxes(title_text=_time_note(folders), row=2, col=1)
    fig.update_yaxes(_axis("CPU (cores)"), rangemode="tozero", row=1, col=1)
    fig.update_yaxes(_axis("RSS (MB)"), rangemode="tozero", row=2, col=1)
    return fig


def _server_block(s: dict[str, Any]) -> dict[str, Any]:
    """The first server_metrics block of a stage that understood its endpoint (or {})."""
    return next((b for b in s.get("server_metrics") or [] if b.get("source")), {})


def _has_server_metrics(folders: list[FolderData]) -> bool:
    return any(_server_block(s) for f in folders for s in f.summary.get("stages", []))


#: per-stage server-side figures against the client's: (key, label, dash, symbol); None keys are client's
SERVER_LATENCIES = (
    ("handler_mean_ms", "server: REST/gRPC handler mean", "solid", "diamond"),
    ("mean_latency_ms", "server: inference mean", "dot", "square"),
    ("queue_ms", "server: queue mean", "dash", "triangle-up"),
    ("compute_ms", "server: compute mean", "dashdot", "triangle-down"),
)


def server_vs_client(folders: list[FolderData]) -> go.Figure:
    """Per stage: requests per second the server counted vs answers the client got, and the server's own
    latency (handler, inference, queue vs compute where it exposes them) vs the client's service time."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1)
    many = len(folders) > 1
    for f in folders:
        stages = [(n, s) for n, s in enumerate(f.summary.get("stages", []), start=1) if _server_block(s)]
        if not stages:
            continue
        xs = [n for n, _ in stages]
        hover = [_stage_hover(f, n, s) for n, s in stages]
        for what, ys, colour, symbol in (
            ("client: OK answers/s", [s["throughput_rps"] for _, s in stages], "#2ca02c", "circle"),
            ("server: requests counted/s", [_server_block(s).get("rps") for _, s in stages], "#9467bd", "x"),
        ):
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="markers",
                    name=_name(f, what, many),
                    legendgroup=f.label,
                    marker={"size": 10, "symbol": symbol, "color": f.colour if many else colour},
                    hovertext=hover,
                    hovertemplate="%{hovertext}<br>" + what + " %{y:.1f}<extra></extra>",
                ),
                row=1,
                col=1,
            )
        client = [s.get("service_ms", {}).get("p50") for _, s in stages]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=client,
                mode="lines+markers",
                name=_name(f, "client: service time p50", many),
                legendgroup=f.label,
                line={"color": f.colour if many else "#2ca02c", "width": 1.5},
                marker={"size": 8},
                hovertext=hover,
                hovertemplate="%{hovertext}<br>client service p50 %{y:.3g} ms<extra></extra>",
            ),
            row=2,
            col=1,
        )
        for key, label, dash, symbol in SERVER_LATENCIES:
            ys = [_server_block(s).get(key) for _, s in stages]
            if all(y is None for y in ys):
                continue
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines+markers",
                    name=_name(f, label, many),
                    legendgroup=f.label,
                    line={"color": f.colour if many else "#9467bd", "dash": dash, "width": 1.5},
                    marker={"size": 8, "symbol": symbol},
                    hovertext=hover,
                    hovertemplate="%{hovertext}<br>" + label + " %{y:.3g} ms<extra></extra>",
                ),
                row=2,
                col=1,
            )
    fig = _layout(fig, "Server-side vs client-side, per stage (steady windows; the server's own metrics)", height=560)
    fig.update_xaxes(_axis(""), dtick=1)
    fig.update_xaxes(title_text="stage (as numbered in the stage table)", row=2, col=1)
    fig.update_yaxes(_axis("requests/s"), rangemode="tozero", row=1, col=1)
    fig.update_yaxes(_log_ms_axis("latency (ms, log)"), row=2, col=1)
    return fig


PLOTS = [
    Plot("plot-throughput", "Throughput vs offered rate", throughput_vs_offered),
    Plot("plot-latency", "Latency vs offered rate", latency_vs_offered),
    Plot("plot-timeline", "Latency and throughput over time", latency_throughput_over_time),
    Plot("plot-spectrum", "Latency percentile spectrum", latency_spectrum),
    Plot("plot-send-lag", "Send lag over time", send_lag_over_time),
    Plot("plot-errors", "Errors over time", errors_over_time),
    Plot("plot-server", "Server CPU and memory over time", server_over_time, _has_server_samples),
    Plot("plot-server-vs-client", "Server-side vs client-side per stage", server_vs_client, _has_server_metrics),
]


def plots_for(folders: list[FolderData]) -> list[Plot]:
    """The plots these folders have something to draw in (the server's only when it was watched)."""
    return [p for p in PLOTS if p.show(folders)]
