"""``satpoint coldstart``: cold starts and overcommit through the repository API (``experiments.coldstart``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from satpoint.api import default_out, split_cpus
from satpoint.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_THRESHOLD,
    CaCertOpt,
    ClientCertOpt,
    ClientKeyOpt,
    HeaderOpt,
    InsecureOpt,
    TimeoutOpt,
    UrlProtocolOpt,
    console,
    fail,
    guarded,
    interruptible,
    parse_headers,
    secrets_of,
    tls_fields,
)
from satpoint.cli.opts.coldstart_opts import (
    CallTimeoutOpt,
    ColdModelOpt,
    ColdServerOpt,
    ColdUrlOpt,
    DemoModelOpt,
    DemoModelsOpt,
    DuringRpsOpt,
    MixOpt,
    OcDurationOpt,
    OcRateOpt,
    RepeatsOpt,
    ResidentOpt,
    SloOpt,
    SloP99Opt,
    WarmOpt,
)
from satpoint.cli.opts.modes import refuse_for_coldstart
from satpoint.endpoints.spec import Target, resolve_protocol
from satpoint.experiments.coldstart import ColdStartOptions, parse_resident, parse_slo_p99, run_coldstart
from satpoint.reports.html.coldstart import print_coldstart
from satpoint.reports.terminal.progress import EventPrinter


def coldstart(
    ctx: typer.Context,
    url: ColdUrlOpt = None,
    model: ColdModelOpt = None,
    header: HeaderOpt = None,
    repeats: RepeatsOpt = 20,
    during_rps: DuringRpsOpt = 200.0,
    warm: WarmOpt = 5,
    call_timeout: CallTimeoutOpt = 120.0,
    timeout: TimeoutOpt = 30.0,
    demo_models: DemoModelsOpt = 3,
    demo_model: DemoModelOpt = "iris",
    server: ColdServerOpt = "mlserver",
    resident: ResidentOpt = None,
    mix: MixOpt = "uniform",
    rate: OcRateOpt = 20.0,
    duration: OcDurationOpt = 30.0,
    slo: SloOpt = None,
    slo_p99_ms: SloP99Opt = None,
    seed: Annotated[int, typer.Option(help="seed of the overcommit mix's draw")] = 0,
    out: Annotated[Path | None, typer.Option(help="results folder (default results/coldstart-TIMESTAMP)")] = None,
    ca_cert: CaCertOpt = None,
    insecure: InsecureOpt = False,
    client_cert: ClientCertOpt = None,
    client_key: ClientKeyOpt = None,
    protocol: UrlProtocolOpt = None,
) -> None:
    """Cold starts through the model-repository API (unload, load, first inference, requests during the
    load), and overcommit runs with at most K models resident (--resident)."""
    tls = tls_fields(ca_cert, insecure, client_cert, client_key)
    secrets = secrets_of([url] if url else [], parse_headers(header))

    def body() -> int:
        refuse_for_coldstart(ctx, url is not None, resident is not None)  # an option its mode does not use: exit 2
        models = tuple(model or ())
        proto = resolve_protocol(url, protocol)
        target = None
        if url is not None:
            target = Target(url, models[0] if models else "-", None, proto, parse_headers(header), **tls)
        elif any(tls.values()):  # the embedded server speaks http:// and grpc://
            raise fail("--ca-cert/--insecure/--client-cert/--client-key need an https:// URL (--url)")
        opts = ColdStartOptions(
            repeats=repeats, during_rps=during_rps, warm_requests=warm, call_timeout_s=call_timeout,
            request_timeout_s=timeout, models=models, demo_models=demo_models, demo_model=demo_model, server=server,
            resident=parse_resident(resident), mix=mix, rate_rps=rate, duration_s=duration,
            slo_p99_ms=parse_slo_p99(slo or [], slo_p99_ms),
            seed=seed, server_cpus=split_cpus()[0] if url is None else None, protocol=proto,
        )  # fmt: skip
        out_dir = out or default_out("coldstart")
        with interruptible() as stop, EventPrinter(console, secrets) as printer:
            result = run_coldstart(target, opts, out_dir, on_event=printer, stop=stop)
        print_coldstart(console, result.summary, str(result.out_dir))
        rec = result.summary.get("recommendation") or {}
        missed = "slo_p99_ms" in rec and rec.get("resident_for_slo") is None  # no K kept p99 within the SLO
        return EXIT_INTERRUPTED if stop.is_set() else EXIT_THRESHOLD if missed else EXIT_OK

    guarded(body, secrets)
