"""The command line: the only place that reads argv and the environment (exit codes: cli.common)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from satpoint import __version__
from satpoint.analysis.thresholds import failed, format_result, parse_thresholds
from satpoint.analysis.verdicts import VerdictRules
from satpoint.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_THRESHOLD,
    config_dict,
    console,
    default_out,
    err_console,
    fail,
    guarded,
    interruptible,
    parse_cpus,
    parse_headers,
)
from satpoint.cli.compare_cmd import compare
from satpoint.cli.demo_cmd import demo_app
from satpoint.cli.find_cmd import find
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.engine.closed_loop import ClosedLoopOptions, closed_loop_segment
from satpoint.metrics.results import Results, append_segment, new_header, write_header
from satpoint.plan import Stage, validate_plan
from satpoint.reports.co_demo import ClosedLoopView
from satpoint.reports.files import write_all
from satpoint.reports.terminal import LiveView, print_summary
from satpoint.session import LoadOptions, run_segment

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Open-loop, coordinated-omission-free load tests and saturation search for OIP (KServe V2) servers.",
)
StageOpt = Annotated[
    list[str] | None, typer.Option("--stage", "-s", help="RPS:RAMP_S:HOLD_S (repeatable; targets rise)")
]
ThresholdOpt = Annotated[
    list[str] | None,
    typer.Option(help="SLO gate, e.g. 'p99<50ms', 'error_rate<1%' (repeatable; exit 3 if one fails)"),
]
UrlOpt = Annotated[str, typer.Option("--url", "-u", help="server base URL, e.g. http://127.0.0.1:8080")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="model name")]


@app.command()
def run(
    url: UrlOpt,
    model: ModelOpt,
    stage: StageOpt = None,
    version: Annotated[str | None, typer.Option(help="model version")] = None,
    protocol: Annotated[str, typer.Option(help="rest or grpc")] = "rest",
    arrival: Annotated[str, typer.Option(help="constant or poisson")] = "constant",
    seed: Annotated[int, typer.Option(help="seed for Poisson arrivals and random payloads")] = 0,
    max_inflight: Annotated[int, typer.Option(help="in-flight cap (connections/streams)")] = 1024,
    timeout: Annotated[float, typer.Option(help="per-request timeout, seconds")] = 30.0,
    drain: Annotated[float, typer.Option(help="after the last due time, wait at most this long")] = 10.0,
    procs: Annotated[int, typer.Option(help="generator processes sharing the schedule")] = 1,
    header: Annotated[list[str] | None, typer.Option("--header", "-H", help="KEY:VALUE (repeatable)")] = None,
    payload: Annotated[Path | None, typer.Option(help="OIP request JSON or JSONL file")] = None,
    batch_size: Annotated[int, typer.Option(help="replaces -1 in input shapes")] = 1,
    max_error_rate: Annotated[float, typer.Option(help="error rate above which a stage is failing")] = 0.01,
    generator_cpus: Annotated[str | None, typer.Option(help="pin the generator, e.g. 1 or 2-3")] = None,
    out: Annotated[Path | None, typer.Option(help="results folder (default results/run-TIMESTAMP)")] = None,
    grpc_raw: Annotated[bool, typer.Option(help="gRPC: send tensors as raw_input_contents")] = False,
    html: Annotated[bool, typer.Option(help="write report.html")] = True,
    users: Annotated[
        int | None, typer.Option(help="CLOSED LOOP instead of --stage: N users that each wait for their answer")
    ] = None,
    duration: Annotated[float | None, typer.Option(help="closed loop: seconds to run")] = None,
    think_ms: Annotated[float, typer.Option(help="closed loop: pause between answer and next request")] = 0.0,
    threshold: ThresholdOpt = None,
) -> None:
    """Run a staged open-loop load test and judge every stage (or a closed loop with --users)."""

    def body() -> int:
        if arrival not in ("constant", "poisson"):
            raise fail("--arrival must be constant or poisson")
        if procs < 1 or max_inflight < 1 or timeout <= 0 or batch_size < 1:
            raise fail("--procs, --max-inflight, --batch-size must be >= 1 and --timeout > 0")
        checks = parse_thresholds(threshold or [], "run")
        closed = _closed_loop_options(stage, users, duration, think_ms, procs, timeout, drain)
        stages = [Stage.parse(s) for s in stage or []]
        if closed is None:
            validate_plan(stages)
        spec = Target(
            url=url,
            model=model,
            version=version,
            protocol=protocol,
            headers=parse_headers(header or []),
            payload_file=payload,
            batch_size=batch_size,
            grpc_raw=grpc_raw,
        )
        opts = LoadOptions(
            arrival=arrival,  # type: ignore[arg-type]
            seed=seed,
            max_inflight=max_inflight,
            timeout_s=timeout,
            drain_s=drain,
            procs=procs,
            generator_cpus=parse_cpus(generator_cpus),
        )
        rules = VerdictRules(max_error_rate=max_error_rate)
        prepared = prepare(spec, closed.users if closed else max_inflight, seed=seed)
        out_dir = out or default_out("run")
        config = config_dict(opts, rules, thresholds=[t.expr for t in checks])
        if closed is not None:
            closed = replace(closed, payload_count=len(prepared.payload_docs))
            config.update(mode="closed_loop", closed_loop=closed.describe())
            config["load"]["max_inflight"] = closed.users
        results = Results(new_header("run", config, spec.describe(), time.time()))
        results.header["target"]["metadata"] = prepared.metadata
        write_header(out_dir, results)
        if closed is not None:
            cl = closed
            return execute(
                results,
                out_dir,
                lambda stop, view: closed_loop_segment(prepared.builder, cl, on_snapshot=view.update, stop_event=stop),
                [],
                html,
                view=ClosedLoopView(console, cl.users, cl.duration_s),
            )
        return execute(
            results,
            out_dir,
            lambda stop, view: run_segment(prepared, stages, opts, on_snapshot=view.update, stop_event=stop),
            stages,
            html,
        )

    guarded(body)


def _closed_loop_options(
    stage: list[str] | None,
    users: int | None,
    duration: float | None,
    think_ms: float,
    procs: int,
    timeout: float,
    drain: float,
) -> ClosedLoopOptions | None:
    """ClosedLoopOptions for ``run --users N --duration S``, None for a staged open-loop run."""
    if users is None:
        if not stage:
            raise fail("give --stage RPS:RAMP_S:HOLD_S (open loop) or --users N --duration S (closed loop)")
        if duration is not None or think_ms:
            raise fail("--duration and --think-ms belong to the closed loop (--users)")
        return None
    if stage:
        raise fail("--stage (open loop) and --users (closed loop) are mutually exclusive")
    if duration is None:
        raise fail("--users needs --duration S")
    if procs != 1:
        raise fail("a closed loop runs in one generator process (--procs 1)")
    opts = ClosedLoopOptions(users, duration, think_ms / 1000, timeout_s=timeout, drain_s=min(drain, timeout))
    opts.validate()
    return opts


def execute(
    results: Results,
    out_dir: Path,
    segment_fn: Callable[[threading.Event, LiveView], Any],
    stages: list[Stage],
    html: bool,
    view: LiveView | None = None,
) -> int:
    with interruptible() as stop, view or LiveView(console, stages, results.kind) as live:
        seg = segment_fn(stop, live)
    append_segment(out_dir, results, seg)
    summary = write_all(out_dir, results, html=html)
    print_summary(console, summary, str(out_dir))
    for r in summary.get("thresholds", []):
        console.print(format_result(r), style="green" if r["passed"] else "bold red")
    if summary["interrupted"]:
        return EXIT_INTERRUPTED
    return EXIT_THRESHOLD if failed(summary.get("thresholds", [])) else EXIT_OK


app.command("find")(find)
app.command("compare")(compare)
app.add_typer(demo_app, name="demo")


@app.command()
def sim(
    port: Annotated[int, typer.Option(help="TCP port (0 = any free port)")] = 8080,
    host: Annotated[str, typer.Option(help="listen address (loopback)")] = "127.0.0.1",
    slots: Annotated[int, typer.Option(help="concurrent service slots C")] = 1,
    service_ms: Annotated[float, typer.Option(help="mean service time S in ms")] = 10.0,
    dist: Annotated[str, typer.Option(help="const, exp or lognormal")] = "const",
    pause_every: Annotated[float | None, typer.Option(help="pause period, seconds")] = None,
    pause_s: Annotated[float, typer.Option(help="pause length, seconds")] = 0.0,
    error_rate: Annotated[float, typer.Option(help="fraction answered with errors")] = 0.0,
    model: Annotated[str, typer.Option(help="model name")] = "sim",
    seed: Annotated[int, typer.Option(help="seed for service-time draws")] = 0,
    protocol: Annotated[str, typer.Option(help="rest or grpc")] = "rest",
) -> None:
    """A synthetic OIP server with known capacity C/S, for calibration and tests."""
    from satpoint.servers.sim import SimConfig
    from satpoint.servers.sim import run as run_rest
    from satpoint.servers.sim_grpc import run as run_grpc

    if protocol not in ("rest", "grpc"):
        raise fail("--protocol must be rest or grpc")
    run_sim = run_rest if protocol == "rest" else run_grpc

    if dist not in ("const", "exp", "lognormal"):
        raise fail("--dist must be const, exp or lognormal")
    if slots < 1 or service_ms <= 0 or not 0 <= error_rate <= 1:
        raise fail("--slots must be >= 1, --service-ms > 0, --error-rate within [0, 1]")
    run_sim(
        SimConfig(
            host=host,
            port=port,
            slots=slots,
            service_ms=service_ms,
            dist=dist,  # type: ignore[arg-type]
            pause_every_s=pause_every,
            pause_s=pause_s,
            error_rate=error_rate,
            model=model,
            seed=seed,
        )
    )


@app.command()
def report(
    dirs: Annotated[list[Path], typer.Argument(help="results folders")],
    out: Annotated[Path | None, typer.Option(help="report.html path (default: in the first folder)")] = None,
) -> None:
    """Rewrite summary.json, intervals.csv and report.html from results folders, offline."""
    from satpoint.metrics.results import load_results

    def body() -> int:
        for d in dirs:
            results = load_results(d)
            summary = write_all(d, results, html=len(dirs) == 1 and out is None)
            print_summary(console, summary, str(d))
            if summary["kind"] == "find":
                from satpoint.reports.find_terminal import print_find

                print_find(console, summary)
        if len(dirs) > 1 or out is not None:
            from satpoint.reports.html import write_report

            target = out or dirs[0] / "report.html"
            write_report(dirs, target)
            console.print(f"report: {target}")
        return EXIT_OK

    guarded(body)


@app.command()
def analyze(dirs: Annotated[list[Path], typer.Argument(help="results folders")]) -> None:
    """Recompute verdicts and replay the saturation search offline from recorded results."""
    from satpoint.analysis.summary import build_summary
    from satpoint.metrics.results import load_results
    from satpoint.reports.find_terminal import print_find

    def body() -> int:
        code = EXIT_OK
        for d in dirs:
            summary = build_summary(load_results(d))
            print_summary(console, summary, str(d))
            if summary["kind"] == "find":
                print_find(console, summary)
                search = summary["search"]
                ok = search["replay_matches"]
                console.print(
                    f"replay: {len(search['steps'])} decisions "
                    + ("reproduced exactly" if ok else "[bold red]DIFFER from the recorded run[/]")
                )
                if not ok:
                    code = EXIT_FAILED
        return code

    guarded(body)


@app.command("version")
def version_cmd() -> None:
    """Print the version."""
    console.print(f"satpoint {__version__}")


def entrypoint() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("aborted")
        sys.exit(EXIT_INTERRUPTED)
