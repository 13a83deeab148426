"""``satpoint compare``: the saturation search for REST and gRPC on one server, side by side."""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from satpoint.analysis.verdicts import VerdictRules
from satpoint.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    console,
    default_out,
    fail,
    guarded,
    interruptible,
    parse_cpus,
    parse_headers,
)
from satpoint.cli.find_cmd import default_cpus, profile_target, search_target
from satpoint.endpoints.spec import Target
from satpoint.find import FindOptions
from satpoint.metrics.results import Results
from satpoint.reports.files import write_all
from satpoint.session import LoadOptions

COMPARE_FILE = "compare.json"


def compare_rows(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The side-by-side figures (a pure function of the per-protocol summaries)."""
    out: dict[str, Any] = {"protocols": {}}
    for proto, s in summaries.items():
        out["protocols"][proto] = {
            "saturation_rps": s.get("saturation_rps"),
            "max_throughput_rps": s.get("max_throughput_rps"),
            "precision_achieved": s.get("precision_achieved"),
            "generator_cpu_us_per_request": s.get("generator", {}).get("cpu_us_per_request"),
            "latency_at": [
                {"offered_rps": r["offered_rps"], "latency_ms": r["latency_ms"], "verdict": r["verdict"]}
                for r in s.get("latency_at", [])
            ],
        }
    return out


def print_compare(doc: dict[str, Any]) -> None:
    protos = list(doc["protocols"])
    t = Table(title="REST vs gRPC (same server, same method)", title_justify="left")
    t.add_column("figure")
    for p in protos:
        t.add_column(p, justify="right")

    def fmt(v: Any, spec: str = ".1f") -> str:
        return "-" if v is None else format(v, spec)

    rows = [
        ("saturation point (rps)", "saturation_rps"),
        ("max throughput (rps)", "max_throughput_rps"),
        ("generator CPU per request (µs)", "generator_cpu_us_per_request"),
    ]
    for label, key in rows:
        t.add_row(label, *(fmt(doc["protocols"][p][key]) for p in protos))
    n = min(len(doc["protocols"][p]["latency_at"]) for p in protos)
    for i in range(n):
        rate = doc["protocols"][protos[0]]["latency_at"][i]["offered_rps"]
        for pct in ("p50", "p99"):
            t.add_row(
                f"{pct} latency at {rate:.0f} rps (ms)",
                *(fmt(doc["protocols"][p]["latency_at"][i]["latency_ms"][pct], ".2f") for p in protos),
            )
    console.print(t)


def compare(
    url: Annotated[str | None, typer.Option(help="REST base URL (none: embedded MLServer)")] = None,
    grpc_url: Annotated[str | None, typer.Option(help="gRPC address host:port of the same server")] = None,
    model: Annotated[str | None, typer.Option(help="model name (with --url)")] = None,
    protocols: Annotated[str, typer.Option(help="comma-separated: rest,grpc")] = "rest,grpc",
    precision: Annotated[float, typer.Option(help="search precision")] = 0.05,
    budget_s: Annotated[float, typer.Option(help="time cap per protocol, seconds")] = 240.0,
    header: Annotated[list[str] | None, typer.Option("--header", "-H", help="KEY:VALUE (repeatable)")] = None,
    payload: Annotated[Path | None, typer.Option(help="OIP request JSON/JSONL file")] = None,
    grpc_raw: Annotated[bool, typer.Option(help="gRPC: raw_input_contents")] = False,
    workers: Annotated[int, typer.Option(help="embedded MLServer parallel_workers")] = 1,
    server_cpus: Annotated[str | None, typer.Option(help="CPUs for the embedded server")] = None,
    generator_cpus: Annotated[str | None, typer.Option(help="CPUs for the generator")] = None,
    ramp: Annotated[float, typer.Option(help="ramp of every stage, seconds")] = 2.0,
    min_hold: Annotated[float, typer.Option(help="shortest hold, seconds")] = 6.0,
    max_hold: Annotated[float, typer.Option(help="longest hold, seconds")] = 15.0,
    min_requests: Annotated[int, typer.Option(help="aim for this many requests per hold")] = 2000,
    out: Annotated[Path | None, typer.Option(help="results folder (default results/compare-TIMESTAMP)")] = None,
) -> None:
    """Run the saturation search per protocol on one server and print them side by side."""

    def body() -> int:
        protos = [p.strip() for p in protocols.split(",") if p.strip()]
        if not protos or any(p not in ("rest", "grpc") for p in protos) or len(set(protos)) != len(protos):
            raise fail("--protocols takes rest and/or grpc, e.g. rest,grpc")
        if url is not None and model is None:
            raise fail("--url needs --model")
        if url is not None and "grpc" in protos and grpc_url is None:
            raise fail("comparing gRPC on a given server needs --grpc-url")
        managed = url is None
        s_cpus, g_cpus = default_cpus() if managed else (None, None)
        s_cpus = parse_cpus(server_cpus) if server_cpus else s_cpus
        g_cpus = parse_cpus(generator_cpus) if generator_cpus else g_cpus
        opts = LoadOptions(max_inflight=256, drain_s=5.0, generator_cpus=g_cpus)
        fopts = FindOptions(
            precision=precision,
            budget_s=budget_s,
            ramp_s=ramp,
            min_hold_s=min_hold,
            max_hold_s=max_hold,
            min_requests=min_requests,
            profile=False,
        )
        rules = VerdictRules()
        out_dir = out or default_out("compare")
        headers = parse_headers(header or [])
        results: dict[str, Results] = {}
        with ExitStack() as stack, interruptible() as stop:
            server_info = None
            addr = {"rest": url, "grpc": grpc_url}
            name = model
            if managed:
                from satpoint.servers.mlserver import MLServerSettings, MLServerTarget

                console.print(f"starting the embedded MLServer (parallel_workers={workers})")
                server = stack.enter_context(MLServerTarget(MLServerSettings(parallel_workers=workers, cpus=s_cpus)))
                server_info = server.info()
                addr = {"rest": server.rest_url, "grpc": server.grpc_address}
                name = server.model_name
            assert name is not None
            specs = {
                p: Target(
                    url=str(addr[p]), model=name, protocol=p, headers=headers, payload_file=payload, grpc_raw=grpc_raw
                )
                for p in protos
            }
            for p in protos:
                if stop.is_set():
                    break
                console.rule(f"[bold]{p}")
                results[p] = search_target(specs[p], opts, fopts, rules, out_dir / p, stop, server_info)
            sats = {p: write_all(out_dir / p, r, html=False).get("saturation_rps") for p, r in results.items()}
            common = min((v for v in sats.values() if v), default=None)
            if common and not stop.is_set():
                console.rule("latency at equal offered loads")
                for p in protos:
                    profile_target(results[p], specs[p], opts, replace(fopts, profile=True), out_dir / p, stop, common)
            interrupted = stop.is_set()
        summaries = {p: write_all(out_dir / p, r, html=True) for p, r in results.items()}
        doc = compare_rows(summaries)
        (out_dir / COMPARE_FILE).write_text(json.dumps(doc, indent=2))
        if len(results) > 1:
            from satpoint.reports.html import write_report

            write_report([out_dir / p for p in results], out_dir / "report.html")
        print_compare(doc)
        console.print(f"results: {out_dir}")
        return EXIT_INTERRUPTED if interrupted else EXIT_OK

    guarded(body)
