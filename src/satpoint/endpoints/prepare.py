"""Preparing a target for a test (either protocol), and probing how fast it answers one request."""

from __future__ import annotations

import time

from satpoint.endpoints.grpc import prepare_grpc
from satpoint.endpoints.rest import prepare_rest
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.errors import SatpointError, TargetUnreachable
from satpoint.redact import redact_text
from satpoint.transports import rest_control
from satpoint.transports.rest import encode_json_body


def prepare(
    spec: Target,
    max_inflight: int | None = None,
    payload_count: int = 8,
    seed: int = 0,
    *,
    grpc_connections: int | None = None,
) -> PreparedTarget:
    """Check the target, build and encode the requests once, and try one before the test.

    ``max_inflight`` is the builder's cap until a segment sets its own (``session.run_segment`` always
    does: the user's cap or one derived from the plan).  ``grpc_connections`` fixes gRPC's HTTP/2
    connection count (None: automatic).  Errors are redacted of the target's secrets (a server may echo a
    token back in its error body)."""
    max_inflight = max_inflight or DEFAULT_INFLIGHT
    spec.validate()
    try:
        if spec.protocol == "grpc":
            return prepare_grpc(spec, max_inflight, payload_count, seed, connections=grpc_connections)
        if spec.protocol != "rest":
            raise TargetUnreachable(f"unknown protocol {spec.protocol!r} (rest or grpc)")
        return prepare_rest(spec, max_inflight, payload_count, seed)
    except SatpointError as e:
        raise type(e)(redact_text(str(e), spec.secret_values())) from None


DEFAULT_INFLIGHT = 1024


def probe_service_s(target: PreparedTarget, count: int = 20) -> float | None:
    """Median time of ``count`` sequential requests (a rough single-request service time)."""
    probe = getattr(target.builder, "probe_service_s", None)
    if callable(probe):
        result: float | None = probe(count)
        return result
    if target.spec.protocol != "rest":
        return None
    body = encode_json_body(target.payload_docs[0])
    times = []
    for _ in range(count):
        t = time.perf_counter()
        spec = target.spec
        status, _ = rest_control.infer_once(
            spec.url, spec.model, body, spec.version, spec.wire_headers, tls=spec.tls_options()
        )
        if status == 200:
            times.append(time.perf_counter() - t)
    if not times:
        return None
    times.sort()
    return times[len(times) // 2]


def wait_until_idle(
    target: PreparedTarget, min_wait_s: float, baseline_s: float | None, max_wait_s: float = 60.0
) -> float:
    """Sleep ``min_wait_s``, then probe until a request is about as fast as at low load (the server has
    drained the queue an overloaded stage left), for at most ``max_wait_s``.  Returns the time waited."""
    t0 = time.monotonic()
    time.sleep(min_wait_s)
    if baseline_s is None:
        return time.monotonic() - t0
    limit = max(2 * baseline_s, baseline_s + 0.002)
    while time.monotonic() - t0 < max_wait_s:
        probe = probe_service_s(target, count=3)
        if probe is not None and probe <= limit:
            break
        time.sleep(0.5)
    return time.monotonic() - t0
