"""Attaching to a server satpoint does not manage: readiness, metadata, payloads, a first request."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from satpoint.errors import PayloadError, TargetUnreachable
from satpoint.payloads.build import from_file, from_metadata
from satpoint.transports import rest_control
from satpoint.transports.base import TransportFactory
from satpoint.transports.rest import RestPool, encode_json_body, encode_request, infer_path, split_url


@dataclass(frozen=True)
class TargetSpec:
    url: str
    model: str
    version: str | None = None
    protocol: str = "rest"
    headers: tuple[tuple[str, str], ...] = ()
    payload_file: Path | None = None
    batch_size: int = 1
    grpc_raw: bool = False

    def describe(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "model": self.model,
            "version": self.version,
            "protocol": self.protocol,
            "headers": [f"{k}: {v}" for k, v in self.headers],
            "payload_file": str(self.payload_file) if self.payload_file else None,
            "batch_size": self.batch_size,
        }


@dataclass(frozen=True)
class RestFactoryBuilder:
    """Picklable recipe for the REST transport, built inside each generator process."""

    host: str
    port: int
    requests: tuple[bytes, ...]
    max_inflight: int

    def __call__(self) -> TransportFactory:
        return functools.partial(
            RestPool, host=self.host, port=self.port, requests=self.requests, max_inflight=self.max_inflight
        )


@dataclass
class PreparedTarget:
    spec: TargetSpec
    metadata: dict[str, Any]
    payload_docs: list[dict[str, Any]]
    builder: Any  # FactoryBuilder
    payload_bytes: int
    notes: list[str] = field(default_factory=list)


def prepare(spec: TargetSpec, max_inflight: int, payload_count: int = 8, seed: int = 0) -> PreparedTarget:
    """Check the target, build and encode the requests once, and try one before the test."""
    if spec.protocol == "grpc":
        from satpoint.targets.remote_grpc import prepare_grpc  # optional transport, imported on use

        return prepare_grpc(spec, max_inflight, payload_count, seed)
    if spec.protocol != "rest":
        raise TargetUnreachable(f"unknown protocol {spec.protocol!r} (rest or grpc)")
    base = spec.url.rstrip("/")
    try:
        host, port = split_url(base)
    except ValueError as e:
        raise TargetUnreachable(str(e)) from None
    if not rest_control.server_ready(base, spec.headers):
        raise TargetUnreachable(f"{base} answered but is not ready (GET /v2/health/ready != 200)")
    meta = rest_control.model_metadata(base, spec.model, spec.version, spec.headers)
    if spec.payload_file is not None:
        docs = from_file(spec.payload_file)
    else:
        docs = from_metadata(meta, spec.batch_size, payload_count, seed)
    bodies = [encode_json_body(d) for d in docs]
    status, body = rest_control.infer_once(base, spec.model, bodies[0], spec.version, spec.headers)
    if status != 200:
        raise PayloadError(
            f"a test request to {spec.model} failed before the run: HTTP {status}: "
            f"{body[:300].decode(errors='replace')}"
        )
    try:
        json.loads(body)
    except ValueError:
        raise PayloadError(f"the test request's response is not JSON: {body[:200]!r}") from None
    path = infer_path(spec.model, spec.version)
    reqs = tuple(encode_request(host, port, path, b, spec.headers) for b in bodies)
    return PreparedTarget(
        spec=spec,
        metadata=meta,
        payload_docs=docs,
        builder=RestFactoryBuilder(host, port, reqs, max_inflight),
        payload_bytes=len(bodies[0]),
    )


def probe_service_s(target: PreparedTarget, count: int = 20) -> float | None:
    """Median time of ``count`` sequential requests (a rough single-request service time)."""
    probe = getattr(target.builder, "probe_service_s", None)
    if callable(probe):
        result: float | None = probe(count)
        return result
    if target.spec.protocol != "rest":
        return None
    import time

    body = encode_json_body(target.payload_docs[0])
    times = []
    for _ in range(count):
        t = time.perf_counter()
        status, _ = rest_control.infer_once(
            target.spec.url, target.spec.model, body, target.spec.version, target.spec.headers
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
    import time

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
