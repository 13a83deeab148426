"""One control-plane client per protocol: what satpoint asks a server outside the load.

The pre-flight (readiness, metadata, one test inference or stream), the probes of the low-load answer time
and the cool-downs, ``coldstart``, ``--resident`` (the model repository) and Triton's statistics all go
through one ``ControlClient``: ``RestControl`` (``control_rest``) or ``GrpcControl`` (``control_grpc``), built
by ``control_for`` from the target's URL, headers and TLS; an inference is described by
``control_call.Inference``.  The load keeps its own measured clients
(``rest``, ``rest_stream``, ``grpc_wire``, ``grpc_stream``).  No other module opens a control connection
(``tests/transports/test_control_single_client.py`` keeps it so).

Where the calls are, below the clients: ``rest_control`` (stdlib HTTP), ``grpc_control`` (grpcio; over TLS
``grpc_unary``), ``repository`` and ``grpc_repository`` (the repository API and its errors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from satpoint.transports.control_call import Inference
from satpoint.transports.grpc.control_grpc import GrpcControl
from satpoint.transports.repository import ModelState
from satpoint.transports.rest.control_rest import RestControl
from satpoint.transports.tls import TlsOptions

#: a repository call (a load of a large model, from a slow disk) may take this long by default
REPOSITORY_TIMEOUT_S = 300.0


class ControlClient(Protocol):
    """The control calls of one target, over either protocol: the same calls, answers and errors."""

    @property
    def base_url(self) -> str: ...

    #: the status of a successful inference: HTTP 200, gRPC OK (0)
    ok_status: ClassVar[int]

    def live(self) -> bool: ...

    def ready(self, model: str | None = None) -> bool: ...

    def metadata(self, model: str, version: str | None = None) -> dict[str, Any]: ...

    def server_metadata(self) -> dict[str, Any] | None: ...

    def infer_one(self, call: Inference, stream: bool = False) -> tuple[int, str, bytes]: ...

    def timed_infers(self, call: Inference, count: int, give_up_after_s: float | None = None) -> list[float]: ...

    def index(self) -> list[ModelState]: ...

    def load(self, model: str) -> float: ...

    def unload(self, model: str) -> float: ...

    def wait_absent(self, model: str, timeout_s: float = 30.0, poll_s: float = 0.01) -> float: ...


class Addressed(Protocol):
    """What ``control_for`` reads of a target (``endpoints.spec.Target``)."""

    @property
    def url(self) -> str: ...

    @property
    def protocol(self) -> str: ...

    @property
    def wire_headers(self) -> tuple[tuple[str, str], ...]: ...

    def tls_options(self) -> TlsOptions | None: ...


def control_for(
    target: Addressed,
    timeout_s: float = REPOSITORY_TIMEOUT_S,
    load_bodies: Mapping[str, Mapping[str, Any]] | None = None,
) -> RestControl | GrpcControl:
    """The control client of ``target``'s protocol, with its headers and TLS; ``timeout_s`` bounds each
    repository call, ``load_bodies`` are the bodies a load sends (Triton's configuration overrides)."""
    bodies = dict(load_bodies or {})
    if target.protocol == "grpc":
        return GrpcControl(target.url, target.wire_headers, target.tls_options(), timeout_s, bodies)
    return RestControl(target.url.rstrip("/"), target.wire_headers, target.tls_options(), timeout_s, bodies)
