"""The terminal's stream lines (``--stream``): one per stage, time to first chunk, gaps and chunk rate."""

from __future__ import annotations

from typing import Any

from rich.console import Console


def _ms(v: Any) -> str:
    if v is None:
        return "-"
    return f"{float(v):.1f}" if float(v) >= 10 else f"{float(v):.2f}"


def stream_line(index: int, stage: dict[str, Any]) -> str | None:
    """``stream stage N: TTFC p50 … p99 … ms · gap p50 … p99 … ms · … chunks/s · … streams/s`` (None: no
    stream figures)."""
    st = stage.get("stream")
    if not st:
        return None
    ttfc, gap = st.get("ttfc_ms") or {}, st.get("gap_ms") or {}
    rate = st.get("chunks_per_s")
    reqs = st.get("requests_per_s")
    per = st.get("chunks_per_request")
    return (
        f"stream stage {index}: TTFC p50 {_ms(ttfc.get('p50'))} p99 {_ms(ttfc.get('p99'))} ms · "
        f"gap p50 {_ms(gap.get('p50'))} p99 {_ms(gap.get('p99'))} ms · "
        f"{'-' if rate is None else f'{rate:.1f}'} chunks/s · {'-' if reqs is None else f'{reqs:.1f}'} streams/s"
        + ("" if per is None else f" · {per:.1f} chunks/stream")
        + _coalesced(st.get("coalesced_share"))
    )


def _coalesced(share: Any) -> str:
    """`` · N % of gaps read together`` when chunks shared a read (their gap is the read's, not the server's)."""
    if not share:
        return ""
    return f" · {100 * float(share):.0f} % of gaps read together (late reads or chunks sent together)"


def print_stream(console: Console, summary: dict[str, Any]) -> None:
    """Print the stream line of every stage that streamed (nothing for a run without streams)."""
    lines = [stream_line(i, s) for i, s in enumerate(summary.get("stages") or [], start=1)]
    shown = [x for x in lines if x is not None]
    if shown:
        console.print("TTFC = first chunk − intended send time; gap = between consecutive chunks of a stream")
    for line in shown:
        console.print(line, highlight=False)
