"""A target's model-repository client, over the protocol the target speaks: its control client
(``transports.control``: ``RestControl`` or ``GrpcControl``), the same calls, answers and errors."""

from __future__ import annotations

from satpoint.endpoints.spec import PROTOCOLS, Target, resolve_protocol
from satpoint.transports.control import control_for
from satpoint.transports.grpc.control_grpc import GrpcControl
from satpoint.transports.rest.control_rest import RestControl

__all__ = ["PROTOCOLS", "repository_client", "resolve_protocol"]


def repository_client(target: Target, timeout_s: float) -> RestControl | GrpcControl:
    """The control client for ``target``'s protocol, with its headers and TLS; ``timeout_s`` bounds each
    repository call."""
    return control_for(target, timeout_s)
