"""The model-repository API over OIP gRPC: ``RepositoryIndex``, ``RepositoryModelLoad`` and
``RepositoryModelUnload`` on ``inference.GRPCInferenceService`` (MLServer 1.7.1's dataplane.proto, Triton's
grpc_service.proto; the messages are in ``proto/grpc_predict_v2.proto``).

``GrpcRepositoryClient`` is ``repository.RepositoryClient``'s twin: the same calls, the same answers (load and
unload return the seconds until the server answered), the same errors with messages of the same shape, the
gRPC status in place of the HTTP one.  Control-plane calls, off the hot path, through ``grpc_control``
(grpcio in plaintext; over TLS the hot path's ``ssl.SSLContext``, so ``--insecure`` and client
certificates work as for the other control calls).  Readiness is ``ModelReady``.

What the servers answer over gRPC (read from their code, see the project's notes):

- MLServer maps its errors through ``handle_mlserver_error``: a name it cannot find on disk, or an unload of
  a model that is not loaded, is ``NOT_FOUND``; a load's parameters are ignored.  Its index writes each
  state as Python's ``str()`` of its enum, ``State.READY`` (mlserver/grpc/converters.py,
  ``RepositoryIndexResponseItemConverter``), where REST says ``READY``: the prefix is dropped here.
- Triton outside explicit mode answers ``UNAVAILABLE`` "explicit model load / unload is not allowed if
  polling is enabled"; a name its repository lacks is "failed to poll from model repository"; its unload
  answers before the model is gone (``wait_absent`` polls readiness).
- Triton's restricted protocols (``--grpc-restricted-protocol``, PyTriton's access token) answer
  ``UNAVAILABLE`` "This protocol is restricted, expecting header 'triton-grpc-protocol-KEY'": over gRPC the
  header carries Triton's ``triton-grpc-protocol-`` prefix.
- A server without the extension answers ``UNIMPLEMENTED``.

Load parameters (``load_bodies``, the REST body's shape ``{"parameters": {...}}``) become the request's
``parameters`` map: strings, booleans and integers as such, ``file:...`` entries (base64 in REST's JSON) as
bytes, anything else as its JSON text.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from satpoint.errors import SatpointError, TargetUnreachable
from satpoint.redact import redact_url
from satpoint.transports.grpc import grpc_control
from satpoint.transports.grpc.grpc_control import GrpcTarget
from satpoint.transports.grpc.grpc_proto import message
from satpoint.transports.repository import (
    NOT_IN_REPOSITORY,
    ModelState,
    RepositoryError,
    RepositoryRefused,
    parse_index,
    repository_error,
    timed_out,
    wait_absent,
)
from satpoint.transports.tls import TlsOptions

#: Triton's restricted gRPC protocols (UNAVAILABLE), and the REST words a proxy may pass on
_RESTRICTED = ("is restricted, expecting header", "this api is restricted")
#: the prefix Triton expects on a restricted protocol's header over gRPC
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"

_METHODS = {"repository index": "RepositoryIndex", "load": "RepositoryModelLoad", "unload": "RepositoryModelUnload"}


def classify_grpc(op: str, model: str | None, url: str, code: str, details: str) -> SatpointError | None:
    """The error for a repository call's gRPC status (``code``: its name, e.g. ``NOT_FOUND``; None: OK),
    shaped as ``repository.classify``'s.  Pure: the tests feed it answers.  ``DEADLINE_EXCEEDED`` is the
    client's (it knows the timeout)."""
    if code == "OK":
        return None
    low = details.lower()
    other: SatpointError | None = None
    if code == "UNIMPLEMENTED":
        other = RepositoryRefused(
            f"{redact_url(url)} has no repository API ({_METHODS.get(op, op)}: gRPC UNIMPLEMENTED)"
        )
    elif code == "UNAVAILABLE":
        other = TargetUnreachable(f"gRPC {_METHODS.get(op, op)} at {redact_url(url)} failed: UNAVAILABLE: {details}")
    return repository_error(
        op,
        model,
        url,
        details,
        f"gRPC {code}: {details}",
        restricted=code in ("PERMISSION_DENIED", "UNAUTHENTICATED") or any(r in low for r in _RESTRICTED),
        missing=model is not None and (code == "NOT_FOUND" or NOT_IN_REPOSITORY in low),
        hint=f"PyTriton over gRPC: {GRPC_HEADER_PREFIX}triton-access-token: TOKEN",
        other=other,
    )


def load_parameters(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A REST load body's ``parameters`` as ``ModelRepositoryParameter`` fields, key by key."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in dict(body.get("parameters") or {}).items():
        if key.startswith("file:") and isinstance(value, str):
            try:
                out[key] = {"bytes_param": base64.b64decode(value, validate=True)}
            except (binascii.Error, ValueError):
                raise RepositoryError(f"load parameter {key!r} is not base64") from None
        elif isinstance(value, bytes):
            out[key] = {"bytes_param": value}
        elif isinstance(value, bool):
            out[key] = {"bool_param": value}
        elif isinstance(value, int):
            out[key] = {"int64_param": value}
        elif isinstance(value, str):
            out[key] = {"string_param": value}
        else:
            out[key] = {"string_param": json.dumps(value)}
    return out


def _state(state: str) -> str:
    """An index row's state as REST writes it: MLServer's gRPC ``State.READY`` is ``READY``."""
    return state.removeprefix("State.")


@dataclass(frozen=True)
class GrpcRepositoryClient:
    """Index, load and unload through a server's model-repository API (gRPC); ``RepositoryClient``'s
    interface.  ``base_url``: ``grpc://host:port``, ``grpcs://host:port`` (TLS, set up by ``tls``) or
    ``host:port``.  ``headers`` become gRPC metadata.  ``timeout_s`` bounds each call (its deadline)."""

    base_url: str
    headers: tuple[tuple[str, str], ...] = ()
    tls: TlsOptions | None = None
    timeout_s: float = 120.0
    load_bodies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def target(self) -> GrpcTarget:
        return grpc_control.parse_target(self.base_url, options=self.tls)

    def _call(self, op: str, model: str | None, request: Any, response: str) -> Any:
        method = _METHODS[op]
        try:
            return grpc_control.call(self.target, method, request, response, self.headers, self.timeout_s)
        except grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") and e.code() is not None else "UNKNOWN"
            details = (e.details() if hasattr(e, "details") else None) or str(e)
            if code == "DEADLINE_EXCEEDED":
                raise timed_out(self.base_url, op, model, self.timeout_s) from None
            error = classify_grpc(op, model, self.base_url, code, details)
            raise (error or RepositoryError(details)) from None

    def index(self) -> list[ModelState]:
        """Every model the repository holds, loaded or not."""
        answer = self._call("repository index", None, message("RepositoryIndexRequest")(), "RepositoryIndexResponse")
        rows = [
            {"name": m.name, "version": m.version, "state": _state(m.state), "reason": m.reason} for m in answer.models
        ]
        return parse_index(rows)

    def load(self, model: str) -> float:
        """Load ``model``; returns the seconds until the server answered (it answers once loaded)."""
        request = message("RepositoryModelLoadRequest")(model_name=model)
        for key, fields in load_parameters(self.load_bodies.get(model, {})).items():
            request.parameters[key].MergeFrom(message("ModelRepositoryParameter")(**fields))
        t0 = time.perf_counter()
        self._call("load", model, request, "RepositoryModelLoadResponse")
        return time.perf_counter() - t0

    def unload(self, model: str) -> float:
        """Unload ``model``; returns the seconds until the server answered (Triton answers before the
        unload is done: see ``wait_absent``)."""
        request = message("RepositoryModelUnloadRequest")(model_name=model)
        t0 = time.perf_counter()
        self._call("unload", model, request, "RepositoryModelUnloadResponse")
        return time.perf_counter() - t0

    def ready(self, model: str) -> bool:
        """Whether ``model`` answers ready now (``ModelReady``)."""
        return grpc_control.model_ready(self.target, model, headers=self.headers)

    def wait_absent(self, model: str, timeout_s: float = 30.0, poll_s: float = 0.01) -> float:
        """Until ``model`` no longer answers ready (an unload has finished); the seconds waited.  A
        ``RepositoryTimeout`` when it is still ready after ``timeout_s``."""
        return wait_absent(self.ready, model, timeout_s, poll_s)
