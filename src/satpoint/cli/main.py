"""The command line: the only place that reads argv and the environment (exit codes: cli.common).

Each command parses its options, calls one library function (``satpoint.api`` or an experiment) and
renders what it returns.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from satpoint import api
from satpoint.cli.coldstart_cmd import coldstart
from satpoint.cli.common import (
    DEBUG,
    EXIT_INTERRUPTED,
    ArrivalOpt,
    BatchOpt,
    BinaryDataOpt,
    CaCertOpt,
    ClientCertOpt,
    ClientKeyOpt,
    CpusOpt,
    ErrRateOpt,
    FlamegraphNativeOpt,
    FlamegraphOpt,
    FlamegraphRateOpt,
    GrpcConnsOpt,
    GrpcRawOpt,
    HeaderOpt,
    HtmlOpt,
    InsecureOpt,
    MetricsUrlOpt,
    PayloadOpt,
    ServerPidOpt,
    ThresholdOpt,
    TimeoutOpt,
    UrlProtocolOpt,
    console,
    err_console,
    exit_code,
    fail,
    flamegraph_options,
    interruptible,
    parse_cpus,
    parse_headers,
    secrets_of,
    tls_fields,
)
from satpoint.cli.compare_cmd import compare
from satpoint.cli.contract import EXIT_CODES_HELP, OldVersionOpt, renamed
from satpoint.cli.demo_cmd import demo_app
from satpoint.cli.diff_cmd import BaselineOpt, FailInconclusiveOpt, baseline_gate, diff, refuse_fail_on_inconclusive
from satpoint.cli.find_cmd import find
from satpoint.cli.opts import help_opts
from satpoint.cli.opts import trace_opts as to
from satpoint.cli.opts.mix_opts import MixOpt, ModelsFromServerOpt, ModelsOpt, model_mix
from satpoint.cli.opts.modes import refuse_for_run
from satpoint.cli.opts.overcommit_opts import AllowUnloadOpt, ResidentOpt, guarded_keeping, keep_loaded, with_resident
from satpoint.cli.opts.pacing_opts import RealtimeOpt, WakeWindowOpt, pacing
from satpoint.cli.opts.ray_opts import ProcsPerHostOpt, RayHostsOpt, RayOpt, bare_ray
from satpoint.cli.opts.stream_opts import StreamOpt
from satpoint.cli.pipeline_cmd import pipeline
from satpoint.cli.results_cmd import analyze, export, print_version, report, version_cmd
from satpoint.cli.scale_cmd import scale_test
from satpoint.cli.sim_cmd import sim
from satpoint.cli.sweep_cmd import sweep
from satpoint.config import LoadOptions, ObserveOptions, ray_options
from satpoint.endpoints.spec import Target, resolve_protocol
from satpoint.procedures.trace_replay import run_trace
from satpoint.reports.files.diff import noted_baseline_target
from satpoint.reports.terminal.console import print_summary
from satpoint.reports.terminal.progress import QUIET, EventPrinter

app = typer.Typer(
    cls=help_opts.PanelledGroup,  # every option's panel and metavar in --help
    add_completion=True,  # --install-completion, --show-completion
    no_args_is_help=True,
    # -h on every command; every option also read from SATPOINT_<COMMAND>_<PARAMETER> (said in its help)
    context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "SATPOINT"},
    pretty_exceptions_show_locals=False,  # a traceback must not print the --header tokens held in locals
    help="Open-loop, coordinated-omission-free load tests and saturation search for OIP (KServe V2) servers.",
)


@app.callback()
def top(
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=print_version, help="print satpoint's version")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", envvar="SATPOINT_DEBUG", help="an error's traceback besides its one line")
    ] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="no colours in the output (also: NO_COLOR=1)")] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            envvar="SATPOINT_QUIET",
            help="no live progress and no informational lines; warnings, errors and the results still print",
        ),
    ] = False,
) -> None:
    """Open-loop, coordinated-omission-free load tests and saturation search for OIP (KServe V2) servers."""
    (DEBUG.set if debug else DEBUG.clear)()
    (QUIET.set if quiet else QUIET.clear)()
    console.no_color = err_console.no_color = no_color or bool(os.environ.get("NO_COLOR"))


@app.command(epilog=EXIT_CODES_HELP)
def run(
    ctx: typer.Context,
    url: Annotated[str, typer.Option("--url", "-u", help="server base URL, e.g. http://127.0.0.1:8080")],
    model: ModelsOpt = None,
    stage: Annotated[
        list[str] | None, typer.Option("--stage", "-s", help="RPS:RAMP_S:HOLD_S (repeatable; targets rise)")
    ] = None,
    version: Annotated[str | None, typer.Option("--model-version", help="the model's version")] = None,
    old_version: OldVersionOpt = None,
    protocol: UrlProtocolOpt = None,
    arrival: ArrivalOpt = "constant",
    seed: Annotated[int, typer.Option(help="seed for Poisson arrivals and random payloads")] = 0,
    max_inflight: Annotated[
        int | None,
        typer.Option(help="in-flight cap (connections/streams); default: peak rate x latency bound, within ulimit -n"),
    ] = None,
    timeout: TimeoutOpt = 30.0,
    drain: Annotated[float, typer.Option(help="after the last due time, wait at most this long")] = 10.0,
    procs: Annotated[int, typer.Option(help="generator processes sharing the schedule")] = 1,
    header: HeaderOpt = None,
    payload: PayloadOpt = None,
    batch_size: BatchOpt = 1,
    max_error_rate: ErrRateOpt = 0.01,
    generator_cpus: CpusOpt = None,
    out: Annotated[Path | None, typer.Option(help="results folder (default results/run-TIMESTAMP)")] = None,
    grpc_raw: GrpcRawOpt = False,
    binary_data: BinaryDataOpt = False,
    grpc_connections: GrpcConnsOpt = None,
    html: HtmlOpt = True,
    users: Annotated[
        int | None, typer.Option(help="CLOSED LOOP instead of --stage: N users that each wait for their answer")
    ] = None,
    duration: Annotated[
        float | None, typer.Option(help="seconds to run: the closed loop's (--users), or --rate's one stage")
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="OPEN LOOP in one stage: R requests/s for --duration (--stage R:0:D)")
    ] = None,
    think_ms: Annotated[
        float, typer.Option("--think", help="closed loop: pause between answer and next request, ms")
    ] = 0.0,
    threshold: ThresholdOpt = None,
    ca_cert: CaCertOpt = None,
    insecure: InsecureOpt = False,
    client_cert: ClientCertOpt = None,
    client_key: ClientKeyOpt = None,
    server_pid: ServerPidOpt = None,
    metrics_url: MetricsUrlOpt = None,
    flamegraph: FlamegraphOpt = False,
    flamegraph_stage: Annotated[
        int | None, typer.Option(help="--flamegraph: the stage (1-based) whose hold py-spy records (default: the last)")
    ] = None,
    flamegraph_native: FlamegraphNativeOpt = False,
    flamegraph_rate: FlamegraphRateOpt = 100,
    ray: RayOpt = None,
    ray_hosts: RayHostsOpt = None,
    procs_per_host: ProcsPerHostOpt = 1,
    baseline: BaselineOpt = None,
    fail_on_inconclusive: FailInconclusiveOpt = False,
    trace: to.TraceOpt = None,
    trace_format: to.TraceFormatOpt = None,
    trace_time_column: to.TraceTimeColumnOpt = "timestamp",
    speed: to.SpeedOpt = 1.0,
    trace_window: to.TraceWindowOpt = None,
    trace_peak: to.TracePeakOpt = None,
    trace_stage_s: to.TraceStageOpt = 60.0,
    server_slots: to.ServerSlotsOpt = None,
    trace_time_unit: to.TraceTimeUnitOpt = "auto",
    trace_model: to.TraceModelOpt = None,
    trace_select: to.TraceSelectOpt = None,
    stream: StreamOpt = False,
    wake_window_ms: WakeWindowOpt = 0.0,
    realtime: RealtimeOpt = 0,
    models_from_server: ModelsFromServerOpt = False,
    mix: MixOpt = None,
    resident: ResidentOpt = None,
    allow_unload: AllowUnloadOpt = False,
) -> None:
    """Run a staged open-loop load test and judge every stage (or a closed loop with --users, or replay a
    recorded trace with --trace)."""
    tls = {**tls_fields(ca_cert, insecure, client_cert, client_key), "binary_data": binary_data, "stream": stream}
    secrets = secrets_of([url, *(metrics_url or ())], parse_headers(header))

    def body() -> int:
        version_ = renamed(version, old_version, "--model-version", "--version")
        refuse_for_run(ctx, trace is not None, users is not None, rate is not None)  # unused in its mode: exit 2
        if batch_size < 1:
            raise fail("--batch-size must be >= 1")
        one, models = model_mix(model, models_from_server, mix)
        models = with_resident(models, resident, procs, ray, url=url, allow_unload=allow_unload)
        if one is None:
            raise fail("give --model NAME (repeat it for a model mix) or --models-from-server")
        proto = resolve_protocol(url, protocol)  # the URL's scheme picks it: grpc://, grpcs:// speak gRPC
        target = Target(
            url, one, version_, proto, parse_headers(header), payload, batch_size, grpc_raw, mix=models, **tls
        )
        keep_loaded(target)  # --resident: the server's loaded set, put back when the command ends
        common = {"thresholds": threshold or [], "max_error_rate": max_error_rate, "out": out, "html": html}
        flame = flamegraph_options(flamegraph, flamegraph_native, flamegraph_rate, flamegraph_stage)
        common["observe"] = ObserveOptions(tuple(server_pid or ()), tuple(metrics_url or ()), flamegraph=flame)
        refuse_fail_on_inconclusive(baseline, fail_on_inconclusive)
        hold_rps, hold_note = noted_baseline_target(baseline, console, "run")  # refused here, before measuring
        if trace is not None:  # a recorded trace's arrival times instead of --stage
            replay = to.trace_search_options(trace, trace_format, trace_time_column, trace_time_unit, trace_window,
                                             trace_peak, trace_stage_s, seed, one, trace_model, trace_select, models,
                                             speed, stages=len(stage or ()), users=users,
                                             server_slots=server_slots)  # fmt: skip
            load = LoadOptions("constant", seed, max_inflight, timeout, drain, procs, parse_cpus(generator_cpus),
                               grpc_connections=grpc_connections, **pacing(wake_window_ms, realtime),
                               ray=ray_options(ray, ray_hosts, procs_per_host, procs))  # fmt: skip
            with interruptible() as stop, EventPrinter(console, secrets) as printer:
                replayed = run_trace(target, replay, load=load, on_event=printer, stop=stop, **common)  # type: ignore[arg-type]
            print_summary(console, replayed.summary.model_dump(), str(replayed.out_dir))
            return baseline_gate(baseline, replayed.out_dir, exit_code(replayed.summary), "", fail_on_inconclusive)
        to.refuse_run_trace_only(ctx)
        if users is None:
            plan = list(stage or ())
            if rate is not None:  # the one-stage shorthand: --stage R:0:D
                if duration is None:
                    raise fail("--rate R needs --duration D (the stage's length)")
                plan = [f"{rate:.12g}:0:{duration:.12g}"]
            if not plan:
                raise fail(
                    "give --stage RPS:RAMP_S:HOLD_S or --rate R --duration D (open loop), or --users N (closed loop)"
                )
            if (duration is not None and rate is None) or think_ms:
                raise fail("--duration and --think belong to the closed loop (--users), --duration also to --rate")
            load = LoadOptions(
                arrival, seed, max_inflight, timeout, drain, procs, parse_cpus(generator_cpus),
                grpc_connections=grpc_connections, ray=ray_options(ray, ray_hosts, procs_per_host, procs),
                **pacing(wake_window_ms, realtime),
            )  # fmt: skip
            with interruptible() as stop, EventPrinter(console, secrets) as printer:
                result = api.run(
                    target, plan, load=load.validate(), on_event=printer, stop=stop, hold_rps=hold_rps, **common,  # type: ignore[arg-type]
                )  # fmt: skip
        else:
            if stage:
                raise fail("--stage (open loop) and --users (closed loop) are mutually exclusive")
            if duration is None:
                raise fail("--users needs --duration S")
            if procs != 1 or ray is not None:
                raise fail("a closed loop runs in one generator process (--procs 1, no --ray)")
            if wake_window_ms or realtime:
                raise fail("--wake-window and --realtime pace an open-loop schedule (--stage), not a closed loop")
            if flamegraph:
                raise fail("--flamegraph records a stage of an open-loop run (--stage), not a closed loop")
            if hold_rps is not None:
                hold_note = (
                    f"a closed loop does not hold the baseline's target of {hold_rps:.1f} rps (an open-loop rate)"
                )
            with interruptible() as stop, EventPrinter(console, secrets) as printer:
                result = api.run_closed_loop(
                    target, users, duration, think_ms=think_ms, timeout_s=timeout, drain_s=drain, seed=seed,
                    grpc_connections=grpc_connections, on_event=printer, stop=stop, **common,  # type: ignore[arg-type]
                )  # fmt: skip
        print_summary(console, result.summary.model_dump(), str(result.out_dir))
        return baseline_gate(baseline, result.out_dir, exit_code(result.summary), hold_note, fail_on_inconclusive)

    guarded_keeping(body, secrets)


# the exit codes end every --help
_COMMANDS: dict[str, Callable[..., None]] = {"find": find, "compare": compare, "sweep": sweep, "diff": diff, "sim": sim}
_COMMANDS |= {"coldstart": coldstart, "report": report, "analyze": analyze, "version": version_cmd}
_COMMANDS["export"] = export
_COMMANDS["pipeline"] = pipeline
_COMMANDS["scale-test"] = scale_test
for name, command in _COMMANDS.items():
    app.command(name, epilog=EXIT_CODES_HELP)(command)
app.add_typer(demo_app, name="demo")


def entrypoint() -> None:
    try:
        app(args=bare_ray(sys.argv[1:]))
    except KeyboardInterrupt:
        err_console.print("aborted")
        sys.exit(EXIT_INTERRUPTED)
