"""``satpoint sim``: the synthetic OIP server with known capacity (and faults on demand)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from satpoint.cli.common import ProtocolOpt, fail
from satpoint.cli.opts.stream_opts import (
    SimStreamOpt,
    StreamChunksOpt,
    StreamFirstMsOpt,
    StreamGapMsOpt,
    sim_stream_fields,
)
from satpoint.cli.tool_modes import refuse_for_sim
from satpoint.servers.sim.model import Dist, ErrorFraming, Fault
from satpoint.servers.sim.model import scale_defaults as sd
from satpoint.servers.sim.rates import METASTABLE_HELP, metastable_fields


def sim(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(help="TCP port (0 = any free port)")] = 8080,
    host: Annotated[str, typer.Option(help="listen address (loopback)")] = "127.0.0.1",
    slots: Annotated[int, typer.Option(help="concurrent service slots C")] = 1,
    service_ms: Annotated[float, typer.Option("--service", help="mean service time S, ms")] = 10.0,
    dist: Annotated[Dist, typer.Option(help="const, exp or lognormal")] = "const",
    pause_every: Annotated[float | None, typer.Option(help="pause period, seconds")] = None,
    pause_s: Annotated[float, typer.Option("--pause", help="pause length, seconds")] = 0.0,
    error_rate: Annotated[float, typer.Option(help="fraction answered with errors")] = 0.0,
    model: Annotated[str, typer.Option(help="model name")] = "sim",
    models: Annotated[
        str | None, typer.Option(help="serve N models (MODEL-1..MODEL-N) or the names A,B,.. (a model mix)")
    ] = None,
    model_queues: Annotated[bool, typer.Option(help="with --models: each model its own --slots and queue")] = False,
    seed: Annotated[int, typer.Option(help="seed for service-time draws")] = 0,
    protocol: ProtocolOpt = "rest",
    tls_cert: Annotated[Path | None, typer.Option(help="serve TLS (https/grpcs) with this PEM certificate")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert")] = None,
    tls_client_ca: Annotated[
        Path | None, typer.Option(help="require client certificates signed by this PEM CA (mTLS)")
    ] = None,
    fault: Annotated[
        Fault | None,
        typer.Option(
            help="misbehave (REST): reset-mid-response, close-after, connection-close, idle-timeout, malformed, "
            "truncated, slow-headers, stall or error-body (README: what happens when the server misbehaves)"
        ),
    ] = None,
    fault_rate: Annotated[
        float, typer.Option(help="fraction of inference requests a per-request fault hits (seeded)")
    ] = 1.0,
    fault_after: Annotated[int, typer.Option(help="the first N inference requests are spared by the fault")] = 0,
    close_after: Annotated[
        int | None, typer.Option(help="close-after: close each connection after N answers (no Connection: close)")
    ] = None,
    idle_timeout: Annotated[
        float | None, typer.Option(help="idle-timeout: close connections idle this many seconds")
    ] = None,
    slow_headers_ms: Annotated[
        float | None,
        typer.Option("--slow-headers", help="slow-headers: the rest of the headers this late, ms (default 1000)"),
    ] = None,
    error_status: Annotated[int | None, typer.Option(help="error-body: the status answered (default 503)")] = None,
    error_framing: Annotated[
        ErrorFraming | None,
        typer.Option(help="error-body: length (content-length, keep-alive; default) or eof (body ends at close)"),
    ] = None,
    metastable: Annotated[str | None, typer.Option(metavar="HIGH,LOW,FACTOR", help=METASTABLE_HELP)] = None,
    stream: SimStreamOpt = False,
    stream_first_ms: StreamFirstMsOpt = 20.0,
    stream_gap_ms: StreamGapMsOpt = 5.0,
    stream_chunks: StreamChunksOpt = 10,
    pipeline: Annotated[
        str | None,
        typer.Option(
            metavar="SPEC",
            help="serve a pipeline: a Seldon Core 2 Pipeline or Triton ensemble file, or a chain A,B,C named --model; "
            "each step's model its own slots, the pipeline as NAME and NAME.pipeline (REST)",
        ),
    ] = None,
    step_service: Annotated[
        list[str] | None,
        typer.Option(metavar="MODEL=SLOTSxMS", help="--pipeline: a step model's slots and service time (repeat)"),
    ] = None,
    autoscale: Annotated[str | None, typer.Option(metavar="MIN:MAX", help=sd.AUTOSCALE_HELP)] = None,
    scale_delay_s: Annotated[float, typer.Option(help="--autoscale: a new replica serves this long after")] = 30.0,
    scale_target: Annotated[float, typer.Option(help="--autoscale: the utilisation aimed at")] = sd.DEFAULT_TARGET,
    scale_sync_s: Annotated[float, typer.Option(help="--autoscale: seconds between decisions")] = sd.DEFAULT_SYNC_S,
    scale_down_window_s: Annotated[
        float, typer.Option(help="--autoscale: scale-down stabilisation window, s")
    ] = sd.DEFAULT_DOWN_WINDOW_S,
) -> None:
    """A synthetic OIP server with known capacity C/S, for calibration and tests (and faults on demand)."""
    from satpoint.errors import ConfigError
    from satpoint.servers.sim.grpc_server import run as run_grpc
    from satpoint.servers.sim.model import model_names
    from satpoint.servers.sim.server import SimConfig, pipeline_from_options
    from satpoint.servers.sim.server import run as run_rest
    from satpoint.servers.sim.tls import SimTls

    switches = {"pause_every": pause_every, "models": models, "tls_cert": tls_cert, "stream": stream}
    refuse_for_sim(
        ctx, protocol, {**switches, "pipeline": pipeline, "fault": fault, "autoscale": autoscale}
    )  # exit 2, before serving
    if slots < 1 or service_ms <= 0 or not 0 <= error_rate <= 1:
        raise fail("--slots must be >= 1, --service > 0, --error-rate within [0, 1]")
    if autoscale is not None and (protocol != "rest" or pipeline is not None):
        raise fail("--autoscale is simulated by the REST sim without --pipeline")
    try:
        config = SimConfig(
            host=host, port=port, slots=slots, service_ms=service_ms, dist=dist,
            pause_every_s=pause_every, pause_s=pause_s, error_rate=error_rate, model=model, seed=seed,
            models=model_names(models, model), model_queues=model_queues,
            fault=fault, fault_rate=fault_rate, fault_after=fault_after, close_after=close_after,
            idle_timeout_s=idle_timeout, slow_headers_ms=slow_headers_ms, error_status=error_status,
            error_framing=error_framing,
            autoscale=sd.parse_autoscale(
                autoscale, delay_s=scale_delay_s, target=scale_target, sync_s=scale_sync_s,
                down_window_s=scale_down_window_s,
            ),
            **metastable_fields(metastable), **sim_stream_fields(stream, stream_first_ms, stream_gap_ms, stream_chunks),
        )  # fmt: skip
        served = pipeline_from_options(pipeline, step_service or [], config)
        if served is not None:
            config = served.configure(config)
    except ConfigError as e:
        raise fail(str(e).removeprefix("sim: ")) from None
    try:
        tls = SimTls.from_paths(tls_cert, tls_key, tls_client_ca)
    except (ValueError, OSError) as e:
        raise fail(str(e)) from None
    if served is not None:
        run_rest(config, tls=tls, pipeline=served)
    else:
        (run_rest if protocol == "rest" else run_grpc)(config, tls=tls)
