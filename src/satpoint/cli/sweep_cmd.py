"""``satpoint sweep``: options for the tuning sweep (``experiments.sweep``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Literal

import typer

from satpoint.analysis.sweep.artefact_choice import DEFAULT_MAX_QUALITY_LOSS_PP, MAX_QUALITY_LOSS_HELP
from satpoint.api import default_out, split_cpus
from satpoint.cli.common import (
    EXIT_OK,
    CaCertOpt,
    ClientCertOpt,
    ClientKeyOpt,
    DemoModelOpt,
    HeaderOpt,
    InsecureOpt,
    MetricsUrlOpt,
    ModelDirOpt,
    PayloadOpt,
    RuntimeOpt,
    ServerPidOpt,
    console,
    fail,
    guarded,
    interruptible,
    parse_cpus,
    parse_headers,
    secrets_of,
)
from satpoint.cli.contract import URLS_HELP, OldSpelling, renamed, split_urls
from satpoint.cli.opts.gate_opts import SWEEP_SLO_HELP, SweepThresholdOpt, gate_exprs, sweep_exit
from satpoint.cli.opts.mix_opts import MixOpt, ModelsFromServerOpt, ModelsOpt
from satpoint.cli.opts.models_opts import DemoModelsOpt, ModelRepoOpt, ServerMemoryMbOpt
from satpoint.cli.opts.pacing_opts import RealtimeOpt, WakeWindowOpt, pacing
from satpoint.cli.opts.ray_opts import ProcsPerHostOpt, RayHostsOpt, RayOpt
from satpoint.cli.opts.stream_opts import StreamOpt
from satpoint.cli.tool_modes import refuse_for_sweep
from satpoint.config import FindOptions, LoadOptions, ray_options
from satpoint.experiments.sweep import (
    SWEEP_CSV,
    SWEEP_FILE,
    SweepConfig,
    SweepState,
    estimate,
    rewrite_sweep,
    run_sweep,
)
from satpoint.experiments.sweep_config import env_items
from satpoint.experiments.sweep_servers import BaseServer
from satpoint.redact import is_secret_name
from satpoint.reports.sweep import print_sweep
from satpoint.reports.terminal.progress import EventPrinter

_Str = Annotated[str | None, typer.Option()]


def sweep(
    ctx: typer.Context,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="KNOB=V1,V2,… (repeatable; the grid is every combination)"),
    ] = None,
    server: Annotated[
        Literal["mlserver", "triton", "sim", "remote"] | None,
        typer.Option(help="mlserver (embedded, default), triton (embedded), sim, or remote (default with --url)"),
    ] = None,
    url: Annotated[list[str] | None, typer.Option("--url", "-u", help="a remote server: " + URLS_HELP)] = None,
    grpc_url: Annotated[str | None, OldSpelling("--grpc-url")] = None,
    model: ModelsOpt = None,
    reconfigure: Annotated[
        str | None, typer.Option(help="command run per point, {knob} placeholders filled in (remote)")
    ] = None,
    ready_timeout: Annotated[float, typer.Option(help="seconds to wait for readiness after --reconfigure")] = 300.0,
    server_cores: Annotated[int | None, typer.Option(help="cores of a remote server (for rps per core)")] = None,
    server_pid: ServerPidOpt = None,
    metrics_url: MetricsUrlOpt = None,
    demo_model: DemoModelOpt = None,
    runtime: RuntimeOpt = None,
    model_dir: ModelDirOpt = None,
    demo_models: DemoModelsOpt = None,
    model_repo: ModelRepoOpt = None,
    server_memory_mb: ServerMemoryMbOpt = None,
    workers: Annotated[int, typer.Option(help="parallel_workers (sim: slots) unless swept")] = 1,
    max_batch_size: Annotated[int | None, typer.Option(help="adaptive batching size unless swept")] = None,
    max_batch_time: Annotated[float | None, typer.Option(help="adaptive batching wait (s) unless swept")] = None,
    env: Annotated[list[str] | None, typer.Option(help="NAME=VALUE for the server (repeatable)")] = None,
    service_ms: Annotated[float, typer.Option("--service", help="sim: mean service time, ms")] = 10.0,
    protocol: Annotated[Literal["rest", "grpc"], typer.Option(help="rest or grpc unless swept")] = "rest",
    batch_size: Annotated[int, typer.Option(help="rows per request unless swept")] = 1,
    header: HeaderOpt = None,
    payload: PayloadOpt = None,
    server_cpus: Annotated[str | None, typer.Option(help="CPUs of the server (default: all but the last)")] = None,
    generator_cpus: Annotated[str | None, typer.Option(help="CPUs of the generator (default: the last)")] = None,
    objective: Annotated[
        Literal["saturation", "per_core", "p99", "slo"],
        typer.Option(help="saturation, per_core, p99 (needs --at-rps) or slo"),
    ] = "saturation",
    at_rps: Annotated[float | None, typer.Option(help="compare p99 latency at this rate")] = None,
    slo: Annotated[list[str] | None, typer.Option(help=SWEEP_SLO_HELP)] = None,
    threshold: SweepThresholdOpt = None,
    repeats: Annotated[int, typer.Option(help="measurements of every point")] = 1,
    remeasure_top: Annotated[int, typer.Option(help="re-measure this many leaders to >= 2 measurements")] = 3,
    budget_s: Annotated[float | None, typer.Option("--budget", help="time cap for the whole sweep, seconds")] = None,
    old_budget_s: Annotated[float | None, OldSpelling("--budget-s")] = None,
    max_quality_loss: Annotated[float, typer.Option(help=MAX_QUALITY_LOSS_HELP)] = DEFAULT_MAX_QUALITY_LOSS_PP,
    eval_data: Annotated[
        Path | None,
        typer.Option(
            help="model folders (--model-dir, model_dir=): JSONL of inference requests, one per line, optionally "
            'with "expected": {"name": "predict", "data": [labels]}; each folder is judged on it offline'
        ),
    ] = None,
    reference_model_dir: Annotated[
        Path | None,
        typer.Option(help="with --eval-data: the model folder the others are compared with (default: the first)"),
    ] = None,
    find_budget_s: Annotated[
        float | None,
        typer.Option("--search-budget", help="time cap of one search (each measurement), seconds (default 240)"),
    ] = None,
    old_find_budget_s: Annotated[float | None, OldSpelling("--find-budget-s")] = None,
    precision: Annotated[float, typer.Option(help="search precision (find's)")] = 0.05,
    profile: Annotated[bool, typer.Option(help="latency profile at 50-100 % per measurement")] = False,
    ramp: Annotated[float, typer.Option(help="ramp of every stage, seconds")] = 2.0,
    min_hold: Annotated[float, typer.Option(help="shortest hold, seconds")] = 6.0,
    max_hold: Annotated[float, typer.Option(help="longest hold, seconds")] = 15.0,
    min_requests: Annotated[int, typer.Option(help="aim for this many requests per hold")] = 2000,
    out: Annotated[Path | None, typer.Option(help="results folder (default results/sweep-TIMESTAMP)")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(help="continue the sweep in this folder (give --header, --reconfigure and secrets again)"),
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="print the grid and the estimate, measure nothing")] = False,
    report: Annotated[
        Path | None, typer.Option(help="recompute this sweep's figures and files from its folders; measure nothing")
    ] = None,
    ca_cert: CaCertOpt = None,
    insecure: InsecureOpt = False,
    client_cert: ClientCertOpt = None,
    client_key: ClientKeyOpt = None,
    ray: RayOpt = None,
    ray_hosts: RayHostsOpt = None,
    procs_per_host: ProcsPerHostOpt = 1,
    stream: StreamOpt = False,
    wake_window_ms: WakeWindowOpt = 0.0,
    realtime: RealtimeOpt = 0,
    models_from_server: ModelsFromServerOpt = False,
    mix: MixOpt = None,
) -> None:
    """Measure the saturation point of every configuration in a grid and name the best one (with noise)."""
    headers = parse_headers(header)
    secrets = secrets_of([*(url or ()), grpc_url, *(metrics_url or ())], headers)
    rest_url, grpc_url = split_urls(url, grpc_url)
    if grpc_url and not rest_url and ctx.get_parameter_source("protocol").name == "DEFAULT":  # type: ignore[union-attr]
        protocol = "grpc"  # only a gRPC address: the scheme picks the protocol
    secrets += tuple(v for k, _, v in (e.partition("=") for e in env or ()) if is_secret_name(k))

    def body() -> int:
        budget = renamed(budget_s, old_budget_s, "--budget", "--budget-s", warn=False)
        search_budget = renamed(find_budget_s, old_find_budget_s, "--search-budget", "--find-budget-s", warn=False)
        search_budget = 240.0 if search_budget is None else search_budget
        kind = server or ("remote" if rest_url or grpc_url else "mlserver")
        refuse_for_sweep(ctx, kind, report is not None, resume is not None, dry_run)  # exit 2, before any load
        if report is not None:
            rewritten = rewrite_sweep(report)
            print_sweep(console, rewritten)
            console.print(f"rewritten: {report} ({SWEEP_FILE}, {SWEEP_CSV}, report.html)")
            return sweep_exit(rewritten, report, gate_exprs(threshold, ()), False) if threshold else EXIT_OK
        if resume is not None:
            state = SweepState.resume(resume, headers)
            if state.cfg.server.reconfigure is not None:
                console.print(f"the sweep's --reconfigure command, as recorded: {state.cfg.server.reconfigure}")
            server_ = state.cfg.server.resumed(
                url=rest_url,
                grpc_url=grpc_url,
                metrics_urls=metrics_url or (),
                env=env_items(env),
                reconfigure=reconfigure,
            )
            state.cfg = replace(state.cfg, server=server_)
            cfg, out_dir = state.cfg, resume
        else:
            if not set_:
                raise fail("sweep needs --set KNOB=V1,V2 (or --resume DIR)")
            s_cpus, g_cpus = split_cpus() if kind != "remote" else (None, None)
            cfg = SweepConfig(
                sets=tuple(set_),
                server=BaseServer(
                    kind=kind,
                    workers=workers, max_batch_size=max_batch_size, max_batch_time=max_batch_time,
                    demo_model=demo_model, runtime=runtime, model_dir=str(model_dir) if model_dir else None,
                    demo_models=demo_models, model_repo=_path(model_repo),
                    env=tuple(env_items(env)), service_ms=service_ms, url=rest_url, grpc_url=grpc_url,
                    model=(model or [""])[0] if model or models_from_server else None, mix=mix,
                    mix_models=tuple(model or ()) if len(model or ()) > 1 else (), mix_from_server=models_from_server,
                    reconfigure=reconfigure, ready_timeout_s=ready_timeout, server_cores=server_cores,
                    server_pids=tuple(server_pid or ()), metrics_urls=tuple(metrics_url or ()),
                    protocol=protocol, batch=batch_size, headers=headers, stream=stream,
                    payload_file=str(payload) if payload else None,
                    server_cpus=parse_cpus(server_cpus) if server_cpus else s_cpus,
                    ca_cert=_path(ca_cert), insecure=insecure, client_cert=_path(client_cert),
                    client_key=_path(client_key),
                ),
                repeats=repeats, remeasure_top=remeasure_top, objective=objective,
                at_rps=at_rps, slo=tuple(slo or ()), budget_s=budget, max_quality_loss_pp=max_quality_loss,
                eval_data=_path(eval_data), reference_model_dir=_path(reference_model_dir),
                server_memory_mb=server_memory_mb,
                find=FindOptions(
                    precision=precision, budget_s=search_budget, budget_given=False, ramp_s=ramp, min_hold_s=min_hold,
                    max_hold_s=max_hold, min_requests=min_requests, profile=profile or at_rps is not None,
                ),
                load=LoadOptions(
                    drain_s=5.0, ray=ray_options(ray, ray_hosts, procs_per_host), **pacing(wake_window_ms, realtime),
                    generator_cpus=parse_cpus(generator_cpus) if generator_cpus else None if ray else g_cpus,
                ),
            ).validate()  # fmt: skip
            out_dir = out or default_out("sweep")
            state = None
        exprs = gate_exprs(threshold, cfg.slo)  # a bad expression: exit 2, before any load
        if dry_run:
            for p in cfg.points():
                console.print(f"{p.id}  {p.label}")
            console.print(f"estimate: {estimate(cfg, len(cfg.points()))['text']}")
            return EXIT_OK
        known = (*secrets, *cfg.server.secret_values())
        with interruptible() as stop, EventPrinter(console, known) as printer:
            outcome = run_sweep(cfg, out_dir, stop=stop, on_event=printer, state=state)
        print_sweep(console, outcome.doc)
        console.print(f"results: {out_dir} ({SWEEP_FILE}, {SWEEP_CSV}, report.html)")
        return sweep_exit(outcome.doc, out_dir, exprs, outcome.interrupted)

    guarded(body, secrets)


def _path(p: Path | None) -> str | None:
    return str(p) if p is not None else None
