"""What one measurement of a sweep (one ``find`` on a freshly started server) contributes to it: its
saturation point and bracket, the latency at the operating point and at low load (with ``--stream``, time to
first chunk and gaps between chunks there too), the server's own figures there, and why its answer is only
a lower bound when the search never bracketed the capacity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from satpoint.analysis.search.rates import same_rate

#: the operating point every point's latency is compared at: the per-replica autoscaling target
OPERATING_FRACTION = 0.85
#: the lowest stable stage counts as "low load" when it is at most this fraction of the saturation point
LOW_LOAD_FRACTION = 0.5
_RATE_TOLERANCE = 0.03  # a latency_at entry within 3 % of the asked rate is that rate's measurement


def rounded(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


#: a streamed stage's figures a sweep keeps beside its latency (``summary.json`` ``stages[].stream``)
STREAM_FIELDS = ("ttfc_p50_ms", "ttfc_p99_ms", "gap_p50_ms", "gap_p99_ms")


def stream_figures(stream: Mapping[str, Any] | None) -> dict[str, Any]:
    """``ttfc_p50_ms``, ``ttfc_p99_ms``, ``gap_p50_ms``, ``gap_p99_ms`` of a stage's ``stream`` block (empty
    when the stage did not stream)."""
    if not stream:
        return {}
    ttfc, gap = stream.get("ttfc_ms") or {}, stream.get("gap_ms") or {}
    return {
        "ttfc_p50_ms": ttfc.get("p50"),
        "ttfc_p99_ms": ttfc.get("p99"),
        "gap_p50_ms": gap.get("p50"),
        "gap_p99_ms": gap.get("p99"),
    }


def _latency_point(
    rps: float | None, latency: Mapping[str, Any] | None, verdict: str | None, stream: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    latency = latency or {}
    point = {"rps": rounded(rps), "p50_ms": latency.get("p50"), "p99_ms": latency.get("p99"), "verdict": verdict}
    return {**point, **stream_figures(stream)}


def measurement_figures(summary: Mapping[str, Any], at_rps: float | None = None) -> dict[str, Any]:
    """The figures one measurement (a ``find`` summary.json) gives a sweep."""
    stages: list[Mapping[str, Any]] = list(summary.get("stages") or [])
    stable = [s for s in stages if s.get("verdict") == "stable"]
    low = min(stable, key=lambda s: float(s["target_rps"]), default=None)
    sat = summary.get("saturation_rps")
    if low is not None and sat and float(low["target_rps"]) > LOW_LOAD_FRACTION * float(sat):
        low = None  # a search seeded near its answer has no low-load stage
    conf = (summary.get("search") or {}).get("confirmation") or {}
    op: dict[str, Any] = _latency_point(None, None, None)
    held: list[Mapping[str, Any]] = []
    if conf.get("rate_rps"):
        rate = float(conf["rate_rps"])
        held = [s for s in stages if same_rate(float(s["target_rps"]), rate)]
        if held:
            st = held[-1]
            op = _latency_point(st["offered_rps"], st.get("latency_ms"), st.get("verdict"), st.get("stream"))
    if op["rps"] is None:  # no confirmation hold: the profile's stage nearest 85 %, if any
        prof = [x for x in summary.get("latency_at") or [] if x.get("fraction")]
        near = min(prof, key=lambda x: abs(float(x["fraction"]) - OPERATING_FRACTION), default=None)
        if near is not None and abs(float(near["fraction"]) - OPERATING_FRACTION) <= 0.06:
            op = _latency_point(near["offered_rps"], near.get("latency_ms"), near.get("verdict"), near.get("stream"))
    at: dict[str, Any] | None = None
    if at_rps is not None:
        at = _latency_point(None, None, None)
        cands = [
            x
            for x in summary.get("latency_at") or []
            if abs(float(x["offered_rps"]) - at_rps) <= _RATE_TOLERANCE * at_rps
        ]
        if cands:
            x = cands[-1]
            at = _latency_point(x["offered_rps"], x.get("latency_ms"), x.get("verdict"), x.get("stream"))
    gen = summary.get("generator") or {}
    reasons = lower_bound_reasons(summary)
    at_sat = [s for s in stable if sat is not None and abs(float(s["target_rps"]) - float(sat)) <= 1e-3 * float(sat)]
    op_stage = held[-1] if conf.get("rate_rps") and held else None
    return {
        "saturation_rps": summary.get("saturation_rps"),
        "unstable_rps": summary.get("unstable_rps"),
        "max_throughput_rps": summary.get("max_throughput_rps"),
        "precision_achieved": summary.get("precision_achieved"),
        "low_load": (
            _latency_point(low["offered_rps"], low.get("latency_ms"), "stable", low.get("stream")) if low else None
        ),
        "at_operating_point": op,
        "at_rps": at,
        "generator_cpu_us_per_request": gen.get("cpu_us_per_request"),
        # the capacity is at least the saturation point, and how far above it is unknown (see lower_bound_reasons)
        "lower_bound": bool(reasons),
        "lower_bound_reasons": reasons,
        "server_at_saturation": _server_figures(at_sat[-1] if at_sat else None),
        "server_at_operating_point": _server_figures(op_stage),
        # Triton's statistics (when read): at the saturation point, and in the first unstable stage above it
        "triton_at_saturation": triton_figures(at_sat[-1] if at_sat else None),
        "triton_above_saturation": triton_figures(_first_above(stages, sat)),
        "rss_mb_max": max(
            (float(m) for st in stages if (m := ((st.get("server") or {}).get("rss_mb") or {}).get("max"))),
            default=None,
        ),
        # the server's own cgroup (a memory limit): its memory peak over the measurement
        "memory_peak_mb": max(
            (float(m) for st in stages if (m := (st.get("server") or {}).get("cgroup_memory_peak_mb"))),
            default=None,
        ),
        # many models: how many the server held, its start, and its process tree's memory once ready
        **_models_figures(summary.get("server") or {}),
        "diagnosis": [d.get("kind") for d in summary.get("diagnosis") or []],
        "interrupted": bool(summary.get("interrupted")),
        "target_lost": summary.get("target_lost") is not None,
        "stages": len(stages),
    }


#: why a measurement's saturation point is only a lower bound of the capacity, in words
LOWER_BOUND_TEXT: dict[str, str] = {
    "generator_limited": "the generator fell behind",
    "client_limited": "the generator's connection cap (--max-inflight) was the limit",
    "budget": "the search's budget ran out before any rate overloaded the server",
    "max_rps": "the search reached its highest rate (max_rps) without overloading the server",
    "target_lost": "the target stopped answering during the search",
}


def lower_bound_reasons(summary: Mapping[str, Any]) -> list[str]:
    """Why a ``find`` summary's saturation point is only a lower bound (keys of ``LOWER_BOUND_TEXT``):
    the search stopped on the generator's or its connection cap's limit, lost the target, or never
    measured a rate the server could not hold (budget, max_rps).  Empty: the capacity was bracketed (or
    there is no saturation point at all).  A search cut by its budget after it had found an unstable rate
    is bracketed, only less precisely: its range runs up to that rate like any other."""
    if summary.get("saturation_rps") is None:
        return []
    notes = list(summary.get("find_notes") or [])
    out = []
    if any(n.startswith("generator-limited") for n in notes):
        out.append("generator_limited")
    if any(n.startswith("client-limited") for n in notes):
        out.append("client_limited")
    if summary.get("target_lost") is not None:
        out.append("target_lost")
    elif not out and summary.get("unstable_rps") is None:
        finished = (summary.get("search") or {}).get("finished", True)
        out.append("max_rps" if finished else "budget")
    return out


def triton_figures(stage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What Triton's statistics say of a stage: the batch size achieved, queue and compute ms per request."""
    met = next((m for m in (stage or {}).get("server_metrics") or [] if m.get("source") == "triton_stats"), None)
    if met is None:
        return None
    keys = ("batch_size", "queue_ms", "compute_infer_ms", "compute_ms", "executions", "inferences", "window")
    return {k: met.get(k) for k in keys}


def _server_figures(stage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the server's process tree used in a stage (``satpoint.observe``), if it was watched."""
    srv = (stage or {}).get("server")
    if not srv:
        return None
    return {
        "rps": stage.get("offered_rps") if stage else None,
        "cpu_cores": (srv.get("cpu_cores") or {}).get("mean"),
        "allowed_cores": srv.get("allowed_cores"),
        "cpu_us_per_request": srv.get("cpu_us_per_request"),
        "cpu_us_per_inference": srv.get("cpu_us_per_inference"),
        # under a CPU limit: the share of CFS periods throttled and the ms stalled per second
        "throttled_share": (srv.get("cpu_throttling") or {}).get("throttled_share"),
        "throttled_ms_per_s": (srv.get("cpu_throttling") or {}).get("throttled_ms_per_s"),
    }


def _first_above(stages: Sequence[Mapping[str, Any]], sat: Any) -> Mapping[str, Any] | None:
    if sat is None:
        return None
    above = [s for s in stages if float(s["target_rps"]) > float(sat) * (1 + 1e-3) and s.get("verdict") != "stable"]
    return min(above, key=lambda s: float(s["target_rps"]), default=None)


def _models_figures(server: Mapping[str, Any]) -> dict[str, Any]:
    """What an embedded server's header says of its models (``servers.models.many``): their count, the
    seconds to be ready with them all loaded, and the memory of its process tree then (RSS summed over the
    tree; PSS and USS where read; the main process's and each other process's RSS)."""
    mem = server.get("memory_at_ready") or {}
    procs = mem.get("processes") or []
    return {
        "models": (server.get("models") or {}).get("count"),
        "startup_s": server.get("startup_s"),
        "rss_mb_at_ready": mem.get("rss_mb"),
        "pss_mb_at_ready": mem.get("pss_mb"),
        "uss_mb_at_ready": mem.get("uss_mb"),
        "main_rss_mb_at_ready": next((p.get("rss_mb") for p in procs if p.get("role") == "main"), None),
        "child_rss_mb_at_ready": [p.get("rss_mb") for p in procs if p.get("role") != "main"],
    }
