"""``satpoint coldstart``'s options (the measurement itself: ``satpoint.experiments.coldstart``)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

ColdUrlOpt = Annotated[str | None, typer.Option("--url", "-u", help="server base URL (default: an embedded server)")]
ColdModelOpt = Annotated[list[str] | None, typer.Option("--model", "-m", help="a model to measure (repeatable)")]
RepeatsOpt = Annotated[int, typer.Option(help="unload/load rounds per model")]
DuringRpsOpt = Annotated[float, typer.Option(help="open-loop rate sent at a model while it loads (0: none)")]
WarmOpt = Annotated[int, typer.Option(help="warm inferences after the first, the reference")]
CallTimeoutOpt = Annotated[float, typer.Option(help="seconds a load or unload may take")]
DemoModelsOpt = Annotated[int, typer.Option(help="the embedded server's demo models (>= 2)")]
DemoModelOpt = Annotated[str, typer.Option(help="the embedded server's demo model (copied --demo-models times)")]
ColdServerOpt = Annotated[
    Literal["mlserver", "triton"], typer.Option(help="the embedded server: mlserver or triton (explicit model control)")
]
ResidentOpt = Annotated[str | None, typer.Option(help="overcommit runs with at most K models resident: K[,K...]")]
MixOpt = Annotated[str, typer.Option(help="overcommit: the mix's weights, uniform or zipf:S")]
OcRateOpt = Annotated[float, typer.Option("--rate", help="overcommit: constant rate of each run, rps")]
OcDurationOpt = Annotated[float, typer.Option("--duration", help="overcommit: seconds of each run")]
SloP99Opt = Annotated[float | None, typer.Option("--slo-p99-ms", help="--slo 'p99<N ms', in ms")]
SloOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--slo", help="overcommit: a p99 objective, e.g. 'p99<100ms': the smallest K meeting it (none: exit 3)"
    ),
]
