"""The control-plane client of an OIP gRPC target: liveness, readiness, metadata, one inference, one stream,
timed inferences for the probes and the model repository, through one object.

``GrpcControl`` is ``grpc_repository.GrpcRepositoryClient`` (index, load, unload, ``wait_absent``, with its
errors) and the calls of ``grpc_control`` bound to the target's address, metadata (credentials included)
and TLS: grpcio in plaintext, over TLS the hot path's ``ssl.SSLContext`` (``grpc_unary``); a stream is one
``ModelStreamInfer`` on the hot path's own client (``grpc_stream.stream_once``), as the load sends it.
``timeout_s`` bounds each repository call; the other calls keep their own limits.  The gRPC protocol as
satpoint speaks it has no statistics call (Triton's are read over REST).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from satpoint.transports.control_call import Inference
from satpoint.transports.grpc import grpc_control
from satpoint.transports.grpc.codec import normalize_metadata
from satpoint.transports.grpc.grpc_control import GrpcTarget
from satpoint.transports.grpc.grpc_repository import GrpcRepositoryClient

if TYPE_CHECKING:
    from satpoint.transports.grpc.stream import Decoder, StreamAnswer


@dataclass(frozen=True)
class GrpcControl(GrpcRepositoryClient):
    """Every control call to one gRPC target (``base_url``: ``grpc://h:p``, ``grpcs://h:p`` or ``h:p``)."""

    #: the status of a successful inference (gRPC OK)
    ok_status: ClassVar[int] = 0

    @classmethod
    def of(cls, target: GrpcTarget, headers: Sequence[tuple[str, str]] = ()) -> GrpcControl:
        """The client of an address already parsed (its TLS settings kept)."""
        scheme = "grpcs" if target.tls else "grpc"
        return cls(f"{scheme}://{target.address}", tuple(headers), target.tls_options())

    def live(self) -> bool:
        """``ServerLive``; False when the server cannot be reached."""
        return grpc_control.server_live(self.target, self.headers)

    def ready(self, model: str | None = None) -> bool:
        """``ServerReady``, or ``ModelReady`` of ``model``; False when the server cannot be reached."""
        if model is None:
            return grpc_control.server_ready(self.target, self.headers)
        return grpc_control.model_ready(self.target, model, headers=self.headers)

    def metadata(self, model: str, version: str | None = None) -> dict[str, Any]:
        """``ModelMetadata`` in the REST metadata's JSON shape; ``ModelNotFound`` when the model is not there."""
        return grpc_control.model_metadata(self.target, model, version, self.headers)

    def server_metadata(self) -> dict[str, Any] | None:
        """``ServerMetadata`` (``name``, ``version``, ``extensions``); ``TargetUnreachable`` when it fails."""
        return grpc_control.server_metadata(self.target, self.headers)

    def infer_one(self, call: Inference, stream: bool = False) -> tuple[int, str, bytes]:
        """One ``ModelInfer`` (a stream is ``stream_one``): the gRPC code, its name and details, the serialized
        response (b"" on failure)."""
        if stream:
            raise ValueError("a gRPC stream is GrpcControl.stream_one")
        headers = (*self.headers, *call.extra_headers)
        return grpc_control.infer_once(self.target, call.body, headers, call.timeout_s)

    def timed_infers(self, call: Inference, count: int, give_up_after_s: float | None = None) -> list[float]:
        """The seconds of ``count`` sequential ``ModelInfer`` calls over one channel (``grpc_control.timed_infers``;
        sequential calls on one channel are not cut short: ``give_up_after_s`` is REST's)."""
        headers = (*self.headers, *call.extra_headers)
        return grpc_control.timed_infers(self.target, call.body, count, headers, call.timeout_s)

    def stream_one(self, request: bytes, decoder: Decoder = "mlserver", timeout_s: float = 30.0) -> StreamAnswer:
        """One whole ``ModelStreamInfer`` on the hot path's client (its TLS context included)."""
        from satpoint.transports.grpc.stream import stream_once

        target = self.target
        return stream_once(
            target.host,
            target.port,
            request,
            decoder=decoder,
            metadata=tuple(normalize_metadata(self.headers)),
            ssl=target.ssl_context(),
            server_hostname=target.server_name,
            timeout_s=timeout_s,
        )
