"""Preparing a target for a test (either protocol), and probing how fast it answers one request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from satpoint.endpoints.grpc import prepare_grpc
from satpoint.endpoints.mix import prepare_mix
from satpoint.endpoints.rest import prepare_rest
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.errors import SatpointError, TargetUnreachable
from satpoint.payloads.binary import BINARY_HEADER, encode_binary_body
from satpoint.redact import redact_text
from satpoint.transports.control import control_for
from satpoint.transports.control_call import Inference
from satpoint.transports.grpc.control_grpc import GrpcControl
from satpoint.transports.rest.control_rest import RestControl
from satpoint.transports.rest.pool import encode_json_body


def prepare(
    spec: Target,
    max_inflight: int | None = None,
    payload_count: int = 8,
    seed: int = 0,
    *,
    grpc_connections: int | None = None,
    control: RestControl | GrpcControl | None = None,
) -> PreparedTarget:
    """Check the target, build and encode the requests once, and try one before the test; every control
    call through one client (``control``, else one built for the target: ``transports.control``), kept in
    the prepared target for the probes and cool-downs.

    ``max_inflight`` is the builder's cap until a segment sets its own (``session.run_segment`` always
    does: the user's cap or one derived from the plan).  ``grpc_connections`` fixes gRPC's HTTP/2
    connection count (None: automatic).  Errors are redacted of the target's secrets (a server may echo a
    token back in its error body)."""
    max_inflight = max_inflight or DEFAULT_INFLIGHT
    spec.validate()
    if spec.protocol not in ("rest", "grpc"):
        raise TargetUnreachable(f"unknown protocol {spec.protocol!r} (rest or grpc)")
    if control is None:
        control = control_for(spec)  # the one control client of this target: every model, probe and cool-down
    if spec.mix is not None:  # each model prepared on its own, their requests joined (endpoints.mix)
        return prepare_mix(
            spec,
            lambda one: _prepare_one(one, max_inflight, payload_count, seed, grpc_connections, control),
            control,
        )
    return _prepare_one(spec, max_inflight, payload_count, seed, grpc_connections, control)


def _prepare_one(
    spec: Target,
    max_inflight: int,
    payload_count: int,
    seed: int,
    grpc_connections: int | None,
    control: RestControl | GrpcControl,
) -> PreparedTarget:
    try:
        if isinstance(control, GrpcControl):
            return prepare_grpc(spec, max_inflight, payload_count, seed, connections=grpc_connections, control=control)
        return prepare_rest(spec, max_inflight, payload_count, seed, control=control)
    except SatpointError as e:
        raise type(e)(redact_text(str(e), spec.secret_values())) from None


DEFAULT_INFLIGHT = 1024


#: a probe stops sending after this long once it has three answers (a slow server: 20 requests at 8 s
#: each would take minutes)
PROBE_TIME_S = 15.0


def probe_service_s(target: PreparedTarget, count: int = 20, timeout_s: float = 30.0) -> float | None:
    """Median time of ``count`` sequential requests over one kept-alive connection, after one request that
    opens it and is not counted: the server's answer time at low load, as the load's warm connections see
    it (a new connection per request would add its set-up, a TLS handshake for ``https``, to every one; a
    server that closes every connection is timed with the set-up, as the load then pays it too).
    Requests slower than ``timeout_s`` count as failed; after ``PROBE_TIME_S``, three answers are enough.

    A model mix (without ``--resident``) is probed model by model, each with its own request, and its
    answer time is the mix-weighted median of the models' medians (``mix_service_s``)."""
    mix = target.mix
    if mix is not None and len(mix.names) > 1 and not callable(getattr(target.builder, "probe_model", None)):
        each = max(3, -(-count // len(mix.names)))
        times = [(_probe_at(target, m, each, timeout_s) if w > 0 else None, w) for m, w in enumerate(mix.weights)]
        return mix_service_s(times)
    pick = getattr(target.builder, "probe_model", None)
    # --resident K: a model loaded now (the first may be evicted)
    m = pick() if callable(pick) and mix is not None else 0
    return _probe_at(target, m, count, timeout_s)


def mix_service_s(times: list[tuple[float | None, float]]) -> float | None:
    """A mix's low-load answer time from its models' ``(median, weight)``: the weighted median, i.e. the
    smallest model median at which the models at or below it carry half the traffic (None: a model with
    traffic did not answer).

    It stands for the mix's own low-load p50, which is what ``client_limited`` compares a stage's service
    p50 (the median over every model's rows, each model a ``weight`` share of them) with: the first
    model's time alone (a cheap one) sized the in-flight cap too small and read the mix's normal answer
    time as the server slowing down (or, an expensive one, read real queueing as the client's cap); the
    slowest model's time would hide queueing in a mix of mostly cheap requests, and a weighted mean is
    pulled by a rare slow model that the median of the rows does not see."""
    if any(t is None for t, w in times if w > 0):
        return None
    ranked = sorted((t, w) for t, w in times if t is not None and w > 0)
    total = sum(w for _, w in ranked)
    seen = 0.0
    for t, w in ranked:
        seen += w
        if seen >= total / 2:
            return t
    return None


def _probe_at(target: PreparedTarget, m: int, count: int, timeout_s: float) -> float | None:
    """``probe_service_s`` of the mix's model ``m`` (its first request); a single model is ``m`` 0."""
    at = m * target.mix.per_model if target.mix is not None else 0
    probe = getattr(target.builder, "probe_service_s", None)
    if callable(probe):
        result: float | None = probe(count, at=at)
        return result
    if target.spec.protocol != "rest":
        return None
    spec = target.spec
    model = target.mix.names[m] if target.mix is not None else spec.model
    doc = target.payload_docs[at]
    extra: tuple[tuple[str, str], ...] = ()
    body = encode_json_body(doc)
    if spec.binary_data:  # the load's encoding (Triton's binary tensors): the same work for the server
        body, json_len = encode_binary_body(doc)
        extra = ((BINARY_HEADER, str(json_len)),)
    control = target.control if target.control is not None else control_for(spec)
    call = Inference(body, model, spec.version, extra, timeout_s)
    times = sorted(control.timed_infers(call, count, give_up_after_s=PROBE_TIME_S))
    return times[len(times) // 2] if times else None


#: a cool-down's probe: this many sequential requests, judged by their median ...
IDLE_PROBE_COUNT = 5
#: ... and this many such probes in a row must be as fast as at low load (one fast probe can fall between
#: the stalls of a server that an overload left slow)
IDLE_PROBE_BURSTS = 2


def idle_limit_s(baseline_s: float) -> float:
    """How fast a probe must be to count as "about as fast as at low load"."""
    return max(2 * baseline_s, baseline_s + 0.002)


def wait_until_idle(
    target: PreparedTarget,
    min_wait_s: float,
    baseline_s: float | None,
    max_wait_s: float = 60.0,
    stop: threading.Event | None = None,
    *,
    bursts: int = IDLE_PROBE_BURSTS,
    count: int = IDLE_PROBE_COUNT,
    probe: Callable[[PreparedTarget, int, float], float | None] | None = None,
) -> float:
    """Wait ``min_wait_s``, then probe until ``bursts`` probes in a row (each the median of ``count``
    sequential requests) are about as fast as at low load (the server has drained the queue an overloaded
    stage left, and is back at its low-load speed), for at most ``max_wait_s``; returns at once when
    ``stop`` is set (each probe gives up as soon as it is slower than "about as fast").  Returns the
    time waited.  ``probe`` replaces ``probe_service_s`` (tests)."""
    stop = stop or threading.Event()
    probe = probe or (lambda t, n, timeout: probe_service_s(t, count=n, timeout_s=timeout))
    t0 = time.monotonic()
    if stop.wait(min_wait_s) or baseline_s is None:
        return time.monotonic() - t0
    limit = idle_limit_s(baseline_s)
    good = 0
    while time.monotonic() - t0 < max_wait_s and not stop.is_set():
        took = probe(target, count, limit + 0.5)
        good = good + 1 if took is not None and took <= limit else 0
        if good >= max(1, bursts):
            break
        if good == 0 and stop.wait(0.5):
            break
    return time.monotonic() - t0
