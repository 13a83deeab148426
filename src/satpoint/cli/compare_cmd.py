"""``satpoint compare``: options for the REST-vs-gRPC experiment (``experiments.compare``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from satpoint.api import default_out, split_cpus
from satpoint.cli.common import (
    BinaryDataOpt,
    CaCertOpt,
    ClientCertOpt,
    ClientKeyOpt,
    DemoModelOpt,
    GrpcRawOpt,
    HeaderOpt,
    InsecureOpt,
    ModelDirOpt,
    PayloadOpt,
    RuntimeOpt,
    ServerOpt,
    console,
    embedded_model,
    guarded,
    interruptible,
    parse_cpus,
    parse_headers,
    secrets_of,
    tls_fields,
)
from satpoint.cli.contract import URLS_HELP, OldSpelling, renamed, split_urls
from satpoint.cli.opts.gate_opts import CompareSloOpt, CompareThresholdOpt, compare_exit, gate_exprs
from satpoint.cli.opts.pacing_opts import RealtimeOpt, WakeWindowOpt, pacing
from satpoint.cli.opts.stream_opts import StreamOpt
from satpoint.cli.tool_modes import refuse_for_compare
from satpoint.config import FindOptions, LoadOptions
from satpoint.experiments.compare import COMPARE_FILE, CompareConfig, run_compare
from satpoint.reports.terminal.compare import print_compare
from satpoint.reports.terminal.progress import EventPrinter


def compare(
    ctx: typer.Context,
    url: Annotated[
        list[str] | None, typer.Option("--url", "-u", help=URLS_HELP + " (none: the embedded server, --server)")
    ] = None,
    server: ServerOpt = "mlserver",
    grpc_url: Annotated[str | None, OldSpelling("--grpc-url")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="model name (with --url)")] = None,
    protocols: Annotated[str, typer.Option(help="comma-separated: rest,grpc")] = "rest,grpc",
    precision: Annotated[float, typer.Option(help="search precision")] = 0.05,
    budget_s: Annotated[
        float | None,
        typer.Option("--search-budget", help="time cap of one search (each protocol's), seconds (default 240)"),
    ] = None,
    old_budget_s: Annotated[float | None, OldSpelling("--budget-s")] = None,
    header: HeaderOpt = None,
    payload: PayloadOpt = None,
    grpc_raw: GrpcRawOpt = False,
    binary_data: BinaryDataOpt = False,
    workers: Annotated[int, typer.Option(help="embedded MLServer parallel_workers")] = 1,
    demo_model: DemoModelOpt = None,
    runtime: RuntimeOpt = None,
    model_dir: ModelDirOpt = None,
    server_cpus: Annotated[str | None, typer.Option(help="CPUs for the embedded server")] = None,
    generator_cpus: Annotated[str | None, typer.Option(help="CPUs for the generator")] = None,
    ramp: Annotated[float, typer.Option(help="ramp of every stage, seconds")] = 2.0,
    min_hold: Annotated[float, typer.Option(help="shortest hold, seconds")] = 6.0,
    max_hold: Annotated[float, typer.Option(help="longest hold, seconds")] = 15.0,
    min_requests: Annotated[int, typer.Option(help="aim for this many requests per hold")] = 2000,
    out: Annotated[Path | None, typer.Option(help="results folder (default results/compare-TIMESTAMP)")] = None,
    ca_cert: CaCertOpt = None,
    insecure: InsecureOpt = False,
    client_cert: ClientCertOpt = None,
    client_key: ClientKeyOpt = None,
    stream: StreamOpt = False,
    wake_window_ms: WakeWindowOpt = 0.0,
    realtime: RealtimeOpt = 0,
    threshold: CompareThresholdOpt = None,
    slo: CompareSloOpt = None,
) -> None:
    """Run the saturation search per protocol on one server and print them side by side."""
    secrets = secrets_of([*(url or ()), grpc_url], parse_headers(header))
    rest_url, grpc_url = split_urls(url, grpc_url)

    def body() -> int:
        protos = {p.strip() for p in protocols.split(",")}
        refuse_for_compare(ctx, bool(url), server, protos)  # exit 2, before any load (-u: a URL server)
        search_budget = renamed(budget_s, old_budget_s, "--search-budget", "--budget-s", warn=False)
        exprs = gate_exprs(threshold, slo)  # a bad expression: exit 2, before any load
        served = embedded_model(rest_url if rest_url is not None else grpc_url, demo_model, runtime, model_dir)
        s_cpus, g_cpus = split_cpus() if rest_url is None else (None, None)
        cfg = CompareConfig(
            protocols=tuple(p.strip() for p in protocols.split(",") if p.strip()),
            url=rest_url,
            grpc_url=grpc_url,
            model=model,
            headers=parse_headers(header),
            payload_file=payload,
            grpc_raw=grpc_raw,
            binary_data=binary_data,
            stream=stream,
            server=server,
            **tls_fields(ca_cert, insecure, client_cert, client_key),
            workers=workers,
            **served,
            server_cpus=parse_cpus(server_cpus) if server_cpus else s_cpus,
            load=LoadOptions(
                drain_s=5.0, generator_cpus=parse_cpus(generator_cpus) or g_cpus, **pacing(wake_window_ms, realtime)
            ),
            find=FindOptions(
                precision=precision,
                budget_s=240.0 if search_budget is None else search_budget,
                budget_given=False,
                ramp_s=ramp,
                min_hold_s=min_hold,
                max_hold_s=max_hold,
                min_requests=min_requests,
                profile=False,
            ),
        ).validate()
        out_dir = out or default_out("compare")
        with interruptible() as stop, EventPrinter(console, secrets) as printer:
            outcome = run_compare(cfg, out_dir, stop=stop, on_event=printer)
        print_compare(console, outcome.doc)
        console.print(f"results: {out_dir} ({COMPARE_FILE}, report.html)")
        return compare_exit(outcome.dirs, exprs, outcome.interrupted)

    guarded(body, secrets)
