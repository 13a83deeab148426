"""Control calls over OIP gRPC (liveness, readiness, metadata, one checked inference): grpcio, off
the hot path.  The functions mirror ``rest_control`` so callers can switch on the protocol.

Targets are ``host:port``, ``grpc://host:port`` or ``grpcs://host:port`` (TLS).  ``headers`` become
gRPC metadata (e.g. ``[("seldon-model", "iris")]`` for Seldon Core 2 routing).

Plaintext calls go through grpcio.  TLS calls go through ``grpc_unary`` with the same ``ssl.SSLContext``
as the hot path (grpcio has its own TLS stack and roots, and cannot skip verification for
``--insecure``); its failures look like grpcio's (``grpc.RpcError`` with ``code()``/``details()``), and a
certificate that does not verify raises ``TargetUnreachable`` saying what to do.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc

from satpoint.errors import ConfigError, ModelNotFound, TargetUnreachable
from satpoint.transports.grpc.codec import metadata_to_dict, normalize_metadata, status_name
from satpoint.transports.grpc.grpc_proto import message, method_path
from satpoint.transports.grpc.grpc_unary import ClosedEarly, UnaryError, unary_call
from satpoint.transports.tls import TlsOptions, explain_tls_error

_STATUS = {c.value[0]: c for c in grpc.StatusCode}


@dataclass(frozen=True)
class GrpcTarget:
    host: str
    port: int
    tls: bool = False
    ca_file: str | None = None  # PEM roots for TLS (default: the system's)
    cert_file: str | None = None  # client certificate chain (mTLS)
    key_file: str | None = None
    server_name: str | None = None  # TLS name to verify, if not the host
    verify: bool = True  # False: skip certificate and host-name verification (--insecure)

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context the fast transport (``grpc_wire``) uses for TLS; None without TLS."""
        if not self.tls:
            return None
        from satpoint.transports.grpc.wire import client_ssl_context

        return client_ssl_context(self.ca_file, self.cert_file, self.key_file, verify=self.verify)

    def tls_options(self) -> TlsOptions | None:
        if not self.tls:
            return None
        return TlsOptions(self.ca_file, self.cert_file, self.key_file, self.verify, self.server_name)


def parse_target(
    url: str,
    *,
    tls: bool | None = None,
    ca_file: str | None = None,
    options: TlsOptions | None = None,
) -> GrpcTarget:
    """``grpc://h:p`` / ``grpcs://h:p`` / ``h:p`` (port default 8081, MLServer's gRPC port); ``options``
    sets up TLS (CA, client certificate, verification) when the target uses it."""
    parts = urlsplit(url if "://" in url else "grpc://" + url)
    if parts.scheme not in ("grpc", "grpcs", "http", "https"):
        raise ConfigError(f"unsupported URL scheme {parts.scheme!r} for gRPC (use grpc:// or grpcs://)")
    if parts.path not in ("", "/"):
        raise ConfigError(f"a gRPC target is host:port, without a path: {url!r}")
    use_tls = parts.scheme in ("grpcs", "https") if tls is None else tls
    try:
        port = parts.port or 8081
    except ValueError:
        raise ConfigError(f"bad port in {url!r}") from None
    host = parts.hostname or "127.0.0.1"
    if options is None:
        return GrpcTarget(host, port, use_tls, ca_file)
    return GrpcTarget(
        host,
        port,
        use_tls,
        options.ca_file or ca_file,
        options.cert_file,
        options.key_file,
        options.server_hostname,
        options.verify,
    )


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def open_channel(target: GrpcTarget) -> grpc.Channel:
    options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", 256 << 20)]
    if target.server_name:
        options.append(("grpc.ssl_target_name_override", target.server_name))
    if target.tls:
        creds = grpc.ssl_channel_credentials(_read(target.ca_file), _read(target.key_file), _read(target.cert_file))
        return grpc.secure_channel(target.address, creds, options=options)
    return grpc.insecure_channel(target.address, options=options)


class WireRpcError(grpc.RpcError):  # type: ignore[misc]
    """A failed TLS control call, shaped like grpcio's errors."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(details)
        self._code = _STATUS.get(code, grpc.StatusCode.UNKNOWN)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def _tls_call(
    target: GrpcTarget, method: str, request: bytes, meta: Sequence[tuple[str, str]], timeout_s: float
) -> bytes:
    """One unary call over TLS with the hot path's context (see the module docstring)."""
    try:
        context = target.ssl_context()
    except (OSError, ssl.SSLError) as e:
        raise TargetUnreachable(f"cannot set up TLS for {target.address}: {e}") from None
    try:
        return unary_call(
            target.host,
            target.port,
            method_path(method),
            request,
            metadata=meta,
            ssl_context=context,
            server_hostname=target.server_name,
            authority=target.address,
            timeout_s=timeout_s,
        )
    except ClosedEarly:  # after a handshake that seemed fine: a refused client certificate (TLS 1.3)
        why = explain_tls_error(ConnectionResetError("right after the handshake"), target.tls_options())
        raise TargetUnreachable(f"gRPC {method} at {target.address}: {why}") from None
    except UnaryError as e:
        raise WireRpcError(e.code, e.details) from None
    except ConnectionRefusedError as e:
        raise WireRpcError(14, str(e)) from None
    except OSError as e:  # ssl.SSLError included
        why = explain_tls_error(e, target.tls_options())
        if why is not None:
            raise TargetUnreachable(f"gRPC {method} at {target.address}: {why}") from None
        raise WireRpcError(4 if isinstance(e, socket.timeout) else 14, str(e)) from None


def _call(
    target: GrpcTarget,
    method: str,
    request: Any,
    response: str,
    headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = 5.0,
) -> Any:
    meta = normalize_metadata(headers)
    if target.tls:
        return message(response).FromString(_tls_call(target, method, request.SerializeToString(), meta, timeout_s))
    with open_channel(target) as channel:
        call = channel.unary_unary(
            method_path(method),
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=message(response).FromString,
        )
        return call(request, metadata=meta or None, timeout=timeout_s)


def call(
    target: GrpcTarget,
    method: str,
    request: Any,
    response: str,
    headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = 5.0,
) -> Any:
    """One unary call of ``inference.GRPCInferenceService`` (``method``, a request message, the name of the
    response's message), over TLS as the other control calls; failures are ``grpc.RpcError`` (``code()``,
    ``details()``), a certificate that does not verify ``TargetUnreachable``."""
    return _call(target, method, request, response, headers, timeout_s)


def _unreachable(target: GrpcTarget, what: str, e: grpc.RpcError) -> TargetUnreachable:
    code = e.code() if hasattr(e, "code") else None
    detail = e.details() if hasattr(e, "details") else str(e)
    name = code.name if code is not None else "error"
    return TargetUnreachable(f"gRPC {what} at {target.address} failed: {name}: {detail}")


def server_live(target: GrpcTarget, headers: Sequence[tuple[str, str]] = ()) -> bool:
    try:
        return bool(_call(target, "ServerLive", message("ServerLiveRequest")(), "ServerLiveResponse", headers).live)
    except grpc.RpcError:
        return False


def server_ready(target: GrpcTarget, headers: Sequence[tuple[str, str]] = ()) -> bool:
    """False when the server answers not-ready or cannot be reached (poll it while starting)."""
    try:
        resp = _call(target, "ServerReady", message("ServerReadyRequest")(), "ServerReadyResponse", headers)
    except grpc.RpcError:
        return False
    return bool(resp.ready)


def model_ready(
    target: GrpcTarget, model: str, version: str | None = None, headers: Sequence[tuple[str, str]] = ()
) -> bool:
    req = message("ModelReadyRequest")(name=model, version=version or "")
    try:
        return bool(_call(target, "ModelReady", req, "ModelReadyResponse", headers).ready)
    except grpc.RpcError:
        return False


def model_metadata(
    target: GrpcTarget, model: str, version: str | None = None, headers: Sequence[tuple[str, str]] = ()
) -> dict[str, Any]:
    """``ModelMetadata`` as the REST metadata JSON shape (``{"name", "inputs": [...], "outputs": [...]}``)."""
    req = message("ModelMetadataRequest")(name=model, version=version or "")
    try:
        resp = _call(target, "ModelMetadata", req, "ModelMetadataResponse", headers)
    except grpc.RpcError as e:
        code = e.code() if hasattr(e, "code") else None
        if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
            raise ModelNotFound(f"model {model!r} not found at {target.address}: {e.details()}") from None
        raise _unreachable(target, "ModelMetadata", e) from None
    return metadata_to_dict(resp)


def server_metadata(target: GrpcTarget, headers: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    try:
        resp = _call(target, "ServerMetadata", message("ServerMetadataRequest")(), "ServerMetadataResponse", headers)
    except grpc.RpcError as e:
        raise _unreachable(target, "ServerMetadata", e) from None
    return {"name": resp.name, "version": resp.version, "extensions": list(resp.extensions)}


def timed_infers(
    target: GrpcTarget, request: bytes, count: int, headers: Sequence[tuple[str, str]] = (), timeout_s: float = 30.0
) -> list[float]:
    """Seconds each of ``count`` sequential successful ``ModelInfer`` calls took over one channel, after a
    first call that opens it and is not counted (the load's connections are warm).  Over TLS each call
    opens its own connection (the control path's TLS client is one call per connection), so the first is
    not discarded there: the times include the handshake."""
    meta = normalize_metadata(headers)
    times: list[float] = []
    if target.tls:
        for _ in range(count):
            t = time.perf_counter()
            code, _, _ = infer_once(target, request, headers, timeout_s)
            if code == 0:
                times.append(time.perf_counter() - t)
        return times
    with open_channel(target) as channel:
        call = channel.unary_unary(method_path("ModelInfer"))  # bytes in, bytes out
        for i in range(count + 1):
            t = time.perf_counter()
            try:
                call(request, metadata=meta or None, timeout=timeout_s)
            except grpc.RpcError:
                continue
            if i > 0:
                times.append(time.perf_counter() - t)
    return times


def infer_once(
    target: GrpcTarget, request: bytes, headers: Sequence[tuple[str, str]] = (), timeout_s: float = 30.0
) -> tuple[int, str, bytes]:
    """One ``ModelInfer`` with a serialized request, to check a payload before the run.

    Returns ``(grpc status code, status name + details, serialized ModelInferResponse or b"")``.
    """
    meta = normalize_metadata(headers)
    try:
        if target.tls:
            return 0, "OK", _tls_call(target, "ModelInfer", request, meta, timeout_s)
        with open_channel(target) as channel:
            call = channel.unary_unary(method_path("ModelInfer"))  # bytes in, bytes out
            resp: bytes = call(request, metadata=meta or None, timeout=timeout_s)
            return 0, "OK", resp
    except grpc.RpcError as e:
        code = e.code().value[0] if hasattr(e, "code") else 2
        return int(code), f"{status_name(int(code))}: {e.details() if hasattr(e, 'details') else e}", b""
