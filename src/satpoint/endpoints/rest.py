"""Attaching to a server over OIP REST: readiness, metadata, payloads and a first request."""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field, replace
from typing import Self

from satpoint.endpoints import triton
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.errors import PayloadError, TargetUnreachable
from satpoint.payloads.binary import BINARY_HEADER, encode_binary_body
from satpoint.payloads.build import from_file, from_metadata
from satpoint.redact import redact_url
from satpoint.transports.base import TransportFactory
from satpoint.transports.control_call import Inference
from satpoint.transports.rest.control_rest import RestControl
from satpoint.transports.rest.pool import RestPool, encode_json_body, encode_request, infer_path, parse_url
from satpoint.transports.rest.stream import (
    ACCEPT_EVENT_STREAM,
    RestStreamPool,
    is_chunk,
    is_error_event,
    split_events,
    stream_path,
)
from satpoint.transports.tls import TlsOptions


@dataclass(frozen=True)
class RestFactoryBuilder:
    """Picklable recipe for the REST transport, built inside each generator process (which builds its
    own TLS context from ``tls``: an ``ssl.SSLContext`` does not pickle)."""

    host: str
    port: int
    requests: tuple[bytes, ...] = field(repr=False)  # they carry the credentials: not in reprs
    max_inflight: int
    tls: TlsOptions | None = None
    stream: bool = False  # server-sent event streams (``transports.rest.stream``)

    def with_max_inflight(self, max_inflight: int) -> Self:
        """The same recipe with another in-flight cap (each generator process gets its share)."""
        return replace(self, max_inflight=max_inflight)

    def __call__(self) -> TransportFactory:
        ssl_context = self.tls.context() if self.tls is not None else None
        server_hostname = self.tls.server_hostname if self.tls is not None else None
        return functools.partial(
            RestStreamPool if self.stream else RestPool,
            host=self.host,
            port=self.port,
            requests=self.requests,
            max_inflight=self.max_inflight,
            ssl=ssl_context,
            server_hostname=server_hostname,
        )


def prepare_rest(
    spec: Target, max_inflight: int, payload_count: int = 8, seed: int = 0, control: RestControl | None = None
) -> PreparedTarget:
    """Check a REST target, build and encode the requests once, and try one before the test; every control
    call through ``control`` (the target's client, kept in the prepared target for the probes).

    A path in the URL (``http://gateway/seldon/ns/model``: an API gateway's prefix) goes in front of
    every request's path, the control calls' and the load's alike."""
    base = spec.url.rstrip("/")
    try:
        address = parse_url(base)
    except ValueError as e:
        raise TargetUnreachable(str(e)) from None
    tls, headers = spec.tls_options(), spec.wire_headers
    client = control if control is not None else RestControl(base, headers, tls)
    if not client.ready():
        raise TargetUnreachable(f"{redact_url(base)} answered but is not ready (GET /v2/health/ready != 200)")
    meta = client.metadata(spec.model, spec.version)
    found = triton.probe_with(client, spec.model)
    if found is not None and found.config is not None:
        problem = triton.batch_problem(found.config, spec.batch_size)
        if problem is not None and spec.payload_file is None:
            raise PayloadError(problem)
        if not meta.get("inputs"):  # no declared inputs: build them from the model's Triton configuration
            meta = {**meta, "inputs": triton.config_inputs(found.config)}
    if spec.binary_data and (found is None or not found.server.has_binary_data):
        raise PayloadError("--binary-data needs a server with Triton's binary tensor extension (binary_tensor_data)")
    if spec.payload_file is not None:
        docs = from_file(spec.payload_file)
    else:
        docs = from_metadata(meta, spec.batch_size, payload_count, seed)
    encoded = [encode_binary_body(d) if spec.binary_data else (encode_json_body(d), None) for d in docs]
    bodies = [b for b, _ in encoded]
    extra = [(() if n is None else ((BINARY_HEADER, str(n)),)) for _, n in encoded]
    t0 = time.perf_counter()
    status, _, body = client.infer_one(Inference(bodies[0], spec.model, spec.version, extra[0]), spec.stream)
    took_s = time.perf_counter() - t0
    if status != 200:
        raise PayloadError(
            f"a test request to {spec.model} failed before the run: HTTP {status}: "
            f"{body[:300].decode(errors='replace')}"
        )
    if spec.stream:
        _check_stream(spec.model, body)
    else:
        try:
            json.loads(body)
        except ValueError:
            raise PayloadError(f"the test request's response is not JSON: {body[:200]!r}") from None
    path = address.path(stream_path(spec.model, spec.version) if spec.stream else infer_path(spec.model, spec.version))
    accept = (ACCEPT_EVENT_STREAM,) if spec.stream else ()
    reqs = tuple(
        encode_request(address.host, address.port, path, b, (*headers, *x, *accept))
        for b, x in zip(bodies, extra, strict=True)
    )
    return PreparedTarget(
        spec=spec,
        metadata=meta,
        payload_docs=docs,
        builder=RestFactoryBuilder(address.host, address.port, reqs, max_inflight, tls, spec.stream),
        payload_bytes=len(bodies[0]),
        latency_hint_s=took_s,
        triton=found.describe() if found is not None else None,
        control=client,
    )


def _check_stream(model: str, body: bytes) -> None:
    """The test stream before the run: at least one event, and no error event."""
    events = [e for e in split_events(bytearray(body + b"\n\n")) if is_chunk(e)]
    if not events:
        raise PayloadError(
            f"the test stream from {model} (infer_stream) carried no event: {body[:200]!r} "
            "(does the server stream? MLServer needs gzip_enabled false on older builds)"
        )
    bad = next((e for e in events if is_error_event(e)), None)
    if bad is not None:
        raise PayloadError(f"the test stream from {model} reported an error: {bad[:300].decode(errors='replace')}")
