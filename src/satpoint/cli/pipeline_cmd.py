"""``satpoint pipeline``: ``find`` for a pipeline of models: each step's model alone, then the whole pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from satpoint.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_NO_ANSWER,
    EXIT_OK,
    HeaderOpt,
    HtmlOpt,
    TimeoutOpt,
    UrlProtocolOpt,
    console,
    guarded,
    interruptible,
    parse_headers,
    secrets_of,
)
from satpoint.cli.contract import OldSpelling, renamed
from satpoint.config import FindOptions, LoadOptions
from satpoint.endpoints.spec import resolve_protocol
from satpoint.errors import ConfigError
from satpoint.pipeline.find import PIPELINE_FILE, find_pipeline
from satpoint.pipeline.specs import dag_from_options
from satpoint.reports.terminal.pipeline import print_pipeline
from satpoint.reports.terminal.progress import EventPrinter


def pipeline(
    spec: Annotated[
        Path | None,
        typer.Argument(
            help="the pipeline: a Seldon Core 2 Pipeline (YAML) or a Triton ensemble's config.pbtxt (or the JSON "
            "GET /v2/models/E/config answers); or --step models instead"
        ),
    ] = None,
    url: Annotated[str | None, typer.Option("--url", "-u", help="the server that serves the pipeline")] = None,
    step: Annotated[
        list[str] | None, typer.Option(help="a chain of models instead of a spec: --step A --step B (in order)")
    ] = None,
    pipeline_model: Annotated[
        str | None,
        typer.Option(help="the name the whole pipeline is called by (default: NAME.pipeline for Seldon, the ensemble)"),
    ] = None,
    seldon_model: Annotated[
        bool | None,
        typer.Option(help="send Seldon-Model: MODEL with each call (default: for a Seldon Pipeline)"),
    ] = None,
    protocol: UrlProtocolOpt = None,
    header: HeaderOpt = None,
    timeout: TimeoutOpt = 30.0,
    precision: Annotated[float, typer.Option(help="each search stops when its bracket is within this fraction")] = 0.05,
    budget_s: Annotated[
        float | None,
        typer.Option("--search-budget", help="time cap of each search (steps and pipeline), seconds (default 270)"),
    ] = None,
    old_budget_s: Annotated[float | None, OldSpelling("--budget-s")] = None,
    margin: Annotated[float, typer.Option(help="margin under saturation for the sizing")] = 0.15,
    peak_rps: Annotated[
        float | None, typer.Option(help="the pipeline's rate to size every step for (default: its fastest step's)")
    ] = None,
    ramp: Annotated[float, typer.Option(help="ramp of every stage, seconds")] = 2.0,
    min_hold: Annotated[float, typer.Option(help="shortest hold, seconds")] = 6.0,
    max_hold: Annotated[float, typer.Option(help="longest hold, seconds")] = 15.0,
    min_requests: Annotated[int, typer.Option(help="aim for this many requests per hold")] = 2000,
    cooldown: Annotated[float, typer.Option(help="rest between stages, s")] = 2.0,
    profile: Annotated[bool, typer.Option(help="latency at 50/80/90/100 % (the critical path needs it)")] = True,
    out: Annotated[Path | None, typer.Option(help="results folder (default results/find-TIMESTAMP)")] = None,
    html: HtmlOpt = True,
) -> None:
    """Find a pipeline's saturation point step by step: each step's model searched alone, then the pipeline end to
    end; the prediction from the steps (the least step capacity: every request visits every step, each branch of
    a fan-out carries the full rate), the bottleneck, the critical path and replicas per step."""
    secrets = secrets_of([url], parse_headers(header))

    def body() -> int:
        search_budget = renamed(budget_s, old_budget_s, "--search-budget", "--budget-s", warn=False)
        dag = dag_from_options(spec, step or [], pipeline_model)
        if url is None:
            raise ConfigError("satpoint pipeline needs --url (a server that serves the pipeline and its steps)")
        opts = FindOptions(
            precision=precision, budget_s=270.0 if search_budget is None else search_budget,
            budget_given=True, ramp_s=ramp, min_hold_s=min_hold,
            max_hold_s=max_hold, min_requests=min_requests, cooldown_s=cooldown, profile=profile, margin=margin,
            peak_rps=peak_rps,
        )  # fmt: skip
        load = LoadOptions(timeout_s=timeout, drain_s=min(5.0, timeout))
        with interruptible() as stop, EventPrinter(console, secrets) as printer:
            found = find_pipeline(
                url, dag, pipeline_model=pipeline_model, protocol=resolve_protocol(url, protocol),
                seldon_headers=seldon_model, target_options={"headers": parse_headers(header)}, options=opts,
                load=load, out=out, html=html, on_event=printer, stop=stop,
            )  # fmt: skip
        print_pipeline(console, found.block)
        console.print(f"results: {found.out_dir} (summary.json: pipeline; {PIPELINE_FILE}; steps/MODEL)")
        if stop.is_set():
            return EXIT_INTERRUPTED
        return EXIT_OK if found.block.get("saturation_rps") is not None else EXIT_NO_ANSWER

    guarded(body, secrets)
