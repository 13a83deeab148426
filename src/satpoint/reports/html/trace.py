"""The HTML report's section for a replayed trace (``run --trace``).

Per folder that replayed a trace: the trace's arrivals per second against what was sent and answered,
latency over time with the trace's bursts marked (seconds whose arrivals reach ``BURST_FACTOR`` times the
median of the ``BURST_CONTEXT_S`` seconds around them), measured against a simple queue's prediction per
stage (``summary.json``'s ``trace.prediction``) as a plot and a table, and, when the folder is one replay
of a ``find --trace`` (its ``headroom.json`` beside or above it), the worst stage's p99 against the speed
factor of every replay of the search.  Built from the folder's records, aggregated per time bucket.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from satpoint.metrics.results import Segment
from satpoint.plan import TRACE_ARRIVAL
from satpoint.reports.html.data import FolderData
from satpoint.reports.html.plots import _axis, _layout, _log_ms_axis, _vrect
from satpoint.reports.html.tables import esc

#: a second whose trace arrivals reach this multiple of the surrounding median is part of a burst
BURST_FACTOR = 1.5
#: the surrounding window (seconds of run) whose median a burst is compared with
BURST_CONTEXT_S = 31
#: at most this many buckets per plot (wider buckets for long replays)
MAX_BUCKETS = 1500


@dataclass
class TraceSeries:
    """Per bucket of run time: the trace's arrivals, sends and answers per second, latency p50/p99 (ms)."""

    width_s: float
    t: list[float] = field(default_factory=list)
    due: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)
    p50: list[float | None] = field(default_factory=list)
    p99: list[float | None] = field(default_factory=list)
    bursts: list[tuple[float, float]] = field(default_factory=list)  # (start, end) s of run


def trace_segment(f: FolderData) -> Segment | None:
    return next((s for s in f.results.segments if s.arrival == TRACE_ARRIVAL), None)


def has_trace(f: FolderData) -> bool:
    return bool(f.summary.get("trace")) and trace_segment(f) is not None


def bursts(due: np.ndarray[Any, np.dtype[np.float64]], width: float) -> list[tuple[float, float]]:
    """Runs of buckets whose arrivals reach ``BURST_FACTOR`` x the median of the buckets around them."""
    n = len(due)
    if not n:
        return []
    half = max(1, round(BURST_CONTEXT_S / width) // 2)
    padded = np.pad(due, half, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1)
    med = np.median(windows, axis=1)
    hot = (due >= BURST_FACTOR * med) & (due > 0)
    out: list[tuple[float, float]] = []
    k = 0
    while k < n:
        if hot[k]:
            j = k
            while j + 1 < n and hot[j + 1]:
                j += 1
            out.append((k * width, (j + 1) * width))
            k = j + 1
        else:
            k += 1
    return out


def trace_series(seg: Segment, max_buckets: int = MAX_BUCKETS) -> TraceSeries:
    rec = seg.records
    end = float(np.nanmax(np.concatenate([rec.intended, rec.done[np.isfinite(rec.done)]]))) if len(rec) else 0.0
    width = float(max(1, math.ceil(end / max_buckets)))
    n_b = max(1, math.floor(end / width) + 1)
    edges = np.arange(n_b + 1, dtype=np.float64) * width

    def per_s(times: np.ndarray[Any, np.dtype[np.float64]]) -> np.ndarray[Any, np.dtype[np.float64]]:
        counts: np.ndarray[Any, np.dtype[np.float64]] = np.diff(np.searchsorted(np.sort(times), edges)) / width
        return counts

    due = per_s(rec.intended)
    out = TraceSeries(width_s=width)
    out.t = [round(float(x), 3) for x in (edges[:-1] + width / 2)]
    out.due = [round(float(x), 2) for x in due]
    out.sent = [round(float(x), 2) for x in per_s(rec.sent[np.isfinite(rec.sent)])]
    out.answered = [round(float(x), 2) for x in per_s(rec.done[rec.ok_mask()])]
    lat = rec.latency_s()
    keep = rec.latency_mask() & np.isfinite(lat)
    idx = np.searchsorted(rec.intended, edges)
    for b in range(n_b):
        sl = slice(int(idx[b]), int(idx[b + 1]))
        part = lat[sl][keep[sl]]
        if len(part):
            p50, p99 = np.percentile(part, [50, 99]) * 1e3
            out.p50.append(round(float(p50), 3))
            out.p99.append(round(float(p99), 3))
        else:
            out.p50.append(None)
            out.p99.append(None)
    out.bursts = bursts(due, width)
    return out


def arrivals_plot(s: TraceSeries, title: str) -> go.Figure:
    fig = go.Figure()
    per = "per second" if s.width_s == 1 else f"per second ({s.width_s:g} s buckets)"
    for name, ys, colour, dash in (
        ("trace (due)", s.due, "#7f7f7f", "solid"),
        ("sent", s.sent, "#1f77b4", "dot"),
        ("answered OK", s.answered, "#2ca02c", "dash"),
    ):
        fig.add_trace(go.Scatter(x=s.t, y=ys, name=name, mode="lines", line={"color": colour, "dash": dash}))
    fig.update_layout(shapes=[_vrect(a, b, "#d62728", 0.08) for a, b in s.bursts])
    return _layout(fig, title, xaxis=_axis("run time (s)"), yaxis=_axis(f"requests {per}"))


def latency_plot(s: TraceSeries, title: str) -> go.Figure:
    fig = go.Figure()
    for name, ys, colour in (("p50", s.p50, "#1f77b4"), ("p99", s.p99, "#ff7f0e")):
        fig.add_trace(go.Scatter(x=s.t, y=ys, name=f"latency {name}", mode="lines", line={"color": colour}))
    if s.bursts:  # a legend entry for the shaded bursts
        fig.add_trace(
            go.Scatter(
                x=[None], y=[None], mode="markers", name=f"burst (≥ {BURST_FACTOR:g}× the trace's local rate)",
                marker={"symbol": "square", "size": 12, "color": "rgba(214,39,40,0.25)"},
            )
        )  # fmt: skip
    fig.update_layout(shapes=[_vrect(a, b, "#d62728", 0.12) for a, b in s.bursts])
    return _layout(fig, title, xaxis=_axis("run time (s)"), yaxis=_log_ms_axis("latency (ms, from the trace's time)"))


def prediction_plot(pred: dict[str, Any], title: str) -> go.Figure:
    fig = go.Figure()
    rows = pred.get("stages") or []
    x = [r["stage"] + 1 for r in rows]
    for q, colour in (("p50", "#1f77b4"), ("p99", "#ff7f0e")):
        fig.add_trace(
            go.Scatter(
                x=x, y=[r["measured_ms"][q] for r in rows], name=f"{q} measured", mode="lines+markers",
                line={"color": colour}, text=[r["text"] for r in rows],
                hovertemplate="stage %{x}: %{y:.2f} ms<br>%{text}<extra></extra>",
            )
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=x, y=[r["predicted_ms"][q] for r in rows], name=f"{q} predicted (simple queue)",
                mode="lines+markers", line={"color": colour, "dash": "dash"}, marker={"symbol": "circle-open"},
            )
        )  # fmt: skip
    return _layout(fig, title, xaxis=_axis("stage", dtick=1), yaxis=_log_ms_axis("latency (ms)"))


def headroom_of(path: Path) -> dict[str, Any] | None:
    """The ``find --trace`` search this folder was a replay of (``headroom.json`` in it or its parent)."""
    for d in (path, path.parent):
        p = d / "headroom.json"
        if p.is_file():
            try:
                doc = json.loads(p.read_text())
            except (OSError, ValueError):
                return None
            return doc if isinstance(doc, dict) else None
    return None


def speed_plot(head: dict[str, Any], title: str) -> go.Figure:
    reps = [r for r in head.get("replays") or [] if r.get("p99_ms_worst_stage") is not None]
    reps.sort(key=lambda r: r["speed"])
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[r["speed"] for r in reps], y=[r["p99_ms_worst_stage"] for r in reps], mode="markers+lines",
            name="worst stage p99", text=[f"{r['phase']}: {r['verdict']}" for r in reps],
            marker={"color": ["#2ca02c" if r["verdict"] == "stable" else "#d62728" for r in reps], "size": 9},
            line={"color": "#9aa0a6"}, hovertemplate="speed %{x:g}: p99 %{y:.1f} ms<br>%{text}<extra></extra>",
        )
    )  # fmt: skip
    if head.get("speed"):
        fig.add_vline(x=head["speed"], line={"color": "#2ca02c", "dash": "dash"}, annotation_text="headroom")
    return _layout(fig, title, xaxis=_axis("speed factor X"), yaxis=_log_ms_axis("p99 of the worst stage (ms)"))


def prediction_table(pred: dict[str, Any]) -> str:
    head = "".join(
        f"<th>{h}</th>" for h in ("stage", "p50 measured", "p50 predicted", "p99 measured", "p99 predicted", "verdict")
    )
    body = []
    for r in pred.get("stages") or []:
        m, p = r["measured_ms"], r["predicted_ms"]
        cells = [str(r["stage"] + 1)] + [_ms(v) for v in (m["p50"], p["p50"], m["p99"], p["p99"])]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + f"<td>{esc(r['text'])}</td></tr>")
    return f'<table class="stages"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _ms(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, (int, float)) else "–"


def queue_note(pred: dict[str, Any]) -> str:
    how = {"given": "given (--server-slots)", "busy_throughput": "estimated from the busy throughput"}.get(
        pred.get("slots_source", ""), "estimated: the most requests seen in service at once"
    )
    svc = pred.get("service_ms") or {}
    return (
        f'<p class="muted">The simple queue: the replay\'s own intended times through {pred.get("slots")} FIFO '
        f"slots ({esc(how)}), service times drawn from {pred.get('service_samples')} requests "
        f"({esc(str(pred.get('service_source')))}: p50 {_ms(svc.get('p50'))} ms, mean {_ms(svc.get('mean'))} ms), "
        f"of which {_ms(pred.get('overhead_ms'))} ms outside the slots. Where measured agrees, the server "
        "behaves as a simple queue; where measured is much worse, something else (GC, batching, contention) "
        "is at work.</p>"
    )


def trace_section(folders: list[FolderData]) -> list[str]:
    """The ``<h2 id="trace">`` section (empty when no folder replayed a trace)."""
    from satpoint.reports.html.embed import figure_html  # the page's plot embedding (html imports this module)

    shown = [f for f in folders if has_trace(f)]
    if not shown:
        return []
    out = ['<h2 id="trace">Replayed trace</h2>']
    many = len(folders) > 1
    for n, f in enumerate(shown):
        seg = trace_segment(f)
        assert seg is not None
        tr = f.summary["trace"]
        label = f"{f.label} · " if many else ""
        out.append(
            f'<p>{esc(label)}trace <span class="path">{esc(str(tr.get("path")))}</span> · speed '
            f"{tr.get('speed')} · slice {esc(str(tr.get('window_start')))} .. {esc(str(tr.get('window_end')))} · "
            f"{tr.get('replayed')} requests over {tr.get('run_s')} s</p>"
        )
        s = trace_series(seg)
        plots = [
            (arrivals_plot(s, f"{label}the trace's arrivals against what was sent (bursts shaded)"), "arrivals"),
            (latency_plot(s, f"{label}latency over time, the trace's bursts marked"), "latency"),
        ]
        pred = tr.get("prediction")
        if pred:
            plots.append((prediction_plot(pred, f"{label}measured against a simple queue's prediction"), "pred"))
        head = headroom_of(f.path)
        if head is not None:
            plots.append((speed_plot(head, f"{label}p99 against the speed factor (find --trace)"), "speed"))
        for fig, key in plots:
            out.append(f'<div class="plot" data-title="{esc(key)}">{figure_html(fig, f"trace-{key}-{n}")}</div>')
        if pred:
            out.append(queue_note(pred))
            out.append(f'<div class="scroll">{prediction_table(pred)}</div>')
    return out
