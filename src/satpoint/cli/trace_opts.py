"""``run --trace``'s options (the replay itself: ``satpoint.trace_replay``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

TraceOpt = Annotated[Path | None, typer.Option("--trace", help="replay this trace's arrival times (CSV or JSONL)")]
TraceFormatOpt = Annotated[str | None, typer.Option(help="csv, jsonl, envoy, envoy-json, prom (default: by name)")]
TraceTimeColumnOpt = Annotated[str, typer.Option(help="--trace: the timestamp column (epoch s, ms, us or ISO 8601)")]
SpeedOpt = Annotated[float, typer.Option(help="--trace: replay X times as fast (2: twice the trace's rate)")]
TraceWindowOpt = Annotated[str | None, typer.Option(help="--trace: replay START..END only (2m..12m, or ISO times)")]
TracePeakOpt = Annotated[str | None, typer.Option(help="--trace: replay the busiest window this long (10m), printed")]
TraceStageOpt = Annotated[float, typer.Option(help="--trace: seconds of trace per judged stage")]
StartSpeedOpt = Annotated[float, typer.Option(help="find --trace: the first speed factor tried")]
ServerSlotsOpt = Annotated[int | None, typer.Option(help="--trace: the server's concurrency for the queue prediction")]
