"""What ``sim --autoscale`` answers on its own routes: the replica counts (JSON, a plain number, Prometheus text)
and the event log, each event with its time on the sim's clock (``t_s`` from the sim's start), on the
machine's monotonic clock (``mono_s``, ``time.perf_counter``) and as a Unix time (``unix_s``)."""

from __future__ import annotations

import json

from satpoint.servers.sim.autoscale.hpa import ScaledScheduler

#: the routes (GET) ``sim --autoscale`` adds
SCALE_PATHS = (b"/replicas", b"/replicas/ready", b"/replicas/desired", b"/metrics", b"/events")

_METRICS = (
    "# HELP satpoint_sim_replicas_ready Replicas serving requests.\n"
    "# TYPE satpoint_sim_replicas_ready gauge\n"
    "satpoint_sim_replicas_ready {ready}\n"
    "# HELP satpoint_sim_replicas_desired Replicas the autoscaling rule asks for.\n"
    "# TYPE satpoint_sim_replicas_desired gauge\n"
    "satpoint_sim_replicas_desired {desired}\n"
    "# HELP satpoint_sim_requests_total Inference requests admitted.\n"
    "# TYPE satpoint_sim_requests_total counter\n"
    "satpoint_sim_requests_total {admitted}\n"
)


def events_json(scaler: ScaledScheduler, unix_offset_s: float) -> list[dict[str, object]]:
    """The event log (``unix_offset_s``: Unix time minus ``perf_counter``, taken at the sim's start)."""
    return [
        {
            "kind": e.kind,
            "t_s": round(e.at_s - scaler.origin_s, 6),
            "mono_s": round(e.at_s, 6),
            "unix_s": round(e.at_s + unix_offset_s, 6),
            "desired": e.desired,
            "ready": e.ready,
            **({"utilisation": e.utilisation} if e.utilisation is not None else {}),
        }
        for e in scaler.events
    ]


def scale_body(scaler: ScaledScheduler, path: bytes, now_s: float, unix_offset_s: float) -> tuple[bytes, bytes]:
    """(content type, body) of the route ``path`` at ``now_s`` (``perf_counter``)."""
    scaler.advance(now_s)
    if path == b"/replicas/ready":
        return b"text/plain", b"%d\n" % scaler.ready
    if path == b"/replicas/desired":
        return b"text/plain", b"%d\n" % scaler.desired
    if path == b"/metrics":
        text = _METRICS.format(ready=scaler.ready, desired=scaler.desired, admitted=scaler.admitted)
        return b"text/plain; version=0.0.4", text.encode()
    if path == b"/events":
        spec = scaler.spec
        doc = {
            "min": spec.min_replicas,
            "max": spec.max_replicas,
            "delay_s": spec.delay_s,
            "target": spec.target,
            "sync_s": spec.sync_s,
            "down_window_s": spec.down_window_s,
            "tolerance": spec.tolerance,
            "replica_rps": scaler.replica_rps,
            "start_mono_s": scaler.origin_s,
            "start_unix_s": scaler.origin_s + unix_offset_s,
            "events": events_json(scaler, unix_offset_s),
        }
        return b"application/json", json.dumps(doc).encode()
    return b"application/json", json.dumps({"desired": scaler.desired, "ready": scaler.ready}).encode()


def scale_response(
    scaler: ScaledScheduler, path: bytes, now_s: float, unix_offset_s: float, *, close: bool, head: bool
) -> bytes:
    """The whole HTTP/1.1 answer to ``GET path``."""
    ctype, body = scale_body(scaler, path, now_s, unix_offset_s)
    lines = [b"HTTP/1.1 200 OK", b"content-type: " + ctype, b"content-length: %d" % len(body)]
    if close:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + (b"" if head else body)
