"""``satpoint demo``: demonstrations that need nothing but satpoint itself (``experiments.co_demo``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from satpoint.api import default_out
from satpoint.cli.common import EXIT_INTERRUPTED, EXIT_OK, console, guarded, interruptible
from satpoint.cli.contract import EXIT_CODES_HELP
from satpoint.cli.opts.help_opts import PanelledGroup
from satpoint.experiments.co_demo import COMPARISON_FILE, CoDemoConfig, run_co_demo
from satpoint.reports.terminal.co_demo import print_co_demo
from satpoint.reports.terminal.progress import EventPrinter

demo_app = typer.Typer(cls=PanelledGroup, no_args_is_help=True, help="Demonstrations on a built-in synthetic server.")


@demo_app.command("co", epilog=EXIT_CODES_HELP)
def co(
    rate: Annotated[float, typer.Option(help="open-loop rate, rps (well below the server's capacity)")] = 200.0,
    duration: Annotated[float, typer.Option(help="seconds per run")] = 22.0,
    users: Annotated[int, typer.Option(help="closed-loop users")] = 2,
    think_ms: Annotated[
        float | None, typer.Option("--think", help="closed-loop think time, ms (default: chosen to reach --rate)")
    ] = None,
    slots: Annotated[int, typer.Option(help="server slots")] = 200,
    service_ms: Annotated[float, typer.Option("--service", help="server service time, ms")] = 5.0,
    pause_every: Annotated[float, typer.Option(help="the server freezes every this many seconds")] = 4.0,
    pause_s: Annotated[float, typer.Option("--pause", help="... for this long, seconds")] = 1.0,
    out: Annotated[Path | None, typer.Option(help="output folder (default results/co-demo-TIMESTAMP)")] = None,
    html: Annotated[bool, typer.Option(help="write report.html")] = True,
) -> None:
    """Coordinated omission: open loop vs closed loop against a server that freezes now and then."""

    def body() -> int:
        cfg = CoDemoConfig(rate, duration, users, think_ms, slots, service_ms, pause_every, pause_s, html).validate()
        out_dir = out or default_out("co-demo")
        with interruptible() as stop, EventPrinter(console) as printer:
            outcome = run_co_demo(cfg, out_dir, stop=stop, on_event=printer)
        if outcome.interrupted or not outcome.comparison:
            console.print(f"interrupted; results so far in {out_dir}")
            return EXIT_INTERRUPTED
        print_co_demo(console, outcome.comparison, str(out_dir / COMPARISON_FILE))
        return EXIT_OK

    guarded(body)
