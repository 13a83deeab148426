"""Generator hosts (``--ray``): their part in stage verdicts, and their figures in ``summary.json``.

A segment run on several hosts records each host's figures under ``generator.ray`` (see
``distributed.coordinator.fleet_block``): its steady-window send lag per stage, its CPU per request,
its clock, and whether it was lost.  The merged rows hide a single host that fell behind once there are
many hosts (its rows are a small share of every percentile), and a lost host's rows are simply absent,
so both are judged here from the hosts' own figures:

- a lost host makes every stage of its segment ``generator_limited``: a share of the planned load never
  reached the server, which the reason states;
- a host whose own p99 send lag exceeds the rule makes the stage ``generator_limited`` and is named.
"""

from __future__ import annotations

from typing import Any

from satpoint.analysis.search.verdicts import Verdict
from satpoint.config import VerdictRules
from satpoint.metrics.results import Results
from satpoint.metrics.stats import StageMetrics


def _name(host: dict[str, Any]) -> str:
    return f"host {host.get('index')} ({host.get('host')})"


def judge_hosts(m: StageMetrics, ray: dict[str, Any] | None, rules: VerdictRules) -> StageMetrics:
    """Amend a judged stage with what its segment's generator hosts say (no-op without ``ray``)."""
    if not ray:
        return m
    hosts: list[dict[str, Any]] = list(ray.get("hosts") or [])
    lost = [h for h in hosts if h.get("lost")]
    if lost and m.verdict != Verdict.FAILING:
        share = float(ray.get("lost_share") or len(lost) / max(len(hosts), 1))
        names = ", ".join(_name(h) for h in lost)
        m.verdict = Verdict.GENERATOR_LIMITED
        m.reasons = [
            f"{names} lost: about {share:.0%} of this stage's scheduled requests are missing (their rows were "
            f"lost with the host); the server got that much less load than planned",
            *m.reasons,
        ]
        return m
    behind = []
    for h in hosts:
        lags = h.get("stage_lag_p99_ms") or []
        lag = lags[m.index] if m.index < len(lags) else None
        if isinstance(lag, (int, float)) and lag > rules.generator_lag_p99_ms:
            behind.append(f"{_name(h)} fell behind its schedule: p99 send lag {lag:.1f} ms")
    if behind and m.verdict != Verdict.FAILING:
        if m.verdict != Verdict.GENERATOR_LIMITED:
            m.reasons = []
        m.verdict = Verdict.GENERATOR_LIMITED
        m.reasons = [
            *m.reasons,
            "; ".join(behind) + f" (limit {rules.generator_lag_p99_ms:g} ms): these numbers are not the server's",
        ]
    return m


def hosts_summary(results: Results) -> dict[str, Any] | None:
    """``summary.generator.ray``: every host's figures over the run's segments (None: no ``--ray``)."""
    blocks = [(s.index, s.generator["ray"]) for s in results.segments if isinstance(s.generator.get("ray"), dict)]
    if not blocks:
        return None
    hosts: dict[int, dict[str, Any]] = {}
    for seg, block in blocks:
        for h in block.get("hosts") or []:
            i = int(h.get("index", 0))
            agg = hosts.setdefault(
                i,
                {"index": i, "host": h.get("host"), "node_id": h.get("node_id"), "requests": 0, "cpu_s": 0.0}
                | {"clock_uncertainty_max_s": 0.0, "lost_segments": [], "lag_p99_max_ms": None},
            )
            agg["requests"] += int(h.get("requests") or 0)
            agg["cpu_s"] += float(h.get("cpu_s") or 0.0)
            clock = h.get("clock") or {}
            agg["clock_offset_s"] = clock.get("offset_s")
            agg["clock_uncertainty_max_s"] = max(agg["clock_uncertainty_max_s"], float(clock.get("uncertainty_s") or 0))
            lags = [x for x in h.get("stage_lag_p99_ms") or [] if isinstance(x, (int, float))]
            if lags:
                agg["lag_p99_max_ms"] = max(
                    lags + ([agg["lag_p99_max_ms"]] if agg["lag_p99_max_ms"] is not None else [])
                )
            if h.get("lost"):
                agg["lost_segments"].append({"segment": seg, "why": h.get("lost")})
    for agg in hosts.values():
        n = agg["requests"]
        agg["cpu_s"] = round(agg["cpu_s"], 4)
        agg["cpu_us_per_request"] = round(agg["cpu_s"] / n * 1e6, 2) if n else None
    skews = [b["start_skew_s"] for _, b in blocks if isinstance(b.get("start_skew_s"), (int, float))]
    bounds = [b["start_skew_bound_s"] for _, b in blocks if isinstance(b.get("start_skew_bound_s"), (int, float))]
    first = blocks[0][1]
    return {
        "address": first.get("address"),
        "procs_per_host": first.get("procs_per_host"),
        "hosts": [hosts[i] for i in sorted(hosts)],
        "segments": len(blocks),
        "start_skew_max_s": max(skews) if skews else None,
        "start_skew_bound_max_s": max(bounds) if bounds else None,
        "lost_hosts": max(int(b.get("lost_hosts") or 0) for _, b in blocks),
    }
