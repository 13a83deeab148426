"""Why the server saturates: lines drawn from the measured numbers, each with the number behind it.

A pure function of ``summary.json`` (its stages' ``server`` and ``server_metrics`` blocks, the
saturation point, the server's settings) and of the per-second latency of each stage (for periodic
spikes).  Every line is ``{kind, text, evidence}``; kinds:

- ``cpu_bound``: at saturation the server used ≥ 90 % of the cores it was allowed → more workers or
  cores, or a cheaper artefact;
- ``not_cpu_bound``: it saturated with CPU to spare → a concurrency limit (workers, batching, threads,
  connection limits);
- ``cpu_unknown``: no server CPU figures (what could not be seen, and how to see it);
- ``not_saturated``: a ``find`` that never drove the server to saturation (no stage judged saturated, or
  slo_violated under an SLO: the generator, its connection cap, the budget or max_rps was the limit):
  nothing is said about a saturation, only why there was none;
- ``queue_dominates``: requests waited longer than they computed (the server's queue time where it
  exposes one, else the client's service time against the server's own inference time);
- ``batching_idle``: adaptive (MLServer) or dynamic (Triton) batching is on but batches hold about one
  request;
- ``cpu_throttled``: the server's CPU quota (a CPU limit, ``server_cpu_limit``) throttled it in at least
  ``THROTTLED_SHARE`` of the CFS periods at saturation, or below it with a p99 at least ``THROTTLED_TAIL``
  times the p50: the quota, not the cores, is what limits it (capacity, or the latency tail);
- ``memory_growing``: peak RSS grows across stages;
- ``latency_spikes``: latency spikes at a regular period in the per-second intervals (GC or similar);
- ``counts_agree`` / ``counts_disagree``: the server's request count against satpoint's answers.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

CPU_BOUND_FRAC = 0.9
CROSS_CHECK = 0.01  # as analysis.server.server_side.CROSS_CHECK_TOLERANCE
BATCH_IDLE = 1.2
THROTTLED_SHARE = 0.2  # periods throttled, of all CFS periods in the stage
THROTTLED_TAIL = 2.0  # p99/p50 below saturation for throttling to be named as the latency limit
MEMORY_GROWTH_FRAC = 0.2
MEMORY_GROWTH_MIN_MB = 50.0
SPIKE_FACTOR = 5.0  # a second whose p99 exceeds this many times the stage's median p50 ...
SPIKE_MIN_MS = 5.0  # ... and the median p50 by at least this much
SPIKE_MIN_COUNT = 3
SPIKE_PERIOD_CV = 0.35  # the gaps between spikes vary by at most this coefficient of variation

Line = dict[str, Any]


def _line(kind: str, text: str, **evidence: Any) -> Line:
    return {"kind": kind, "text": text, "evidence": evidence}


def _cpu(stage: Mapping[str, Any]) -> float | None:
    srv = stage.get("server") or {}
    cores = srv.get("cpu_cores") or {}
    v = cores.get("mean")
    return float(v) if isinstance(v, (int, float)) else None


def saturation_stages(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The stages that show the server at its limit: those judged ``saturated`` (or ``slo_violated``,
    under an SLO); for ``find``, at or above its saturation point.  None: the server was never
    pushed to its limit (a stable stage at the answer, or a generator- or client-limited one above it,
    says nothing about what limits the server)."""
    stages = list(summary.get("stages") or [])
    at = [s for s in stages if s["verdict"] in ("saturated", "slo_violated")]  # slo_violated: under an SLO
    sat = summary.get("saturation_rps")
    if summary.get("kind") == "find" and isinstance(sat, (int, float)):
        at = [s for s in at if s["target_rps"] >= sat * (1 - 1e-6)]
    return at


def _not_saturated_line(summary: Mapping[str, Any]) -> Line:
    """Why a ``find`` never drove the server to saturation, from its stages and notes."""
    verdicts = {s["verdict"] for s in summary.get("stages") or []}
    notes = " ".join(summary.get("find_notes") or [])
    if "generator_limited" in verdicts or "generator-limited" in notes:
        why = "the generator fell behind (generator limit)"
    elif "client_limited" in verdicts or "client-limited" in notes:
        why = "the generator's connection cap was the limit (raise --max-inflight)"
    elif "failing" in verdicts:
        why = "the stages above the answer failed with errors instead (see the errors)"
    elif summary.get("unstable_rps") is None and (summary.get("search") or {}).get("finished", True):
        why = "the search reached its highest rate (max_rps) without overloading it"
    else:
        why = "the search's budget ran out first (budget limit)"
    text = (
        f"the server was not driven to saturation: no stage was judged saturated, because {why}; nothing here "
        "says what limits the server"
    )
    return _line("not_saturated", text, reason=why, saturation_rps=summary.get("saturation_rps"))


def _cpu_lines(summary: Mapping[str, Any], at: list[Mapping[str, Any]]) -> list[Line]:
    observed = summary.get("observed") or {}
    with_cpu = [s for s in at if _cpu(s) is not None]
    if not at:
        return []
    if not with_cpu:
        seen = [n for n in observed.get("not_seen") or [] if n.startswith("server resources")]
        why = seen[0] if seen else "no sample of the server's processes covers the stages at saturation"
        return [
            _line(
                "cpu_unknown",
                f"cannot tell whether the server is CPU-bound: {why}; give --server-pid PID for a local server",
                reason=why,
            )
        ]
    top = max(with_cpu, key=lambda s: _cpu(s) or 0.0)
    cores = _cpu(top) or 0.0
    srv = top["server"]
    allowed = srv.get("allowed_cores") or observed.get("allowed_cores")
    # the CPU cost of a request where every request was answered: the stable stage nearest saturation
    calm = [s for s in with_cpu if s["verdict"] == "stable" and (s["server"] or {}).get("cpu_us_per_request")]
    sat = summary.get("saturation_rps")
    if not calm and isinstance(sat, (int, float)):
        calm = [
            s
            for s in summary.get("stages") or []
            if s["verdict"] == "stable" and (s.get("server") or {}).get("cpu_us_per_request") and s["target_rps"] <= sat
        ]
    ref = max(calm, key=lambda s: s["target_rps"]) if calm else None
    ev = {
        "stage": top["index"] + 1,
        "segment": top["segment"],
        "offered_rps": top["offered_rps"],
        "cpu_cores": cores,
        "cpu_cores_p95": (srv.get("cpu_cores") or {}).get("p95"),
        "allowed_cores": allowed,
        "reference_offered_rps": ref["offered_rps"] if ref else None,
        "reference_cpu_cores": _cpu(ref) if ref else None,
        "cpu_us_per_request": ref["server"]["cpu_us_per_request"] if ref else None,
        "cpu_us_per_inference": ref["server"].get("cpu_us_per_inference") if ref else None,
    }
    per = ""
    if ref is not None:
        unit = ev["cpu_us_per_inference"] or ev["cpu_us_per_request"]
        what = "inference" if ev["cpu_us_per_inference"] else "request"
        per = (
            f"at {ref['offered_rps']:.0f} rps (stable) it used {ev['reference_cpu_cores']:.2f} cores, "
            f"{unit:.0f} µs of server CPU per {what}"
        )
    if not allowed:
        return [_line("cpu_unknown", f"at saturation the server used {cores:.2f} cores (allowed cores unknown)", **ev)]
    frac = cores / allowed
    ev["utilisation"] = round(frac, 4)
    busy, others = srv.get("cpus_busy_cores"), srv.get("other_cores")
    ev["cpus_busy_cores"], ev["other_cores"] = busy, others
    where = (
        f"at saturation ({top['offered_rps']:.0f} rps offered) the server used {cores:.2f} of its {allowed:g} "
        f"allowed cores ({frac:.0%})"
    )
    if frac >= CPU_BOUND_FRAC:
        text = f"CPU-bound: {where}{'; ' + per if per else ''} → more workers or cores, or a cheaper artefact"
        return [_line("cpu_bound", text, **ev)]
    if busy is not None and others and busy >= CPU_BOUND_FRAC * allowed:
        text = (
            f"CPU-bound on shared cores: {where}, and other processes used {others:.2f} more: its CPUs were "
            f"{busy / allowed:.0%} busy{'; ' + per if per else ''} → give the server cores of its own (or more), "
            "then measure again"
        )
        return [_line("cpu_bound", text, shared=True, **ev)]
    text = (
        f"not CPU-bound while saturated: {where} → a concurrency limit: workers, batching, threads or connection limits"
    )
    return [_line("not_cpu_bound", text, **ev)]


def _queue_lines(at: list[Mapping[str, Any]]) -> list[Line]:
    for s in sorted(at, key=lambda s: s["offered_rps"]):
        for blk in s.get("server_metrics") or []:
            q, c = blk.get("queue_ms"), blk.get("compute_ms")
            if q is not None and c is not None and q > c:
                text = (
                    f"queue time dominates compute at {s['offered_rps']:.0f} rps: {q:.2f} ms queued vs "
                    f"{c:.2f} ms computing per request (server metrics)"
                )
                return [_line("queue_dominates", text, stage=s["index"] + 1, queue_ms=q, compute_ms=c)]
            model_ms = blk.get("mean_latency_ms")
            svc = (s.get("service_ms") or {}).get("p50")
            if q is None and model_ms is not None and svc is not None and svc > 2 * model_ms and svc - model_ms > 1:
                text = (
                    f"time outside the model dominates at {s['offered_rps']:.0f} rps: the client's service time "
                    f"p50 is {svc:.2f} ms while the server's own inference takes {model_ms:.2f} ms on average: "
                    "requests queue in front of the model (event loop, worker dispatch, batching)"
                )
                return [
                    _line(
                        "queue_dominates", text, stage=s["index"] + 1, service_p50_ms=svc, server_inference_ms=model_ms
                    )
                ]
    return []


def _batching(summary: Mapping[str, Any]) -> int | None:
    """The max batch size when the server batches requests (None: no batching, or not known): the
    server satpoint started (MLServer's adaptive batching, the embedded Triton's dynamic batcher), else a
    Triton model configuration with a dynamic batcher and max_batch_size > 1."""
    settings = (summary.get("server") or {}).get("settings") or {}
    configured = settings.get("max_batch_size")
    if isinstance(configured, int) and configured > 1:
        return configured
    model = (summary.get("triton") or {}).get("model_config") or {}
    mbs = model.get("max_batch_size")
    if isinstance(mbs, int) and mbs > 1 and model.get("max_queue_delay_us") is not None:
        return mbs
    return None


def _batch_lines(summary: Mapping[str, Any], stages: list[Mapping[str, Any]]) -> list[Line]:
    configured = _batching(summary)
    for s in sorted(stages, key=lambda s: -s["offered_rps"]):
        for blk in s.get("server_metrics") or []:
            got, label = blk.get("batch_size"), "achieved batch size"
            if got is None and configured:
                got, label = blk.get("batch_queue_mean"), "mean batch queue at enqueue (MLServer)"
            on = configured is not None  # a model that does not batch executes one request at a time
            if got is not None and on and got <= BATCH_IDLE:
                text = (
                    f"batching is on but batches hold about one request at {s['offered_rps']:.0f} rps: "
                    f"{label} {got:.2f}" + (f" (max_batch_size {configured})" if configured else "")
                )
                return [_line("batching_idle", text, stage=s["index"] + 1, batch=got, max_batch_size=configured)]
            if got is not None:
                return []
    return []


def _throttled(stage: Mapping[str, Any]) -> Mapping[str, Any] | None:
    th = (stage.get("server") or {}).get("cpu_throttling") or {}
    share = th.get("throttled_share")
    return th if isinstance(share, (int, float)) and share >= THROTTLED_SHARE else None


def _throttle_lines(summary: Mapping[str, Any], at: list[Mapping[str, Any]], stages: list[Any]) -> list[Line]:
    limit = ((summary.get("server") or {}).get("settings") or {}).get("cpu_limit_cores")
    quota = f"its CPU limit of {limit:g} cores" if isinstance(limit, (int, float)) else "its cgroup's CPU quota"
    hot = [(s, th) for s in sorted(at, key=lambda s: s["offered_rps"]) if (th := _throttled(s)) is not None]
    where = "at saturation"
    if not hot:  # below saturation: throttling stalls requests while the server keeps up on average
        for s in sorted(stages, key=lambda s: -s["offered_rps"]):
            lat = s.get("latency_ms") or {}
            p50, p99 = lat.get("p50"), lat.get("p99")
            th = _throttled(s)
            if s["verdict"] == "stable" and th is not None and p50 and p99 and p99 >= THROTTLED_TAIL * p50:
                hot, where = [(s, th)], f"below saturation (p99 {p99:.1f} ms against p50 {p50:.1f} ms)"
                break
    if not hot:
        return []
    s, th = hot[0]
    text = (
        f"CPU throttled: {where}, at {s['offered_rps']:.0f} rps, {quota} throttled the server in "
        f"{th['throttled_share']:.0%} of the 100 ms periods ({th['throttled_periods']} of {th['periods']}; "
        f"{th.get('throttled_ms_per_s') or 0:.0f} ms stalled per second) → raise the CPU limit, or run fewer "
        "busy threads than the quota pays for"
    )
    ev = {k: th.get(k) for k in ("periods", "throttled_periods", "throttled_share", "throttled_s")}
    return [_line("cpu_throttled", text, stage=s["index"] + 1, offered_rps=s["offered_rps"], limit_cores=limit, **ev)]


def _memory_lines(stages: list[Mapping[str, Any]]) -> list[Line]:
    rss = [
        (s, float(s["server"]["rss_mb"]["max"]))
        for s in stages
        if (s.get("server") or {}).get("rss_mb", {}).get("max") is not None
    ]
    if len(rss) < 3:
        return []
    first, last = rss[0][1], rss[-1][1]
    ups = sum(1 for (_, a), (_, b) in itertools.pairwise(rss) if b > a)
    grows = last - first >= max(MEMORY_GROWTH_MIN_MB, MEMORY_GROWTH_FRAC * first) and ups >= 0.6 * (len(rss) - 1)
    if not grows:
        return []
    text = (
        f"memory grows across stages: peak RSS {first:.0f} MB → {last:.0f} MB over {len(rss)} stages "
        "(a leak or a growing cache?)"
    )
    return [_line("memory_growing", text, first_mb=first, last_mb=last, stages=len(rss))]


def spikes(seconds: Sequence[tuple[int, float | None, float | None]]) -> dict[str, Any] | None:
    """Periodic spikes in one stage's per-second (second, p50 ms, p99 ms) rows, or None."""
    rows = [(t, p50, p99) for t, p50, p99 in seconds if p50 is not None and p99 is not None]
    if len(rows) < 2 * SPIKE_MIN_COUNT:
        return None
    base = float(np.median([p50 for _, p50, _ in rows]))
    hot = [(t, p99) for t, _, p99 in rows if p99 > SPIKE_FACTOR * base and p99 - base > SPIKE_MIN_MS]
    if len(hot) < SPIKE_MIN_COUNT or len(hot) > len(rows) / 2:
        return None
    # neighbouring seconds of one spike count once
    starts = [hot[0]]
    for t, p in hot[1:]:
        if t - starts[-1][0] > 1:
            starts.append((t, p))
    if len(starts) < SPIKE_MIN_COUNT:
        return None
    gaps = np.diff([t for t, _ in starts])
    if float(gaps.mean()) <= 0 or float(gaps.std() / gaps.mean()) > SPIKE_PERIOD_CV:
        return None
    return {
        "spikes": len(starts),
        "period_s": round(float(gaps.mean()), 2),
        "spike_p99_ms": round(max(p for _, p in starts), 3),
        "median_p50_ms": round(base, 3),
    }


def _spike_lines(stages: list[Mapping[str, Any]], seconds: Mapping[tuple[int, int], Sequence[Any]]) -> list[Line]:
    for s in stages:
        if s["verdict"] not in ("stable", "slo_violated"):
            continue
        got = spikes(seconds.get((s["segment"], s["index"]), ()))
        if got is None:
            continue
        text = (
            f"periodic latency spikes at {s['offered_rps']:.0f} rps: {got['spikes']} spikes about every "
            f"{got['period_s']:g} s, p99 up to {got['spike_p99_ms']:.1f} ms against a median p50 of "
            f"{got['median_p50_ms']:.2f} ms (garbage collection or another periodic pause?)"
        )
        return [_line("latency_spikes", text, stage=s["index"] + 1, segment=s["segment"], **got)]
    return []


def _count_lines(stages: list[Mapping[str, Any]]) -> list[Line]:
    checks: dict[tuple[str, int], dict[str, Any]] = {}
    for s in stages:
        for blk in s.get("server_metrics") or []:
            cc = blk.get("cross_check")
            if cc:
                checks[(blk["url"], cc["segment"])] = cc
    if not checks:
        return []
    explained = [c for c in checks.values() if c.get("explained")]
    bad = [c for c in checks.values() if not c["agrees"] and not c.get("explained")]
    diffs = [abs(c["difference"]) for c in checks.values() if c.get("difference") is not None]
    worst = max(diffs, default=0.0)
    if not bad:
        agreed = [c for c in checks.values() if c["agrees"]]
        server = sum(c["server_requests"] for c in agreed)
        client = sum(c["client_answers"] for c in agreed)
        worst_ok = max((abs(c["difference"]) for c in agreed if c.get("difference") is not None), default=0.0)
        text = (
            f"the server's count agrees with satpoint's answers within {CROSS_CHECK:.0%} in {len(agreed)} of "
            f"{len(checks)} segments ({server} counted vs {client} answered; worst difference {worst_ok:.2%})"
        )
        if explained:
            extra = sum(c["server_requests"] - c["client_answers"] for c in explained)
            text += (
                f"; in the other {len(explained)} (cut off under overload) the server also answered {extra} "
                "requests satpoint had stopped waiting for"
            )
        return [
            _line(
                "counts_agree",
                text,
                segments=len(agreed),
                worst_difference=worst_ok,
                overloaded_segments=len(explained),
            )
        ]
    c = bad[0]
    text = (
        f"the server's count disagrees in {len(bad)} of {len(checks)} segments: e.g. segment {c['segment']} "
        f"{c['server_requests']} counted vs {c['client_answers']} answered"
        + (f" ({c['note']})" if c.get("note") else "")
    )
    return [_line("counts_disagree", text, segments=len(bad), worst_difference=worst)]


def diagnose(
    summary: Mapping[str, Any], seconds: Mapping[tuple[int, int], Sequence[tuple[int, float | None, float | None]]]
) -> list[Line]:
    """The diagnosis lines of a summary; ``seconds`` maps (segment, stage index) to its per-second
    (second, p50 ms, p99 ms) rows."""
    stages = list(summary.get("stages") or [])
    at = saturation_stages(summary)
    out: list[Line] = []
    if summary.get("kind") == "find" and not at and stages:
        out.append(_not_saturated_line(summary))  # and nothing about a saturation that never happened
    else:
        out += _throttle_lines(summary, at, stages)
        out += _cpu_lines(summary, at)
        out += _queue_lines(at)
        out += _batch_lines(summary, at or stages)
    out += _memory_lines(stages)
    out += _spike_lines(stages, seconds)
    out += _count_lines(stages)
    return out
