"""Attaching to a server over OIP gRPC: readiness, metadata, payloads and a first request."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Self

from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.errors import PayloadError, TargetUnreachable
from satpoint.payloads.build import from_file, from_metadata
from satpoint.redact import redact_url
from satpoint.transports.base import TransportFactory
from satpoint.transports.control_call import Inference
from satpoint.transports.grpc.codec import encode_infer_request, normalize_metadata
from satpoint.transports.grpc.control_grpc import GrpcControl
from satpoint.transports.grpc.grpc_control import GrpcTarget, parse_target


@dataclass(frozen=True)
class GrpcFactoryBuilder:
    """Picklable recipe for the fast gRPC transport, built inside each generator process."""

    target: GrpcTarget
    messages: tuple[bytes, ...]
    max_inflight: int
    metadata: tuple[tuple[str, str], ...] = field(repr=False)  # it carries the credentials: not in reprs
    #: HTTP/2 connections: None = automatic (two, more while the server's MAX_CONCURRENT_STREAMS binds)
    connections: int | None = None
    #: streamed answers (``ModelStreamInfer``, ``transports.grpc.stream``) and how its messages decode
    stream: bool = False
    decoder: str = "mlserver"
    #: the target's control client, the pre-flight's (its probes); None: one built from ``target``
    control: GrpcControl | None = field(default=None, repr=False, compare=False)

    def with_max_inflight(self, max_inflight: int) -> Self:
        """The same recipe with another in-flight cap (each generator process gets its share)."""
        return replace(self, max_inflight=max_inflight)

    def __call__(self) -> TransportFactory:
        from satpoint.transports.grpc.wire import grpc_factory

        if self.stream:
            from satpoint.transports.grpc.stream import grpc_stream_factory

            return grpc_stream_factory(
                self.target.host,
                self.target.port,
                self.messages,
                self.max_inflight,
                decoder="triton" if self.decoder == "triton" else "mlserver",
                connections=self.connections,
                metadata=self.metadata,
                ssl=self.target.ssl_context(),
                server_hostname=self.target.server_name,
            )
        return grpc_factory(
            self.target.host,
            self.target.port,
            self.messages,
            self.max_inflight,
            connections=self.connections,
            metadata=self.metadata,
            ssl=self.target.ssl_context(),
            server_hostname=self.target.server_name,
        )

    def probe_service_s(self, count: int, at: int = 0) -> float | None:
        """Median of ``count`` sequential ModelInfer calls of message ``at`` over one channel, after one that
        opens it (streams: of ``count`` whole ``ModelStreamInfer`` streams, each on a connection of its own:
        a decoupled Triton model refuses ModelInfer)."""
        control = self.control if self.control is not None else GrpcControl.of(self.target, self.metadata)
        if self.stream:
            times = sorted(t for t in (self._stream_s(control, at) for _ in range(count)) if t is not None)
            return times[len(times) // 2] if times else None
        times = sorted(control.timed_infers(Inference(self.messages[at], ""), count))
        return times[len(times) // 2] if times else None

    def _stream_s(self, control: GrpcControl, at: int = 0) -> float | None:
        from satpoint.metrics.records import Outcome

        answer = control.stream_one(self.messages[at], "triton" if self.decoder == "triton" else "mlserver")
        return answer.done_s if answer.outcome == Outcome.OK else None


def prepare_grpc(
    spec: Target,
    max_inflight: int,
    payload_count: int = 8,
    seed: int = 0,
    connections: int | None = None,
    control: GrpcControl | None = None,
) -> PreparedTarget:
    """Check a gRPC target, build and serialize the requests once, and try one before the test;
    ``connections`` fixes the number of HTTP/2 connections (None: automatic).  Every control call through
    ``control`` (the target's client, kept in the prepared target and its recipe for the probes)."""
    target = parse_target(spec.url, options=spec.tls_options())
    headers = spec.wire_headers
    client = control if control is not None else GrpcControl(spec.url, headers, spec.tls_options())
    if not client.ready():
        raise TargetUnreachable(
            f"{redact_url(spec.url)} does not answer or is not ready (ServerReady failed or is false)"
        )
    meta = client.metadata(spec.model, spec.version)
    docs = (
        from_file(spec.payload_file)
        if spec.payload_file is not None
        else from_metadata(meta, spec.batch_size, payload_count, seed)
    )
    messages = tuple(encode_infer_request(d, spec.model, spec.version, raw=spec.grpc_raw) for d in docs)
    stream = bool(getattr(spec, "stream", False))
    decoder = stream_decoder(client) if stream else "mlserver"
    if stream:
        took_s = _test_stream(spec, client, messages[0], decoder)
    else:
        t0 = time.perf_counter()
        code, status, _ = client.infer_one(Inference(messages[0], spec.model, spec.version))
        took_s = time.perf_counter() - t0
        if code != 0:
            raise PayloadError(f"a test request to {spec.model} failed before the run: gRPC {status}")
    return PreparedTarget(
        spec=spec,
        metadata=meta,
        payload_docs=docs,
        builder=GrpcFactoryBuilder(
            target,
            messages,
            max_inflight,
            tuple(normalize_metadata(headers)),
            connections=connections,
            stream=stream,
            decoder=decoder,
            control=client,
        ),
        payload_bytes=len(messages[0]),
        latency_hint_s=took_s,
        control=client,
    )


def stream_decoder(client: GrpcControl) -> str:
    """How the server's ``ModelStreamInfer`` messages decode: ``triton`` (``ModelStreamInferResponse``) when
    its ServerMetadata names Triton, else ``mlserver`` (a bare ``ModelInferResponse``: MLServer, Seldon Core 2)."""
    name = str((client.server_metadata() or {}).get("name", ""))
    return "triton" if "triton" in name.lower() else "mlserver"


def _test_stream(spec: Target, client: GrpcControl, message: bytes, decoder: str) -> float:
    """One ``ModelStreamInfer`` before the run, on the hot path's own client: it must end OK with at least one
    chunk; returns how long it took (seconds)."""
    answer = client.stream_one(message, "triton" if decoder == "triton" else "mlserver")
    if answer.outcome != 0 or answer.chunks < 1:
        what = f"{answer.outcome.name.lower()} (status {answer.status})" if answer.outcome != 0 else "no chunk"
        raise PayloadError(
            f"a test stream (ModelStreamInfer) to {spec.model} failed before the run: {what} after "
            f"{answer.chunks} chunks; does the model stream (MLServer: a runtime with predict_stream, "
            "parallel_workers 0)?"
        )
    return answer.done_s or 0.0
