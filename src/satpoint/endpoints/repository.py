"""A target's model-repository client, over the protocol the target speaks: its control client
(``transports.control``: ``RestControl`` or ``GrpcControl``), the same calls, answers and errors."""

from __future__ import annotations

from satpoint.endpoints.spec import Target
from satpoint.errors import ConfigError
from satpoint.redact import redact_url
from satpoint.transports.control import control_for
from satpoint.transports.control_grpc import GrpcControl
from satpoint.transports.control_rest import RestControl

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


def repository_client(target: Target, timeout_s: float) -> RestControl | GrpcControl:
    """The control client for ``target``'s protocol, with its headers and TLS; ``timeout_s`` bounds each
    repository call."""
    return control_for(target, timeout_s)
