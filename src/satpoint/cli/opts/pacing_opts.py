"""How the generator keeps its schedule: the wake-up window and real-time scheduling (``LoadOptions``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

WakeWindowOpt = Annotated[
    float,
    typer.Option(
        "--wake-window",
        min=0.0,
        help="one wake-up sends every request due within this many ms (the first leaves up to this late, its lag "
        "recorded): fewer wake-ups per request, about half the generator's CPU at 1 ms; 0: each on time",
    ),
]
RealtimeOpt = Annotated[
    int,
    typer.Option(
        "--realtime",
        min=0,
        max=99,
        help="run the generator's event loop at SCHED_FIFO this priority (1-99), so a process sharing its core "
        "cannot delay a due request by a scheduler slice; needs CAP_SYS_NICE or ulimit -r; 0: off",
    ),
]


def pacing(wake_window_ms: float, realtime: int) -> dict[str, Any]:
    """``LoadOptions`` fields of the pacing options."""
    return {"wake_window_ms": wake_window_ms, "realtime_priority": realtime}
