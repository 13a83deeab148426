"""A target's model-repository client, over the protocol the target speaks: ``RepositoryClient`` (REST) or
``GrpcRepositoryClient`` (gRPC), the same calls, answers and errors (``transports.repository``)."""

from __future__ import annotations

from satpoint.endpoints.spec import Target
from satpoint.errors import ConfigError
from satpoint.redact import redact_url
from satpoint.transports.grpc_repository import GrpcRepositoryClient
from satpoint.transports.repository import RepositoryClient, RepositoryControl

PROTOCOLS = ("rest", "grpc")


def resolve_protocol(url: str | None, protocol: str | None) -> str:
    """The protocol to speak: ``protocol`` if given, else gRPC for a ``grpc://``/``grpcs://`` URL and REST
    otherwise (no URL: REST).  A gRPC URL with ``rest``, or an ``http(s)://`` one with ``grpc``, is refused."""
    scheme = url.split("://", 1)[0].lower() if url and "://" in url else ""
    if protocol is None:
        return "grpc" if scheme in ("grpc", "grpcs") else "rest"
    if protocol not in PROTOCOLS:
        raise ConfigError(f"--protocol: rest or grpc, got {protocol!r}")
    if protocol == "rest" and scheme in ("grpc", "grpcs"):
        raise ConfigError(f"{redact_url(url or '')} is a gRPC URL: leave --protocol out or give --protocol grpc")
    if protocol == "grpc" and scheme in ("http", "https"):
        raise ConfigError(
            f"--protocol grpc needs a gRPC address (grpc://host:port, grpcs://host:port), not {redact_url(url or '')}"
        )
    return protocol


def repository_client(target: Target, timeout_s: float) -> RepositoryControl:
    """The repository client for ``target``'s protocol, with its headers and TLS; ``timeout_s`` bounds each call."""
    cls = GrpcRepositoryClient if target.protocol == "grpc" else RepositoryClient
    return cls(target.url, target.wire_headers, target.tls_options(), timeout_s=timeout_s)
