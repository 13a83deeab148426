"""A synthetic Open Inference Protocol (KServe V2) REST server whose capacity is known exactly.

``slots`` parallel servers (slots) each take a service time with mean ``service_ms``; the capacity is
``slots / service_s`` requests per second. satpoint's end-to-end tests validate against it.

Run it with ``python -m satpoint.servers.sim.server --port 0 --slots 2 --service-ms 20`` or
``run(SimConfig(...))``. Once listening it prints exactly one line to stdout and flushes it::

    satpoint sim listening on http://127.0.0.1:PORT (capacity X rps)

(``https://`` with ``--tls-cert``/``--tls-key``; ``--tls-client-ca`` also requires client certificates
signed by that CA; in metastable mode a line of known rates comes just before it, see below) and it
serves until SIGTERM or SIGINT, then exits with code 0.

Pipeline
--------
``--pipeline SPEC`` (a Seldon Core 2 ``Pipeline`` or Triton ensemble file, or a chain ``A,B,C`` named ``--model``)
serves each step's model with its own slots and service time (``--step-service MODEL=SLOTSxMS``, repeated; the
others ``--slots`` x ``--service-ms``) and the pipeline as ``NAME`` and ``NAME.pipeline``, whose requests run
the DAG on the steps' queues (``satpoint.servers.sim.pipeline``): its capacity is the slowest model's C/S.  A
line before the listening line names each step's capacity and the bottleneck; the listening line's capacity is
the pipeline's.

Endpoints
---------
``GET /v2/health/live``, ``GET /v2/health/ready``, ``GET /v2/models/{m}/ready``: 200, empty body.
``GET /v2``: ``{"name": "satpoint-sim", "version": ..., "extensions": []}``.
``GET /v2/models/{m}``: model metadata (one input ``input-0`` FP32 ``[-1, 4]``, one output ``output-0``
FP32 ``[-1, 1]``). ``POST /v2/models/{m}/infer``: ``{"model_name", "id", "outputs": [{"name":
"output-0", "datatype": "FP32", "shape": [1, 1], "data": [0.5]}]}``. Every model route also exists
under ``/v2/models/{m}/versions/{v}/...`` (any version). The request body is read fully (by
Content-Length or chunked framing) but not parsed: ``id`` echoes the first ``"id": "<string>"`` found in
the body (a plain string without escapes), else a server-generated number. A model other than
``model`` (or, with ``--models N|A,B,..``, than the names served: a model mix on one server, every name
sharing the same slots, or with ``--model-queues`` each its own ``--slots`` and queue) gets 404
``{"error": "Model X not found"}``; ``POST /v2/repository/index`` lists the names served as READY; an
unknown route 404 ``{"error": "Not Found"}``; a known route with the wrong method (HEAD included) 405.
HTTP/1.1 keep-alive by default,
``Connection: close`` (and HTTP/1.0 without keep-alive) honoured; pipelined requests are answered in
order; malformed HTTP gets 400 and the connection is closed.

Service rule (virtual time, exact capacity)
-------------------------------------------
Time is ``time.perf_counter()``. A request *arrives* when its last byte has been parsed (time ``a``).
Requests are admitted in arrival order (one FIFO queue). Each slot remembers ``free_at`` (initially
server start). The request takes the slot with the earliest ``free_at``:

1. ``start = max(a, free_at)``; if ``start`` lies inside a pause, ``start`` = that pause's end;
2. ``finish = start + draw``; if ``finish`` lies inside a pause, ``finish`` = that pause's end;
3. the slot's ``free_at = finish``, the *ideal* finish, never the time a timer really fired;
4. the response is written at the first timer tick at or after ``finish`` (never before it).

So the long-run completion rate when overloaded is exactly ``slots / mean(draw)``; a response is late
by timer jitter (about 1 ms on uvloop), which never accumulates.

Draws (seeded by ``seed`` through numpy's Generator, independent of ``error_rate``): ``const``: always
``service_s``; ``exp``: exponential with mean ``service_s``; ``lognormal``: lognormal with sigma 0.5
of the underlying normal and ``mu = ln(service_s) - 0.5**2 / 2``, so its MEAN is ``service_s``.

Pauses
------
With ``pause_every_s=P`` and ``pause_s=D`` the server processes nothing during the last ``D`` seconds of
every period of ``P`` seconds counted from server start ``t0`` (the moment it starts listening): pause
``k`` is ``[t0 + k*P + (P - D), t0 + (k+1)*P)``, closed at its start and open at its end. Rules 1 and 2
above apply: a service that would start inside a pause starts at its end, and a service that would finish
inside a pause finishes at its end (its response is held). A service that spans a whole pause (only
possible when a draw exceeds ``D``) is not stretched. At a steady rate below capacity, about
``D/P`` of the requests arrive during a pause and wait up to ``D`` seconds.

Errors
------
A fraction ``error_rate`` of inference requests (Bernoulli draws, seeded) is answered HTTP 500 with
``{"error": "..."}``. **An error still occupies its slot for a full service time** (like a model that
fails after doing its work), so errors neither add nor remove capacity, and a 500 arrives at the same
time the 200 would have. Requests for unknown models or routes answer at once and take no slot.

Metastable mode
---------------
With ``metastable_high=HIGH``, ``metastable_low=LOW``, ``metastable_factor=F`` (``--metastable HIGH,LOW,F``)
the server is *degraded* from the moment more than ``HIGH`` requests wait for a slot (admitted, not in
service) until fewer than ``LOW`` do (the start that brings the queue below ``LOW`` is already a normal
one), and every service that *starts* while degraded takes ``F`` x its draw (and holds its slot that
long). A waiting request's finish is therefore settled when it starts (``sim_starts.StartTimer``), not
when it arrives. Known rates (``sim_rates.metastable_figures``, printed on a line of their own before the
listening line): ``collapse_rps`` = ``slots / service_s`` (offered load above it builds a queue that passes
``HIGH``), ``degraded_capacity_rps`` = ``slots / (service_s * F)`` (the goodput while collapsed), and
``recovery_rps`` = the same (offered load below it drains the queue below ``LOW``; 0 when ``LOW`` is 0,
as fewer than none never wait). Between the two rates the server has two steady states: normal if it
never tipped, degraded once it has.

Faults
------
``fault`` makes the server misbehave the way real servers and proxies do, to test what a client makes of
it. A fault changes only what is written and when a connection ends, **never the queueing model**: an
affected inference request is admitted like any other (it holds its slot for its service time, and the
service-time and error draws are the same as without the fault), and its faulty answer starts at the
time its answer was due. So the capacity seen by unaffected requests stays exactly ``slots / service_s``.

Per-request faults hit inference requests only (health, readiness and metadata are always answered
normally): none of the first ``fault_after`` inference requests, then each with probability
``fault_rate`` (default 1: all), drawn in arrival order from a seeded stream of their own:

``reset-mid-response``: the status line, headers and half the body, then, 50 ms later (so that the
    client has read them: a reset makes the receiving kernel drop unread data), a TCP reset (RST).
``truncated``: the status line, headers (``content-length`` of the whole body) and half the body, then
    a close (FIN).
``malformed``: ``HTTP/1.1 200 OK`` with ``content-length: 2x`` (no HTTP parser accepts it), then a close.
``slow-headers``: the status line, then the rest of the headers and the body ``slow_headers_ms`` later
    (default 1000); nothing else is written on that connection meanwhile.
``stall``: nothing, ever: the connection stays open, and answers to later requests on it (pipelined)
    wait behind it forever.
``error-body``: HTTP ``error_status`` (default 503) with a JSON body ``{"error": "..."}``: with
    ``error_framing`` ``length`` (default) framed by ``content-length``, keep-alive; with ``eof`` without
    ``content-length``, with ``connection: close``, the body ending when the connection closes (legal
    HTTP/1.1, and what HTTP/1.0-style error pages of proxies look like).
``connection-close``: the normal answer with ``connection: close``, then a close.

Connection faults act on every connection (all requests count):

``close-after``: the connection is closed (FIN) right after the answer to its ``close_after``-th
    request, without ``connection: close`` (requests that arrive after it are never answered).
``idle-timeout``: a connection with no request in progress and nothing received or written for
    ``idle_timeout_s`` is closed (FIN), as a server's keep-alive timeout does (checked every 1/20 of it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from satpoint.servers.sim.autoscale import spec as scale
from satpoint.servers.sim.http_protocol import serve
from satpoint.servers.sim.model import DISTS, ERROR_FRAMINGS, FAULTS, SimConfig, metastable_line
from satpoint.servers.sim.pipeline import SimPipeline
from satpoint.servers.sim.tls import SimTls

__all__ = ["SimConfig", "listening_line", "main", "run", "serve"]


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def listening_line(
    host: str, port: int, config: SimConfig, *, tls: bool = False, pipeline: SimPipeline | None = None
) -> str:
    scheme = "https" if tls else "http"
    capacity_rps = pipeline.capacity_rps if pipeline is not None else config.capacity_rps
    line = f"satpoint sim listening on {scheme}://{_url_host(host)}:{port} (capacity {capacity_rps:.10g} rps)"
    return line + (f" ({stream_line(config)})" if config.stream else "")


def stream_line(config: SimConfig) -> str:
    """What ``--stream`` adds to the listening line: the streamed answer and the capacity for streams."""
    return (
        f"streams: {config.stream_chunks} chunks, first after {config.stream_first_ms:g} ms, then every "
        f"{config.stream_gap_ms:g} ms; stream capacity {config.stream_capacity_rps:.10g} rps"
    )


def run(config: SimConfig, *, tls: SimTls | None = None, pipeline: SimPipeline | None = None) -> None:
    """Run the server on uvloop until SIGTERM/SIGINT, printing the listening line to stdout (``pipeline``:
    serve it, ``config`` from its ``configure``).

    Raises ``SatpointError`` if it cannot listen (e.g. the port is taken).
    """
    import uvloop

    def announce(host: str, port: int) -> None:
        figures = metastable_line(config)
        if figures is not None:
            print(figures, flush=True)
        if pipeline is not None:
            print(pipeline.line(), flush=True)
        print(listening_line(host, port, config, tls=tls is not None, pipeline=pipeline), flush=True)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            answered = runner.run(serve(config, on_listening=announce, tls=tls, pipeline=pipeline))
        except KeyboardInterrupt:  # a SIGINT that arrived before the handlers were installed
            return
    print(f"satpoint sim stopped after {answered} responses", file=sys.stderr, flush=True)


def pipeline_from_options(spec: str | None, step_services: Sequence[str], config: SimConfig) -> SimPipeline | None:
    """``--pipeline SPEC`` with its ``--step-service`` options (None without ``--pipeline``; ``ConfigError``
    for a bad spec, a step service without ``--pipeline``)."""
    from satpoint.errors import ConfigError

    if spec is None:
        if step_services:
            raise ConfigError("sim: --step-service needs --pipeline")
        return None
    return SimPipeline.from_options(
        spec, step_services, slots=config.slots, service_ms=config.service_ms, name=config.model
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m satpoint.servers.sim.server",
        description="Synthetic OIP REST server with capacity slots / service time.",
    )
    d = SimConfig()
    p.add_argument("--host", default=d.host, help=f"address to bind (default {d.host})")
    p.add_argument("--port", type=int, default=d.port, help=f"port, 0 picks a free one (default {d.port})")
    p.add_argument("--slots", type=int, default=d.slots, help=f"parallel slots (default {d.slots})")
    p.add_argument("--service-ms", type=float, default=d.service_ms, help=f"mean service time (default {d.service_ms})")
    p.add_argument("--dist", choices=DISTS, default=d.dist, help=f"service-time distribution ({d.dist})")
    p.add_argument("--pause-every", type=float, default=None, metavar="S", help="pause period in seconds")
    p.add_argument("--pause-s", type=float, default=d.pause_s, metavar="S", help="pause length, seconds")
    p.add_argument("--error-rate", type=float, default=d.error_rate, help="fraction answered HTTP 500")
    p.add_argument("--model", default=d.model, help=f"model name served (default {d.model})")
    p.add_argument(
        "--models", default=None, metavar="N|A,B,..", help="serve N models (MODEL-1..MODEL-N) or these names"
    )
    p.add_argument("--model-queues", action="store_true", help="each model its own --slots and queue")
    p.add_argument("--seed", type=int, default=d.seed, help=f"seed of the draws (default {d.seed})")
    p.add_argument("--fault", choices=FAULTS, default=None, help="misbehave this way (see the module's doc)")
    p.add_argument(
        "--fault-rate", type=float, default=1.0, metavar="F", help="fraction of inference requests hit (default 1)"
    )
    p.add_argument("--fault-after", type=int, default=0, metavar="N", help="the first N inference requests are spared")
    p.add_argument("--close-after", type=int, default=None, metavar="N", help="close-after: requests per connection")
    p.add_argument("--idle-timeout", type=float, default=None, metavar="S", help="idle-timeout: seconds")
    p.add_argument("--slow-headers-ms", type=float, default=None, metavar="MS", help="slow-headers: delay (1000)")
    p.add_argument("--error-status", type=int, default=None, metavar="CODE", help="error-body: status (503)")
    p.add_argument("--error-framing", choices=ERROR_FRAMINGS, default=None, help="error-body: length or eof")
    p.add_argument(
        "--metastable", default=None, metavar="HIGH,LOW,FACTOR", help="metastable mode (see the module's doc)"
    )
    p.add_argument("--stream", action="store_true", help="announce the capacity for streamed answers (infer_stream)")
    p.add_argument("--stream-first-ms", type=float, default=d.stream_first_ms, help="streams: first chunk after (ms)")
    p.add_argument("--stream-gap-ms", type=float, default=d.stream_gap_ms, help="streams: then one every (ms)")
    p.add_argument("--stream-chunks", type=int, default=d.stream_chunks, help="streams: chunks per answer")
    p.add_argument("--pipeline", default=None, metavar="SPEC", help="serve a pipeline (see the module's doc)")
    p.add_argument(
        "--step-service", action="append", default=[], metavar="MODEL=SLOTSxMS", help="--pipeline: a step's service"
    )
    p.add_argument("--autoscale", default=None, metavar="MIN:MAX", help="replicas behind an HPA-like rule")
    p.add_argument("--scale-delay-s", type=float, default=scale.DEFAULT_DELAY_S, help="--autoscale: to readiness")
    p.add_argument("--scale-target", type=float, default=scale.DEFAULT_TARGET, help="--autoscale: utilisation")
    p.add_argument("--scale-sync-s", type=float, default=scale.DEFAULT_SYNC_S, help="--autoscale: sync period")
    p.add_argument("--scale-down-window-s", type=float, default=scale.DEFAULT_DOWN_WINDOW_S, help="--autoscale")
    p.add_argument("--tls-cert", default=None, metavar="PEM", help="serve HTTPS with this certificate chain")
    p.add_argument("--tls-key", default=None, metavar="PEM", help="private key for --tls-cert")
    p.add_argument("--tls-client-ca", default=None, metavar="PEM", help="require client certificates (mTLS)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and serve until SIGTERM/SIGINT.

    Returns 0 after a clean stop, 1 if it cannot listen; bad arguments exit with argparse's code 2.
    """
    from satpoint.errors import ConfigError, SatpointError

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = SimConfig.from_args(args)
        pipeline = pipeline_from_options(args.pipeline, args.step_service, config)
        if pipeline is not None:
            config = pipeline.configure(config)
        tls = SimTls.from_paths(args.tls_cert, args.tls_key, args.tls_client_ca)
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
    try:
        run(config, tls=tls, pipeline=pipeline)
    except SatpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
