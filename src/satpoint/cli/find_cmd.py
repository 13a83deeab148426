"""``satpoint find``: options for the saturation search, on a given server or on the embedded MLServer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from satpoint import api
from satpoint.analysis.traffic.headroom import search_params
from satpoint.cli.common import (
    ArrivalOpt,
    BatchOpt,
    BinaryDataOpt,
    CaCertOpt,
    ClientCertOpt,
    ClientKeyOpt,
    DemoModelOpt,
    ErrRateOpt,
    FlamegraphNativeOpt,
    FlamegraphOpt,
    FlamegraphRateOpt,
    GrpcConnsOpt,
    GrpcRawOpt,
    HeaderOpt,
    HtmlOpt,
    InsecureOpt,
    InstancesOpt,
    MetricsUrlOpt,
    ModelDirOpt,
    PayloadOpt,
    PreferredBatchOpt,
    QueueDelayOpt,
    RuntimeOpt,
    ServerOpt,
    ServerPidOpt,
    ThresholdOpt,
    TimeoutOpt,
    UrlProtocolOpt,
    console,
    embedded_model,
    exit_code,
    fail,
    flamegraph_options,
    interruptible,
    parse_cpus,
    parse_headers,
    secrets_of,
    tls_fields,
)
from satpoint.cli.contract import OldSpelling, OldVersionOpt, renamed
from satpoint.cli.diff_cmd import BaselineOpt, FailInconclusiveOpt, baseline_gate, refuse_fail_on_inconclusive
from satpoint.cli.opts.gate_opts import gates_exit, no_answer_exit
from satpoint.cli.opts.mix_opts import MixOpt, ModelsFromServerOpt, ModelsOpt, model_mix
from satpoint.cli.opts.models_opts import DemoModelsOpt, ModelRepoOpt, many_models
from satpoint.cli.opts.modes import refuse_for_find
from satpoint.cli.opts.overcommit_opts import AllowUnloadOpt, ResidentOpt, guarded_keeping, keep_loaded, with_resident
from satpoint.cli.opts.pacing_opts import RealtimeOpt, WakeWindowOpt, pacing
from satpoint.cli.opts.ray_opts import ProcsPerHostOpt, RayHostsOpt, RayOpt
from satpoint.cli.opts.stream_opts import StreamOpt
from satpoint.cli.opts.trace_opts import (
    StartSpeedOpt,
    TraceFormatOpt,
    TraceModelOpt,
    TracePeakOpt,
    TraceSelectOpt,
    TraceStageOpt,
    TraceTimeColumnOpt,
    TraceTimeUnitOpt,
    TraceWindowOpt,
    headroom_exit,
    trace_search_options,
)
from satpoint.config import FindOptions, LoadOptions, ObserveOptions, ray_options
from satpoint.endpoints.spec import Target, resolve_protocol
from satpoint.procedures.trace_headroom import find_headroom
from satpoint.reports.files.diff import noted_baseline_target
from satpoint.reports.terminal.console import print_summary
from satpoint.reports.terminal.find import print_find
from satpoint.reports.terminal.headroom import print_headroom
from satpoint.reports.terminal.progress import EventPrinter
from satpoint.servers.embedded import embedded_settings

FIND_BUDGET_HELP = "time cap for the whole find, seconds (default: planned, 270 for one search and its profile, "
FIND_BUDGET_HELP += "more for --repeats and each extra; a given one too small for them is refused)"


def find(
    ctx: typer.Context,
    url: Annotated[
        str | None, typer.Option("--url", "-u", help="server base URL; none: start the embedded server (--server)")
    ] = None,
    server: ServerOpt = "mlserver",
    model_names: ModelsOpt = None,
    version: Annotated[str | None, typer.Option("--model-version", help="the model's version")] = None,
    old_version: OldVersionOpt = None,
    protocol: UrlProtocolOpt = None,
    precision: Annotated[float, typer.Option(help="stop when the bracket is within this fraction")] = 0.05,
    slo: Annotated[list[str] | None, typer.Option(help="latency objective, e.g. p99<50ms (repeatable)")] = None,
    old_budget_s: Annotated[float | None, OldSpelling("--budget-s")] = None,
    budget_s: Annotated[float | None, typer.Option("--budget", help=FIND_BUDGET_HELP)] = None,
    margin: Annotated[float, typer.Option(help="autoscaling margin under saturation (0.1-0.2)")] = 0.15,
    peak_rps: Annotated[float | None, typer.Option(help="peak load to plan replicas for")] = None,
    min_rps: Annotated[float | None, typer.Option(help="floor load, sets minReplicas")] = None,
    emit_k8s: Annotated[Path | None, typer.Option(help="write Seldon Core 2 Model + HPA YAML here")] = None,
    start_rps: Annotated[float | None, typer.Option(help="first stage rate (default: from a probe)")] = None,
    growth: Annotated[float, typer.Option(help="staircase factor between stages")] = 2.0,
    cooldown: Annotated[
        float, typer.Option(help="rest between stages, s (at least 5 after an overload unless 0; probes check idle)")
    ] = 2.0,
    max_rps: Annotated[float, typer.Option(help="never offer more than this")] = 50_000.0,
    arrival: ArrivalOpt = "constant",
    seed: Annotated[int, typer.Option(help="seed")] = 0,
    max_inflight: Annotated[
        int | None, typer.Option(help="in-flight cap; default: each stage's rate x latency bound, within ulimit -n")
    ] = None,
    timeout: TimeoutOpt = 30.0,
    procs: Annotated[int, typer.Option(help="generator processes")] = 1,
    header: HeaderOpt = None,
    payload: PayloadOpt = None,
    batch_size: BatchOpt = 1,
    max_error_rate: ErrRateOpt = 0.01,
    server_cpus: Annotated[
        str | None, typer.Option(help="CPUs for the embedded server (default: all but the last)")
    ] = None,
    server_cpu_limit: Annotated[
        str | None, typer.Option(help="embedded MLServer: a CPU limit as Kubernetes sets it (CFS quota, cores: 1.5)")
    ] = None,
    server_memory_limit: Annotated[
        str | None, typer.Option(help="embedded MLServer: a memory limit as Kubernetes sets it (512M, 1Gi)")
    ] = None,
    generator_cpus: Annotated[str | None, typer.Option(help="CPUs for the generator (default: the last)")] = None,
    workers: Annotated[int, typer.Option(help="embedded MLServer parallel_workers")] = 1,
    max_batch_size: Annotated[
        int | None,
        typer.Option(help="embedded MLServer adaptive batching size (default 1 = off), Triton max_batch_size (32)"),
    ] = None,
    max_queue_delay_us: QueueDelayOpt = None,
    instances: InstancesOpt = None,
    preferred_batch_size: PreferredBatchOpt = None,
    binary_data: BinaryDataOpt = False,
    max_batch_time: Annotated[
        float | None,
        typer.Option(help="embedded MLServer max_batch_time, seconds (default 0; with --model-dir: the folder's)"),
    ] = None,
    demo_model: DemoModelOpt = None,
    runtime: RuntimeOpt = None,
    model_dir: ModelDirOpt = None,
    demo_models: DemoModelsOpt = None,
    model_repo: ModelRepoOpt = None,
    mlserver_debug: Annotated[bool, typer.Option(help="embedded MLServer debug (access log)")] = False,
    grpc_raw: GrpcRawOpt = False,
    grpc_connections: GrpcConnsOpt = None,
    profile: Annotated[bool, typer.Option(help="measure latency at 50/80/90/100 % of saturation")] = True,
    confirm: Annotated[
        bool, typer.Option(help="hold the per-replica target before accepting the answer (lower it if not stable)")
    ] = True,
    repeats: Annotated[
        int, typer.Option(help="independent searches: the answer is the lowest, the spread a range")
    ] = 1,
    hysteresis: Annotated[
        bool, typer.Option(help="then tip the server over and step the load down: where it recovers (~2 min budget)")
    ] = False,
    ramp: Annotated[float, typer.Option(help="ramp of every stage, seconds")] = 2.0,
    min_hold: Annotated[float, typer.Option(help="shortest hold, seconds")] = 6.0,
    max_hold: Annotated[float, typer.Option(help="longest hold, seconds")] = 15.0,
    min_requests: Annotated[int, typer.Option(help="aim for this many requests per hold")] = 2000,
    out: Annotated[Path | None, typer.Option(help="results folder (default results/find-TIMESTAMP)")] = None,
    html: HtmlOpt = True,
    threshold: ThresholdOpt = None,
    ca_cert: CaCertOpt = None,
    insecure: InsecureOpt = False,
    client_cert: ClientCertOpt = None,
    client_key: ClientKeyOpt = None,
    server_pid: ServerPidOpt = None,
    metrics_url: MetricsUrlOpt = None,
    flamegraph: FlamegraphOpt = False,
    flamegraph_native: FlamegraphNativeOpt = False,
    flamegraph_rate: FlamegraphRateOpt = 100,
    ray: RayOpt = None,
    ray_hosts: RayHostsOpt = None,
    procs_per_host: ProcsPerHostOpt = 1,
    baseline: BaselineOpt = None,
    fail_on_inconclusive: FailInconclusiveOpt = False,
    trace: Annotated[Path | None, typer.Option(help="search the speed factor at which this trace is sustained")] = None,
    trace_format: TraceFormatOpt = None,
    trace_time_column: TraceTimeColumnOpt = "timestamp",
    trace_window: TraceWindowOpt = None,
    trace_peak: TracePeakOpt = None,
    trace_stage_s: TraceStageOpt = 60.0,
    start_speed: StartSpeedOpt = 1.0,
    trace_time_unit: TraceTimeUnitOpt = "auto",
    trace_model: TraceModelOpt = None,
    trace_select: TraceSelectOpt = None,
    stream: StreamOpt = False,
    wake_window_ms: WakeWindowOpt = 0.0,
    realtime: RealtimeOpt = 0,
    models_from_server: ModelsFromServerOpt = False,
    mix: MixOpt = None,
    resident: ResidentOpt = None,
    allow_unload: AllowUnloadOpt = False,
) -> None:
    """Find the single-replica saturation point and recommend an autoscaling target (or, with --trace, the
    headroom: how many times as fast as recorded one replica sustains a trace)."""
    tls = {**tls_fields(ca_cert, insecure, client_cert, client_key), "binary_data": binary_data, "stream": stream}
    secrets = secrets_of([url, *(metrics_url or ())], parse_headers(header))

    def body() -> int:
        version_ = renamed(version, old_version, "--model-version", "--version")
        budget = renamed(budget_s, old_budget_s, "--budget", "--budget-s", warn=False)
        refuse_fail_on_inconclusive(baseline, fail_on_inconclusive)
        model, models = model_mix(model_names, models_from_server, mix, managed=url is None)
        models = with_resident(models, resident, procs, ray, url=url, allow_unload=allow_unload)
        if url is not None and model is None:
            raise fail("--url needs --model")
        refuse_for_find(ctx, trace is not None, url is not None)
        proto = resolve_protocol(url, protocol)  # the URL's scheme picks it: grpc://, grpcs:// speak gRPC
        if trace is not None:  # the speed factor instead of a rate: find --trace (trace_headroom)
            if url is None or model is None:
                raise fail("find --trace needs --url and --model (a running server)")
            tgt = Target(
                url, model, version_, proto, parse_headers(header), payload, batch_size, grpc_raw, mix=models, **tls
            )
            keep_loaded(tgt)  # --resident: the server's loaded set, put back when the command ends
            replay = trace_search_options(trace, trace_format, trace_time_column, trace_time_unit, trace_window,
                                        trace_peak, trace_stage_s, seed, model, trace_model, trace_select,
                                        models)  # fmt: skip
            load = LoadOptions("constant", seed, max_inflight, timeout, min(5.0, timeout), procs,
                               parse_cpus(generator_cpus) if generator_cpus else None,
                               grpc_connections=grpc_connections, **pacing(wake_window_ms, realtime))  # fmt: skip
            params = search_params(precision, growth, start_speed, confirm=confirm)
            with interruptible() as stop, EventPrinter(console, secrets) as printer:
                found = find_headroom(tgt, replay, params, load=load, budget_s=270.0 if budget is None else budget,
                                      cooldown_s=cooldown,
                                      margin=margin, profile=profile, max_error_rate=max_error_rate, out=out,
                                      emit_k8s=emit_k8s, on_event=printer, stop=stop, html=html,
                                      thresholds=threshold or [], slo=slo or [])  # fmt: skip
            print_headroom(console, found.block)
            console.print(f"results: {found.out_dir}")  # 3: a --threshold failed on the answer's replay
            return gates_exit(found.thresholds, len(threshold or ()), headroom_exit(found.block, stop.is_set()))
        served = embedded_model(url, demo_model, runtime, model_dir) | many_models(url, demo_models, model_repo)
        opts = FindOptions(
            precision=precision, growth=growth, start_rps=start_rps, max_rps=max_rps,
            budget_s=budget if budget is not None else 270.0, budget_given=budget is not None,
            ramp_s=ramp, min_hold_s=min_hold, max_hold_s=max_hold, min_requests=min_requests, profile=profile,
            confirm=confirm, repeats=repeats, hysteresis=hysteresis, cooldown_s=cooldown,
            margin=margin, peak_rps=peak_rps, min_rps=min_rps,
        )  # fmt: skip
        managed = url is None
        s_cpus, g_cpus = api.split_cpus() if managed else (None, None)
        load = LoadOptions(
            arrival=arrival, seed=seed, max_inflight=max_inflight, procs=procs,
            timeout_s=timeout, drain_s=min(5.0, timeout), grpc_connections=grpc_connections,
            **pacing(wake_window_ms, realtime),
            ray=ray_options(ray, ray_hosts, procs_per_host, procs),
            generator_cpus=parse_cpus(generator_cpus) if generator_cpus is not None else None if ray else g_cpus,
        ).validate()  # fmt: skip
        flame = flamegraph_options(flamegraph, flamegraph_native, flamegraph_rate)
        target: Target | None = None
        embedded = None
        if managed:
            cpus = parse_cpus(server_cpus) if server_cpus is not None else s_cpus
            embedded = embedded_settings(
                server, served, cpus, workers=workers, mlserver_debug=mlserver_debug, max_batch_size=max_batch_size,
                max_batch_time=max_batch_time, max_queue_delay_us=max_queue_delay_us, instances=instances,
                preferred_batch_size=preferred_batch_size, cpu_limit=server_cpu_limit, memory_limit=server_memory_limit,
            )  # fmt: skip
        else:
            assert url is not None and model is not None
            target = Target(
                url, model, version_, proto, parse_headers(header), payload, batch_size, grpc_raw, mix=models, **tls
            )
            keep_loaded(target)  # --resident: the server's loaded set, put back when the command ends
        hold_rps, hold_note = noted_baseline_target(baseline, console, "find")  # refuses one that is no results folder
        # the signal handlers cover the server's start too: a Ctrl-C or SIGTERM then stops the search
        # before it begins, and leaving the block stops the server
        with interruptible() as stop, EventPrinter(console, secrets) as printer:
            result = api.find(
                target, options=opts, load=load, slo=slo or [], max_error_rate=max_error_rate,
                thresholds=threshold or [], server=embedded, emit_k8s=emit_k8s, out=out, html=html,
                on_event=printer, stop=stop, protocol=proto, hold_rps=hold_rps,
                observe=ObserveOptions(tuple(server_pid or ()), tuple(metrics_url or ()), flamegraph=flame),
                target_options={
                    "version": version_, "headers": parse_headers(header), "payload_file": payload,
                    "batch_size": batch_size, "grpc_raw": grpc_raw, "mix": models, **tls,
                },
            )  # fmt: skip
        summary = result.summary.model_dump()
        print_summary(console, summary, str(result.out_dir))
        print_find(console, summary)
        if result.k8s_files:
            console.print("Kubernetes manifests: " + ", ".join(str(p) for p in result.k8s_files))
        code = no_answer_exit(result.summary, exit_code(result.summary))  # 4: no rate held, no answer
        return baseline_gate(baseline, result.out_dir, code, hold_note, fail_on_inconclusive)

    guarded_keeping(body, secrets)
