"""The HTML report's section for streamed answers (``--stream``).

Per folder whose stages carry stream figures (``summary.json`` ``stages[].stream``): time to first chunk
(TTFC, from the intended send time) and gaps between chunks (p50 and p99) against the offered rate, chunks
per second against the offered rate, a per-stage table, and a timeline sample of single requests (intended
send, first chunk, every chunk, last chunk) taken evenly over the folder's streams.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from satpoint.reports.html.data import FolderData
from satpoint.reports.html.plots import _axis, _layout, _log_ms_axis
from satpoint.reports.html.tables import esc

#: requests drawn in the timeline sample (evenly over the folder's OK streams, in due order)
TIMELINE_ROWS = 24


def stream_stages(f: FolderData) -> list[dict[str, Any]]:
    """The folder's stages that carry stream figures, by offered rate."""
    return sorted((s for s in f.summary.get("stages") or [] if s.get("stream")), key=lambda s: s["offered_rps"])


def has_stream(f: FolderData) -> bool:
    return bool(stream_stages(f))


def percentile_plot(folders: list[FolderData], title: str) -> go.Figure:
    """TTFC and gap p50/p99 against the offered rate, one group of lines per folder."""
    fig = go.Figure()
    for f in folders:
        stages = stream_stages(f)
        x = [s["offered_rps"] for s in stages]
        for key, name, dash in (("ttfc_ms", "TTFC", "solid"), ("gap_ms", "gap", "dot")):
            for pct, width in (("p50", 1.5), ("p99", 2.5)):
                y = [(s["stream"].get(key) or {}).get(pct) for s in stages]
                fig.add_trace(
                    go.Scatter(
                        x=x, y=y, mode="lines+markers", name=f"{name} {pct}", legendgroup=f.label,
                        legendgrouptitle_text=f.label if len(folders) > 1 else None,
                        line={"color": f.colour, "dash": dash, "width": width},
                    )
                )  # fmt: skip
    _layout(fig, title)
    fig.update_layout(xaxis=_axis("offered rate (requests/s)"), yaxis=_log_ms_axis("ms"))
    return fig


def chunks_plot(folders: list[FolderData], title: str) -> go.Figure:
    """Chunks per second (and streams per second) of OK streams against the offered rate."""
    fig = go.Figure()
    for f in folders:
        stages = stream_stages(f)
        x = [s["offered_rps"] for s in stages]
        fig.add_trace(
            go.Scatter(
                x=x, y=[s["stream"].get("chunks_per_s") for s in stages], mode="lines+markers",
                name=f"{f.label} chunks/s" if len(folders) > 1 else "chunks/s", line={"color": f.colour},
            )
        )  # fmt: skip
    _layout(fig, title)
    fig.update_layout(xaxis=_axis("offered rate (requests/s)"), yaxis=_axis("chunks per second"))
    return fig


def timeline_rows(f: FolderData, rows: int = TIMELINE_ROWS) -> list[tuple[float, list[float], float]]:
    """Up to ``rows`` OK streams taken evenly over the folder's segments: (due time s, chunk times after the
    intended send in ms, end after the intended send in ms)."""
    picked: list[tuple[float, list[float], float]] = []
    segs = [seg for seg in f.results.segments if seg.records.stream is not None]
    candidates = [(seg, int(i)) for seg in segs for i in np.flatnonzero(seg.records.ok_mask())]
    if not candidates:
        return picked
    for k in np.linspace(0, len(candidates) - 1, min(rows, len(candidates))).round().astype(int):
        seg, i = candidates[int(k)]
        rec, s = seg.records, seg.records.stream
        assert s is not None
        start = float(rec.intended[i])
        first = float(s.first_s[i])
        chunks = [first] if np.isfinite(first) else []
        if chunks:
            chunks += (first + np.cumsum(s.row_gaps(i).astype(np.float64) / 1e6)).tolist()
        picked.append(
            (start + f.offsets.get(seg.index, 0.0), [(c - start) * 1e3 for c in chunks], (rec.done[i] - start) * 1e3)
        )
    return picked


def timeline_plot(f: FolderData, title: str) -> go.Figure:
    """One line per sampled request from its intended send to its end, a marker at every chunk."""
    fig = go.Figure()
    for n, (due, chunks, end) in enumerate(timeline_rows(f)):
        label = f"due {due:.2f} s"
        fig.add_trace(
            go.Scatter(x=[0.0, end], y=[label, label], mode="lines", line={"color": "#9aa0a6"}, showlegend=False)
        )
        fig.add_trace(
            go.Scatter(
                x=chunks, y=[label] * len(chunks), mode="markers", marker={"color": f.colour, "size": 6},
                name="chunk", showlegend=n == 0, hovertemplate="%{x:.2f} ms<extra></extra>",
            )
        )  # fmt: skip
    _layout(fig, title, height=max(300, 22 * TIMELINE_ROWS))
    fig.update_layout(
        xaxis=_axis("ms after the intended send"),
        yaxis=_axis("", autorange="reversed"),
        margin={"l": 95, "r": 20, "t": 60, "b": 55},
    )
    return fig


def _ms(v: Any) -> str:
    return "-" if v is None else f"{float(v):.2f}"


def stream_table(f: FolderData) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("stage", "offered /s", "TTFC p50", "TTFC p99", "gap p50", "gap p99", "chunks/s", "streams/s",
                  "chunks/stream", "verdict")
    )  # fmt: skip
    body = []
    for s in f.summary.get("stages") or []:
        st = s.get("stream")
        if not st:
            continue
        ttfc, gap = st.get("ttfc_ms") or {}, st.get("gap_ms") or {}
        cells = [
            str(s.get("index", 0) + 1), f"{s['offered_rps']:.1f}", _ms(ttfc.get("p50")), _ms(ttfc.get("p99")),
            _ms(gap.get("p50")), _ms(gap.get("p99")), _ms(st.get("chunks_per_s")), _ms(st.get("requests_per_s")),
            _ms(st.get("chunks_per_request")), esc(str(s.get("verdict"))),
        ]  # fmt: skip
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def stream_section(folders: list[FolderData]) -> list[str]:
    """The ``<h2 id="stream">`` section (empty when no folder streamed)."""
    from satpoint.reports.html.embed import figure_html  # the page's plot embedding (html imports this module)

    shown = [f for f in folders if has_stream(f)]
    if not shown:
        return []
    out = [
        '<h2 id="stream">Streams</h2>',
        '<p class="muted">TTFC = first chunk − intended send time (coordinated-omission free); gap = time between '
        "consecutive chunks of one stream; chunks/s and streams/s count OK streams that ended in the steady "
        "window; latency in the tables above is the end of the stream.</p>",
    ]
    pct = percentile_plot(shown, "TTFC and gaps against offered rate")
    chunks = chunks_plot(shown, "chunks per second against offered rate")
    for fig, key in ((pct, "stream-pct"), (chunks, "stream-chunks")):
        out.append(f'<div class="plot">{figure_html(fig, key)}</div>')
    for n, f in enumerate(shown):
        label = f"{f.label} · " if len(folders) > 1 else ""
        out.append(f'<div class="scroll">{stream_table(f)}</div>')
        fig = timeline_plot(f, f"{label}a sample of requests: intended send (0), every chunk, the end")
        out.append(f'<div class="plot">{figure_html(fig, f"stream-timeline-{n}")}</div>')
    return out
