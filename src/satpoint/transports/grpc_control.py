"""Control calls over OIP gRPC (liveness, readiness, metadata, one checked inference): grpcio, off
the hot path.  The functions mirror ``rest_control`` so callers can switch on the protocol.

Targets are ``host:port``, ``grpc://host:port`` or ``grpcs://host:port`` (TLS).  ``headers`` become
gRPC metadata (e.g. ``[("seldon-model", "iris")]`` for Seldon Core 2 routing).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc

from satpoint.errors import ConfigError, ModelNotFound, TargetUnreachable
from satpoint.transports.grpc_codec import metadata_to_dict, normalize_metadata, status_name
from satpoint.transports.grpc_proto import message, method_path


@dataclass(frozen=True)
class GrpcTarget:
    host: str
    port: int
    tls: bool = False
    ca_file: str | None = None  # PEM roots for TLS (default: the system's)
    cert_file: str | None = None  # client certificate chain (mTLS)
    key_file: str | None = None
    server_name: str | None = None  # TLS name to verify, if not the host

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context the fast transport (``grpc_wire``) uses for TLS; None without TLS."""
        if not self.tls:
            return None
        from satpoint.transports.grpc_wire import client_ssl_context

        return client_ssl_context(self.ca_file, self.cert_file, self.key_file)


def parse_target(url: str, *, tls: bool | None = None, ca_file: str | None = None) -> GrpcTarget:
    """``grpc://h:p`` / ``grpcs://h:p`` / ``h:p`` (port default 8081, MLServer's gRPC port)."""
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
    return GrpcTarget(parts.hostname or "127.0.0.1", port, use_tls, ca_file)


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


def _call(
    target: GrpcTarget,
    method: str,
    request: Any,
    response: str,
    headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = 5.0,
) -> Any:
    meta = normalize_metadata(headers)
    with open_channel(target) as channel:
        call = channel.unary_unary(
            method_path(method),
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=message(response).FromString,
        )
        return call(request, metadata=meta or None, timeout=timeout_s)


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


def infer_once(
    target: GrpcTarget, request: bytes, headers: Sequence[tuple[str, str]] = (), timeout_s: float = 30.0
) -> tuple[int, str, bytes]:
    """One ``ModelInfer`` with a serialized request, to check a payload before the run.

    Returns ``(grpc status code, status name + details, serialized ModelInferResponse or b"")``.
    """
    meta = normalize_metadata(headers)
    try:
        with open_channel(target) as channel:
            call = channel.unary_unary(method_path("ModelInfer"))  # bytes in, bytes out
            resp: bytes = call(request, metadata=meta or None, timeout=timeout_s)
            return 0, "OK", resp
    except grpc.RpcError as e:
        code = e.code().value[0] if hasattr(e, "code") else 2
        return int(code), f"{status_name(int(code))}: {e.details() if hasattr(e, 'details') else e}", b""
