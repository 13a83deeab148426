"""Attaching to a server over OIP gRPC: readiness, metadata, payloads and a first request."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Self

from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.errors import PayloadError, TargetUnreachable
from satpoint.payloads.build import from_file, from_metadata
from satpoint.redact import redact_url
from satpoint.transports import grpc_control
from satpoint.transports.base import TransportFactory
from satpoint.transports.grpc_codec import encode_infer_request, normalize_metadata
from satpoint.transports.grpc_control import GrpcTarget


@dataclass(frozen=True)
class GrpcFactoryBuilder:
    """Picklable recipe for the fast gRPC transport, built inside each generator process."""

    target: GrpcTarget
    messages: tuple[bytes, ...]
    max_inflight: int
    metadata: tuple[tuple[str, str], ...] = field(repr=False)  # it carries the credentials: not in reprs
    #: HTTP/2 connections: None = automatic (two, more while the server's MAX_CONCURRENT_STREAMS binds)
    connections: int | None = None
    #: streamed answers (``ModelStreamInfer``, ``transports.grpc_stream``) and how its messages decode
    stream: bool = False
    decoder: str = "mlserver"

    def with_max_inflight(self, max_inflight: int) -> Self:
        """The same recipe with another in-flight cap (each generator process gets its share)."""
        return replace(self, max_inflight=max_inflight)

    def __call__(self) -> TransportFactory:
        from satpoint.transports.grpc_wire import grpc_factory

        if self.stream:
            from satpoint.transports.grpc_stream import grpc_stream_factory

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

    def probe_service_s(self, count: int) -> float | None:
        """Median of ``count`` sequential ModelInfer calls over one channel, after one that opens it (streams:
        of ``count`` whole ``ModelStreamInfer`` streams, each on a connection of its own: a decoupled Triton
        model refuses ModelInfer)."""
        if self.stream:
            times = sorted(t for t in (self._stream_s() for _ in range(count)) if t is not None)
            return times[len(times) // 2] if times else None
        times = sorted(grpc_control.timed_infers(self.target, self.messages[0], count, self.metadata))
        return times[len(times) // 2] if times else None

    def _stream_s(self) -> float | None:
        from satpoint.metrics.records import Outcome
        from satpoint.transports.grpc_stream import stream_once

        answer = stream_once(
            self.target.host,
            self.target.port,
            self.messages[0],
            decoder="triton" if self.decoder == "triton" else "mlserver",
            metadata=self.metadata,
            ssl=self.target.ssl_context(),
            server_hostname=self.target.server_name,
        )
        return answer.done_s if answer.outcome == Outcome.OK else None


def prepare_grpc(
    spec: Target, max_inflight: int, payload_count: int = 8, seed: int = 0, connections: int | None = None
) -> PreparedTarget:
    """Check a gRPC target, build and serialize the requests once, and try one before the test;
    ``connections`` fixes the number of HTTP/2 connections (None: automatic)."""
    target = grpc_control.parse_target(spec.url, options=spec.tls_options())
    headers = spec.wire_headers
    if not grpc_control.server_ready(target, headers):
        raise TargetUnreachable(
            f"{redact_url(spec.url)} does not answer or is not ready (ServerReady failed or is false)"
        )
    meta = grpc_control.model_metadata(target, spec.model, spec.version, headers)
    docs = (
        from_file(spec.payload_file)
        if spec.payload_file is not None
        else from_metadata(meta, spec.batch_size, payload_count, seed)
    )
    messages = tuple(encode_infer_request(d, spec.model, spec.version, raw=spec.grpc_raw) for d in docs)
    stream = bool(getattr(spec, "stream", False))
    decoder = stream_decoder(target, headers) if stream else "mlserver"
    if stream:
        took_s = _test_stream(spec, target, messages[0], decoder, headers)
    else:
        t0 = time.perf_counter()
        code, status, _ = grpc_control.infer_once(target, messages[0], headers)
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
        ),
        payload_bytes=len(messages[0]),
        latency_hint_s=took_s,
    )


def stream_decoder(target: GrpcTarget, headers: Sequence[tuple[str, str]] = ()) -> str:
    """How the server's ``ModelStreamInfer`` messages decode: ``triton`` (``ModelStreamInferResponse``) when
    its ServerMetadata names Triton, else ``mlserver`` (a bare ``ModelInferResponse``: MLServer, Seldon Core 2)."""
    name = str(grpc_control.server_metadata(target, headers).get("name", ""))
    return "triton" if "triton" in name.lower() else "mlserver"


def _test_stream(
    spec: Target, target: GrpcTarget, message: bytes, decoder: str, headers: Sequence[tuple[str, str]]
) -> float:
    """One ``ModelStreamInfer`` before the run, on the hot path's own client: it must end OK with at least one
    chunk; returns how long it took (seconds)."""
    from satpoint.transports.grpc_stream import stream_once

    answer = stream_once(
        target.host,
        target.port,
        message,
        decoder="triton" if decoder == "triton" else "mlserver",
        metadata=tuple(normalize_metadata(headers)),
        ssl=target.ssl_context(),
        server_hostname=target.server_name,
    )
    if answer.outcome != 0 or answer.chunks < 1:
        what = f"{answer.outcome.name.lower()} (status {answer.status})" if answer.outcome != 0 else "no chunk"
        raise PayloadError(
            f"a test stream (ModelStreamInfer) to {spec.model} failed before the run: {what} after "
            f"{answer.chunks} chunks; does the model stream (MLServer: a runtime with predict_stream, "
            "parallel_workers 0)?"
        )
    return answer.done_s or 0.0
