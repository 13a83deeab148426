"""The synthetic OIP server over gRPC: the same capacity model as the REST sim (``satpoint.servers.sim.server``).

Run it with ``python -m satpoint.servers.sim.grpc_server --port 0 --slots 2 --service-ms 20``.  Once listening
it prints exactly one line to stdout and flushes it::

    satpoint sim listening on grpc://127.0.0.1:PORT (capacity X rps)

and serves until SIGTERM or SIGINT, then exits with code 0.

Service ``inference.GRPCInferenceService``: ``ServerLive``, ``ServerReady`` (true), ``ModelReady``
(true for ``model``, else false), ``ServerMetadata``, ``ModelMetadata`` (input ``input-0`` FP32
``[-1, 4]``, output ``output-0`` FP32 ``[-1, 1]``; another model -> NOT_FOUND) and ``ModelInfer``.

``ModelInfer`` follows the REST sim's service rule exactly (``sim_model.SlotScheduler``): a request
*arrives* when grpc hands it to the handler; ``slots`` slots fed by one FIFO queue in arrival order;
``finish = max(arrival, slot free_at) + draw`` (deferred past pauses); the slot's ``free_at`` is that
ideal finish; the response is sent as soon as ``finish`` has passed (``_Wake``: one timer, then a
re-check per loop iteration, so never early and late only by loop latency).  A fraction
``error_rate`` fails with gRPC ``INTERNAL`` (13) at the time the answer would have come, after a full
service time.  A request for another model fails at once with ``NOT_FOUND`` and takes no slot.  The
answer is ``{"model_name", "id" (echoed), "outputs": [{"output-0", FP32, [1, 1], [0.5]}]}``, as raw
output contents when the request used ``raw_input_contents`` (as MLServer does).  ``--metastable
HIGH,LOW,FACTOR`` applies the REST sim's metastable mode (``sim_model.MetastableScheduler``) the same way.

``ModelStreamInfer`` streams the answer with the REST sim's chunk timing (``sim_model.stream_chunk_offsets``:
``--stream-first-ms``, ``--stream-gap-ms``, ``--stream-chunks``): like MLServer it reads the stream's first
request only (the model is chosen from it), is admitted like a unary call with the last chunk's offset as
its service time (it holds its slot until then), sends chunk ``i`` (a ``ModelInferResponse``, MLServer's
bare message, ``output-0`` = ``[i]``) at ``start + offsets[i]``, and ends the stream with OK.  A request
drawn to fail (``error_rate``) ends with ``INTERNAL`` at the time its last chunk was due, instead of that
chunk (the REST sim sends an error event there): MLServer's ``context.abort`` mid-stream.  The metastable
mode does not stream (``UNIMPLEMENTED``, as the REST sim's 501).

The server is ``grpc.aio`` (C-core HTTP/2, a Python handler per call: about 0.2-0.3 ms of CPU per
call), which keeps up with a few thousand calls per second on one core: ample for tests around
1 000 rps.  Optional TLS with ``--tls-cert``/``--tls-key`` (PEM files).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import math
import signal
import struct
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc

from satpoint.errors import ConfigError
from satpoint.servers.sim.metastable import MetastableScheduler, Ticket
from satpoint.servers.sim.model import DISTS, SimConfig, SlotScheduler, metastable_line
from satpoint.servers.sim.starts import StartTimer
from satpoint.servers.sim.tls import SimTls
from satpoint.transports.grpc.grpc_proto import SERVICE, message

__all__ = ["SimConfig", "listening_line", "main", "run", "serve"]

perf = time.perf_counter


#: below this, wait for a finish time by re-checking each loop iteration rather than by a (ms) timer
_SPIN_S = 0.0005


class _Wake:
    """Wakes each waiting call at its virtual finish time, with a single loop timer (as the REST sim's
    ``_Release`` does).  The timer is armed for the earliest finish time itself; libuv counts whole
    milliseconds, so it may fire up to about 1 ms early: due-ness is re-checked on ``perf_counter`` and,
    within ``_SPIN_S`` of it, re-checked on the next loop iteration (the loop serves I/O meanwhile).  A call
    is never answered before its finish time and is late only by loop latency, not by up to 2 ms of timer
    rounding (a sleep of whole milliseconds rounded up, then libuv's own rounding)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._armed_for_s = math.inf

    def at(self, finish_s: float) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._seq += 1
        heapq.heappush(self._heap, (finish_s, self._seq, fut))
        if finish_s < self._armed_for_s:
            self._arm(finish_s)
        return fut

    def _arm(self, at_s: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for_s = at_s
        loop = asyncio.get_running_loop()
        delay_s = at_s - perf()
        self._timer = loop.call_soon(self._fire) if delay_s <= _SPIN_S else loop.call_later(delay_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._armed_for_s = math.inf
        heap = self._heap
        now_s = perf()
        while heap and heap[0][0] <= now_s:
            fut = heapq.heappop(heap)[2]
            if not fut.done():  # a call cancelled meanwhile (the client gave up) has nothing to wake
                fut.set_result(None)
        if heap:
            self._arm(heap[0][0])


class _SimServicer:
    def __init__(self, config: SimConfig, origin_s: float) -> None:
        self.config = config
        self.scheduler = SlotScheduler.from_config(config, origin_s)
        self.wake = _Wake()
        #: metastable mode: the scheduler that takes the place of ``scheduler``, and its start timer
        self.metastable: MetastableScheduler | None = None
        self.starts: StartTimer | None = None
        if config.metastable:
            self.metastable = MetastableScheduler.from_config(config, origin_s, on_start=_started)
        self.answered = 0
        self.next_id = 0
        self._req = message("ModelInferRequest")
        self._resp = message("ModelInferResponse")
        meta = message("ModelMetadataResponse")(name=config.model, versions=[], platform="satpoint-sim")
        meta.inputs.add(name="input-0", datatype="FP32", shape=[-1, 4])
        meta.outputs.add(name="output-0", datatype="FP32", shape=[-1, 1])
        self._meta = meta

    # plain calls ----------------------------------------------------------------------------------------
    async def server_live(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return message("ServerLiveResponse")(live=True)

    async def server_ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return message("ServerReadyResponse")(ready=True)

    async def model_ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return message("ModelReadyResponse")(ready=request.name in self.config.served_models)

    async def server_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        from satpoint._version import __version__

        return message("ServerMetadataResponse")(name="satpoint-sim", version=__version__, extensions=[])

    async def model_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if request.name not in self.config.served_models:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"Model {request.name} not found")
        return self._meta

    # inference ----------------------------------------------------------------------------------------------
    async def model_infer(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        arrival_s = perf()
        req = self._req.FromString(request)
        if req.model_name not in self.config.served_models:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"Model {req.model_name} not found")
        if self.metastable is None:
            admission = self.scheduler.admit(arrival_s)
            finish_s, error = admission.finish_s, admission.error
        else:
            finish_s, error = await self._admit_metastable(arrival_s)
        if perf() < finish_s:
            await self.wake.at(finish_s)
        self.answered += 1
        if error:
            await context.abort(grpc.StatusCode.INTERNAL, "simulated error (satpoint sim error_rate)")
        self.next_id += 1
        resp = self._resp(model_name=self.config.model, id=req.id or str(self.next_id))
        out = resp.outputs.add(name="output-0", datatype="FP32", shape=[1, 1])
        if req.raw_input_contents:
            resp.raw_output_contents.append(struct.pack("<f", 0.5))
        else:
            out.contents.fp32_contents.append(0.5)
        data: bytes = resp.SerializeToString()
        return data

    async def model_stream_infer(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
        """``ModelStreamInfer``: the first request's answer in chunks at the shared offsets (module doc)."""
        request = await anext(aiter(requests), None)  # the first request selects the model; later ones ignored
        if request is None:
            return
        arrival_s = perf()
        req = self._req.FromString(request)
        if req.model_name != self.config.model:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"Model {req.model_name} not found")
        if self.metastable is not None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the metastable mode does not stream")
        offsets = self.config.stream_offsets_s
        admission = self.scheduler.admit(arrival_s, service_s=offsets[-1])
        fail_at = len(offsets) - 1 if admission.error else -1
        self.next_id += 1
        rid = req.id or str(self.next_id)
        for i, offset in enumerate(offsets):
            due_s = admission.start_s + offset
            if perf() < due_s:
                await self.wake.at(due_s)
            if i == fail_at:
                self.answered += 1
                await context.abort(grpc.StatusCode.INTERNAL, "simulated error mid-stream (satpoint sim error_rate)")
            resp = self._resp(model_name=self.config.model, id=rid)
            resp.outputs.add(name="output-0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(float(i))
            yield resp.SerializeToString()
        self.answered += 1

    async def _admit_metastable(self, arrival_s: float) -> tuple[float, bool]:
        """Metastable mode: admit, wait for the service to start if a slot is not free; (finish, error)."""
        assert self.metastable is not None
        ticket = self.metastable.admit(arrival_s)
        if ticket.finish_s is None:
            if self.starts is None:
                self.starts = StartTimer(self.metastable, asyncio.get_running_loop())
            started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            ticket.payload = started
            self.starts.poke()
            await started
        assert ticket.finish_s is not None
        return ticket.finish_s, ticket.error

    def close(self) -> None:
        if self.starts is not None:
            self.starts.close()


def _started(ticket: Ticket) -> None:
    """Metastable mode: a waiting call's service started (its finish is known): wake the call."""
    started = ticket.payload
    if started is not None and not started.done():  # done: the call was cancelled meanwhile
        started.set_result(None)


def _handler(servicer: _SimServicer) -> grpc.GenericRpcHandler:
    def typed(fn: Callable[..., Any], req: str) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            fn,
            request_deserializer=message(req).FromString,
            response_serializer=lambda m: m.SerializeToString(),
        )

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "ServerLive": typed(servicer.server_live, "ServerLiveRequest"),
            "ServerReady": typed(servicer.server_ready, "ServerReadyRequest"),
            "ModelReady": typed(servicer.model_ready, "ModelReadyRequest"),
            "ServerMetadata": typed(servicer.server_metadata, "ServerMetadataRequest"),
            "ModelMetadata": typed(servicer.model_metadata, "ModelMetadataRequest"),
            # bytes in, bytes out: parsed and built in the handler
            "ModelInfer": grpc.unary_unary_rpc_method_handler(servicer.model_infer),
            "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(servicer.model_stream_infer),
        },
    )


async def serve(
    config: SimConfig,
    *,
    stop: asyncio.Event | None = None,
    on_listening: Callable[[str, int], None] | None = None,
    handle_signals: bool = True,
    tls: SimTls | tuple[bytes, bytes] | None = None,
) -> int:
    """Serve ``config`` over gRPC until ``stop`` is set (or SIGTERM/SIGINT with ``handle_signals``).

    ``tls`` serves TLS: a :class:`SimTls` (with ``client_ca_file``: mTLS), or (certificate chain PEM,
    private key PEM).  Calls ``on_listening(host, port)``
    once listening (the real port, also when ``config.port`` is 0).  Returns the number of answers.
    ``config.fault`` is for the REST sim only (a ``ConfigError`` here).
    """
    if config.fault is not None:
        raise ConfigError(f"sim: fault {config.fault!r} is simulated by the REST sim only (not over gRPC)")
    loop = asyncio.get_running_loop()
    stop_event = stop if stop is not None else asyncio.Event()
    origin_s = perf()
    servicer = _SimServicer(config, origin_s)
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 256 << 20)])
    server.add_generic_rpc_handlers((_handler(servicer),))
    host = f"[{config.host}]" if ":" in config.host else config.host
    if tls is not None:
        creds = tls.grpc_credentials() if isinstance(tls, SimTls) else grpc.ssl_server_credentials([(tls[1], tls[0])])
        port = server.add_secure_port(f"{host}:{config.port}", creds)
    else:
        port = server.add_insecure_port(f"{host}:{config.port}")
    if port == 0:
        raise OSError(f"cannot listen on {host}:{config.port}")
    await server.start()
    installed: list[signal.Signals] = []
    try:
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, stop_event.set)
                except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
                    continue
                installed.append(sig)
        if on_listening is not None:
            on_listening(config.host, port)
        await stop_event.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        with contextlib.suppress(Exception):
            await server.stop(grace=0.5)
        servicer.close()
    return servicer.answered


def listening_line(host: str, port: int, config: SimConfig, *, tls: bool = False) -> str:
    h = f"[{host}]" if ":" in host else host
    scheme = "grpcs" if tls else "grpc"
    line = f"satpoint sim listening on {scheme}://{h}:{port} (capacity {config.capacity_rps:.6g} rps)"
    if not config.stream:
        return line
    from satpoint.servers.sim.server import stream_line  # the REST sim's wording, one place

    return f"{line} ({stream_line(config)})"


def run(config: SimConfig, *, tls: SimTls | tuple[bytes, bytes] | None = None) -> None:
    """Run the gRPC sim on uvloop until SIGTERM/SIGINT, printing the listening line to stdout."""
    import uvloop

    def announce(host: str, port: int) -> None:
        figures = metastable_line(config)
        if figures is not None:
            print(figures, flush=True)
        print(listening_line(host, port, config, tls=tls is not None), flush=True)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            answered = runner.run(serve(config, on_listening=announce, tls=tls))
        except KeyboardInterrupt:
            return
    print(f"satpoint sim stopped after {answered} responses", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m satpoint.servers.sim.grpc_server",
        description="Synthetic OIP gRPC server with capacity slots / service time.",
    )
    d = SimConfig()
    p.add_argument("--host", default=d.host, help=f"address to bind (default {d.host})")
    p.add_argument("--port", type=int, default=8081, help="port, 0 picks a free one (default 8081)")
    p.add_argument("--slots", type=int, default=d.slots, help=f"parallel slots (default {d.slots})")
    p.add_argument("--service-ms", type=float, default=d.service_ms, help=f"mean service time ({d.service_ms})")
    p.add_argument("--dist", choices=DISTS, default=d.dist, help=f"service-time distribution ({d.dist})")
    p.add_argument("--pause-every", type=float, default=None, metavar="S", help="pause period in seconds")
    p.add_argument("--pause-s", type=float, default=d.pause_s, metavar="S", help="pause length, seconds")
    p.add_argument("--error-rate", type=float, default=d.error_rate, help="fraction failed with INTERNAL")
    p.add_argument("--model", default=d.model, help=f"model name served (default {d.model})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"seed of the draws (default {d.seed})")
    p.add_argument("--metastable", default=None, metavar="HIGH,LOW,FACTOR", help="metastable mode (see sim_model)")
    p.add_argument("--stream", action="store_true", help="streams asked for (ModelStreamInfer is always served)")
    p.add_argument("--stream-first-ms", type=float, default=d.stream_first_ms, help="a stream's first chunk, ms")
    p.add_argument("--stream-gap-ms", type=float, default=d.stream_gap_ms, help="then a chunk every ... ms")
    p.add_argument("--stream-chunks", type=int, default=d.stream_chunks, help="chunks per stream")
    p.add_argument("--tls-cert", default=None, metavar="PEM", help="serve TLS with this certificate chain")
    p.add_argument("--tls-key", default=None, metavar="PEM", help="private key for --tls-cert")
    p.add_argument("--tls-client-ca", default=None, metavar="PEM", help="require client certificates (mTLS)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = SimConfig.from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))
    try:
        tls = SimTls.from_paths(args.tls_cert, args.tls_key, args.tls_client_ca)
    except ValueError as exc:
        parser.error(str(exc))
    run(config, tls=tls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
