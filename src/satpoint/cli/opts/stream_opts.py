"""``--stream``'s options: streamed inference (``infer_stream``, ``ModelStreamInfer``) and the sim's streams."""

from __future__ import annotations

from typing import Annotated, Any

import typer

StreamOpt = Annotated[
    bool,
    typer.Option(
        "--stream",
        help="stream each answer (REST infer_stream events, gRPC ModelStreamInfer): time to first chunk, gaps "
        "between chunks, chunks/s; --slo/--threshold take ttfc_p50/p99 and gap_p50/p99",
    ),
]
SimStreamOpt = Annotated[bool, typer.Option("--stream", help="announce the capacity for streamed answers")]
StreamFirstMsOpt = Annotated[
    float, typer.Option("--stream-first", help="streams: the first chunk this many ms after service starts")
]
StreamGapMsOpt = Annotated[float, typer.Option("--stream-gap", help="streams: then one chunk every this many ms")]
StreamChunksOpt = Annotated[int, typer.Option(help="streams: chunks per answer (the slot is held until the last)")]


def sim_stream_fields(stream: bool, first_ms: float, gap_ms: float, chunks: int) -> dict[str, Any]:
    """The sim configuration's stream fields (``SimConfig``)."""
    return {"stream": stream, "stream_first_ms": first_ms, "stream_gap_ms": gap_ms, "stream_chunks": chunks}
