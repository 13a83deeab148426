"""``satpoint find``: the saturation search, on a given server or on the embedded MLServer."""

from __future__ import annotations

import os
import re
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from satpoint.analysis.capacity import Recommendation
from satpoint.analysis.thresholds import failed, format_result, parse_thresholds
from satpoint.analysis.verdicts import VerdictRules
from satpoint.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_THRESHOLD,
    config_dict,
    console,
    default_out,
    fail,
    guarded,
    interruptible,
    parse_cpus,
    parse_headers,
)
from satpoint.endpoints.prepare import prepare, probe_service_s, wait_until_idle
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.find import FindOptions, Measure, overload_rule, run_profile, run_search, start_rate_from_probe
from satpoint.metrics.results import Results, Segment, new_header, write_header
from satpoint.plan import Stage
from satpoint.reports.files import write_all
from satpoint.reports.find_terminal import print_find
from satpoint.reports.k8s import write_k8s
from satpoint.reports.terminal import LiveView, print_summary
from satpoint.session import LoadOptions, run_segment

_SLO = re.compile(r"^(p\d+(?:\.\d+)?)\s*[=<]\s*([\d.]+)\s*(ms|s)?$")


def parse_slo(values: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for v in values:
        m = _SLO.match(v.strip().lower())
        if not m:
            raise fail(f"--slo {v!r}: expected e.g. p99=50ms")
        key, num, unit = m.group(1), float(m.group(2)), m.group(3) or "ms"
        key = {"p99.9": "p999", "p99.0": "p99"}.get(key, key)
        if key not in ("p50", "p90", "p95", "p99", "p999"):
            raise fail(f"--slo {v!r}: percentile must be one of p50, p90, p95, p99, p99.9")
        out[key] = num * (1000.0 if unit == "s" else 1.0)
    return out


def default_cpus() -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """Server on all but the last CPU, generator on the last one (no pinning on one CPU)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return tuple(cpus[:-1]), (cpus[-1],)


def _cpus(cpus: tuple[int, ...] | None) -> str:
    return ",".join(map(str, cpus)) if cpus else "any"


def find(
    url: Annotated[
        str | None, typer.Option("--url", "-u", help="server base URL; none: start the embedded MLServer")
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="model name (with --url)")] = None,
    version: Annotated[str | None, typer.Option(help="model version")] = None,
    protocol: Annotated[str, typer.Option(help="rest or grpc")] = "rest",
    precision: Annotated[float, typer.Option(help="stop when the bracket is within this fraction")] = 0.05,
    slo: Annotated[list[str] | None, typer.Option(help="latency objective, e.g. p99=50ms (repeatable)")] = None,
    budget_s: Annotated[float, typer.Option(help="time cap for the search, seconds")] = 270.0,
    margin: Annotated[float, typer.Option(help="autoscaling margin under saturation (0.1-0.2)")] = 0.15,
    peak_rps: Annotated[float | None, typer.Option(help="peak load to plan replicas for")] = None,
    min_rps: Annotated[float | None, typer.Option(help="floor load, sets minReplicas")] = None,
    emit_k8s: Annotated[Path | None, typer.Option(help="write Seldon Core 2 Model + HPA YAML here")] = None,
    start_rps: Annotated[float | None, typer.Option(help="first stage rate (default: from a probe)")] = None,
    growth: Annotated[float, typer.Option(help="staircase factor between stages")] = 2.0,
    max_rps: Annotated[float, typer.Option(help="never offer more than this")] = 50_000.0,
    arrival: Annotated[str, typer.Option(help="constant or poisson")] = "constant",
    seed: Annotated[int, typer.Option(help="seed")] = 0,
    max_inflight: Annotated[
        int, typer.Option(help="in-flight cap (bounds the queue an overloaded stage leaves)")
    ] = 256,
    timeout: Annotated[float, typer.Option(help="per-request timeout, seconds")] = 30.0,
    procs: Annotated[int, typer.Option(help="generator processes")] = 1,
    header: Annotated[list[str] | None, typer.Option("--header", "-H", help="KEY:VALUE (repeatable)")] = None,
    payload: Annotated[Path | None, typer.Option(help="OIP request JSON/JSONL file")] = None,
    batch_size: Annotated[int, typer.Option(help="replaces -1 in input shapes")] = 1,
    max_error_rate: Annotated[float, typer.Option(help="stage error-rate limit")] = 0.01,
    server_cpus: Annotated[
        str | None, typer.Option(help="CPUs for the embedded server (default: all but the last)")
    ] = None,
    generator_cpus: Annotated[str | None, typer.Option(help="CPUs for the generator (default: the last)")] = None,
    workers: Annotated[int, typer.Option(help="embedded MLServer parallel_workers")] = 1,
    max_batch_size: Annotated[int, typer.Option(help="embedded MLServer adaptive batching size (1 = off)")] = 1,
    max_batch_time: Annotated[float, typer.Option(help="embedded MLServer max_batch_time, seconds")] = 0.0,
    mlserver_debug: Annotated[bool, typer.Option(help="embedded MLServer debug (access log)")] = False,
    grpc_raw: Annotated[bool, typer.Option(help="gRPC: raw_input_contents")] = False,
    profile: Annotated[bool, typer.Option(help="measure latency at 50/80/90/100 % of saturation")] = True,
    ramp: Annotated[float, typer.Option(help="ramp of every stage, seconds")] = 2.0,
    min_hold: Annotated[float, typer.Option(help="shortest hold, seconds")] = 6.0,
    max_hold: Annotated[float, typer.Option(help="longest hold, seconds")] = 15.0,
    min_requests: Annotated[int, typer.Option(help="aim for this many requests per hold")] = 2000,
    out: Annotated[Path | None, typer.Option(help="results folder (default results/find-TIMESTAMP)")] = None,
    html: Annotated[bool, typer.Option(help="write report.html")] = True,
    threshold: Annotated[
        list[str] | None,
        typer.Option(help="SLO gate, e.g. 'saturation_rps>400', 'p99<50ms' (repeatable; exit 3 if one fails)"),
    ] = None,
) -> None:
    """Find the single-replica saturation point and recommend an autoscaling target."""

    def body() -> int:
        if arrival not in ("constant", "poisson"):
            raise fail("--arrival must be constant or poisson")
        if not 0 < precision < 1 or not 0 <= margin < 1 or growth <= 1 or budget_s <= 0:
            raise fail("--precision in (0,1), --margin in [0,1), --growth > 1 and --budget-s > 0 are required")
        if (url is None) != (model is None) and url is not None:
            raise fail("--url needs --model")
        slo_ms = parse_slo(slo or [])
        checks = parse_thresholds(threshold or [], "find")
        managed = url is None
        s_cpus, g_cpus = default_cpus() if managed else (None, None)
        if server_cpus is not None:
            s_cpus = parse_cpus(server_cpus)
        if generator_cpus is not None:
            g_cpus = parse_cpus(generator_cpus)
        opts = LoadOptions(
            arrival=arrival,  # type: ignore[arg-type]
            seed=seed,
            max_inflight=max_inflight,
            timeout_s=timeout,
            drain_s=min(5.0, timeout),
            procs=procs,
            generator_cpus=g_cpus,
        )
        fopts = FindOptions(
            precision=precision,
            growth=growth,
            start_rps=start_rps,
            max_rps=max_rps,
            budget_s=budget_s,
            profile=profile,
            margin=margin,
            peak_rps=peak_rps,
            min_rps=min_rps,
            ramp_s=ramp,
            min_hold_s=min_hold,
            max_hold_s=max_hold,
            min_requests=min_requests,
        )
        if ramp < 0 or min_hold <= 0 or max_hold < min_hold or min_requests < 1:
            raise fail("--ramp >= 0, 0 < --min-hold <= --max-hold and --min-requests >= 1 are required")
        rules = VerdictRules(max_error_rate=max_error_rate, slo_ms=slo_ms)
        out_dir = out or default_out("find")
        # the signal handlers cover the server's start too: a Ctrl-C or SIGTERM then stops the search
        # before it begins, and leaving the block stops the server
        with interruptible() as stop, ExitStack() as stack:
            server_info: dict[str, Any] | None = None
            target_url, target_model = url, model
            if managed:
                from satpoint.servers.mlserver import MLServerSettings, MLServerTarget

                settings = MLServerSettings(
                    parallel_workers=workers,
                    debug=mlserver_debug,
                    max_batch_size=max_batch_size,
                    max_batch_time_s=max_batch_time,
                    cpus=s_cpus,
                )
                where = f"server CPUs {_cpus(s_cpus)}, generator CPUs {_cpus(g_cpus)}"
                console.print(f"starting the embedded MLServer (iris model, parallel_workers={workers}, {where})")
                server = stack.enter_context(MLServerTarget(settings))
                server_info = server.info()
                target_url = server.rest_url if protocol == "rest" else server.grpc_address
                target_model = server.model_name
                console.print(f"MLServer ready at {target_url} (pid {server.pid})")
            assert target_url is not None and target_model is not None
            spec = Target(
                url=target_url,
                model=target_model,
                version=version,
                protocol=protocol,
                headers=parse_headers(header or []),
                payload_file=payload,
                batch_size=batch_size,
                grpc_raw=grpc_raw,
            )
            results = search_target(
                spec, opts, fopts, rules, out_dir, stop, server_info, thresholds=[t.expr for t in checks]
            )
        summary = write_all(out_dir, results, html=html)
        print_summary(console, summary, str(out_dir))
        print_find(console, summary)
        rec = summary.get("recommendation")
        if emit_k8s is not None and rec:
            paths = write_k8s(emit_k8s, target_model or "model", Recommendation(**rec))
            console.print("Kubernetes manifests: " + ", ".join(str(p) for p in paths))
        for r in summary.get("thresholds", []):
            console.print(format_result(r), style="green" if r["passed"] else "bold red")
        if summary["interrupted"]:
            return EXIT_INTERRUPTED
        return EXIT_THRESHOLD if failed(summary.get("thresholds", [])) else EXIT_OK

    guarded(body)


def search_target(
    spec: Target,
    opts: LoadOptions,
    fopts: FindOptions,
    rules: VerdictRules,
    out_dir: Path,
    stop: threading.Event,
    server_info: dict[str, Any] | None = None,
    thresholds: list[str] | None = None,
    profile_rps: float | None = None,
) -> Results:
    """Prepare a target, run the search (and the profile) into ``out_dir``; returns the results.

    ``profile_rps`` profiles at fractions of that rate instead of the search's own answer (used to
    compare configurations at equal offered loads)."""
    prepared = prepare(spec, opts.max_inflight, seed=opts.seed)
    first = fopts.start_rps
    svc = probe_service_s(prepared)
    if first is None:
        first = start_rate_from_probe(svc) if svc else 10.0
        console.print(
            f"probe: one request takes {svc * 1000:.2f} ms → first stage {first:g} rps"
            if svc
            else "probe unavailable: first stage 10 rps"
        )
    config = config_dict(opts, rules, find=fopts.describe(first, rules.slo_ms), thresholds=thresholds or [])
    results = Results(new_header("find", config, spec.describe(), time.time()))
    results.header["target"]["metadata"] = prepared.metadata
    results.header["target"]["managed"] = server_info is not None
    if server_info is not None:
        results.header["server"] = server_info
    write_header(out_dir, results)
    console.print(f"searching (precision {fopts.precision:.0%}, budget {fopts.budget_s:g} s); results in {out_dir}")
    measure = _measure(prepared, opts, stop, results)

    def cooldown(min_s: float) -> None:
        waited = wait_until_idle(prepared, min_s, svc)
        console.print(f"cool-down: {waited:.1f} s until the server answered at low-load speed again")

    run_search(results, out_dir, measure, fopts, rules, first, stop, log=console.print, cooldown=cooldown)
    summary = write_all(out_dir, results, html=False)
    sat = profile_rps or summary.get("saturation_rps")
    if fopts.profile and sat and not stop.is_set():
        run_profile(results, out_dir, measure, fopts, sat, stop, log=console.print, cooldown=cooldown)
    return results


def profile_target(
    results: Results,
    spec: Target,
    opts: LoadOptions,
    fopts: FindOptions,
    out_dir: Path,
    stop: threading.Event,
    rate_rps: float,
) -> None:
    """Add a profile sequence at 50/80/90/100 % of ``rate_rps`` to a search's results."""
    prepared = prepare(spec, opts.max_inflight, seed=opts.seed)
    svc = probe_service_s(prepared)
    measure = _measure(prepared, opts, stop, results)
    run_profile(
        results,
        out_dir,
        measure,
        fopts,
        rate_rps,
        stop,
        log=console.print,
        cooldown=lambda min_s: _ignore(wait_until_idle(prepared, min_s, svc)),
    )


def _ignore(_: object) -> None:
    return None


def _measure(prepared: PreparedTarget, opts: LoadOptions, stop: threading.Event, results: Results) -> Measure:
    def measure(stages: list[Stage], start: float, index: int, purpose: str) -> Segment:
        baseline = results.header.get("config", {}).get("rules", {}).get("baseline_p50_ms")
        with LiveView(console, stages, f"{purpose}") as view:
            return run_segment(
                prepared,
                stages,
                opts,
                index=index,
                purpose=purpose,
                on_snapshot=view.update,
                stop_event=stop,
                seed_offset=index,
                start_rps=start,
                abort_when=overload_rule(baseline) if purpose != "profile" else None,
            )

    return measure
