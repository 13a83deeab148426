"""The saturation search's fields in summary.json, recomputed from the recorded stages."""

from __future__ import annotations

from typing import Any

from satpoint.analysis.capacity import recommend
from satpoint.analysis.search import Measured, SearchParams, Step, bracket, replay
from satpoint.analysis.verdicts import Verdict
from satpoint.metrics.results import Results
from satpoint.metrics.stats import StageMetrics

SEARCH_PURPOSES = ("staircase", "refine")
PROFILE_FRACTIONS = (0.5, 0.8, 0.9, 1.0)


def search_params(results: Results) -> SearchParams:
    f = results.header.get("config", {}).get("find", {})
    return SearchParams(
        start_rps=float(f.get("start_rps", 10.0)),
        growth=float(f.get("growth", 2.0)),
        precision=float(f.get("precision", 0.05)),
        max_rps=float(f.get("max_rps", 50_000.0)),
    )


def search_history(results: Results, stages: list[tuple[int, StageMetrics]]) -> list[Measured]:
    purpose = {s.index: s.purpose for s in results.segments}
    return [Measured(m.target_rps, m.verdict) for i, m in stages if purpose.get(i) in SEARCH_PURPOSES]


def _step_dict(s: Step | None) -> dict[str, Any] | None:
    return None if s is None else {"rate_rps": round(s.rate_rps, 4), "phase": s.phase, "fresh": s.fresh}


def find_fields(
    results: Results, stages: list[tuple[int, StageMetrics]], lost: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The search's summary fields.  A stage during which the target stopped answering (``lost``, see
    ``analysis.target_lost``) says nothing about the server's capacity: it is left out of the search."""
    f = results.header.get("config", {}).get("find", {})
    params = search_params(results)
    if lost is not None and lost.get("segment") is not None:
        stages = [(i, m) for i, m in stages if i != lost["segment"]]
    history = search_history(results, stages)
    b = bracket(history)
    decisions = replay(history, params)
    # the replay must ask for exactly the rates that were measured
    asked = [d.rate_rps if d else None for d in decisions[:-1]]
    replay_ok = all(
        a is not None and abs(a - h.rate_rps) <= 1e-6 * max(1.0, h.rate_rps)
        for a, h in zip(asked, history, strict=True)
    )
    finished = decisions[-1] is None if decisions else False
    gen_limited = bool(history) and history[-1].verdict == Verdict.GENERATOR_LIMITED and decisions[-1] is None
    sat = b.stable_rps
    overloaded = [
        m
        for _, m in stages
        if m.verdict != Verdict.STABLE and m.verdict != Verdict.GENERATOR_LIMITED and m.verdict != Verdict.FAILING
    ]
    max_tp = max((m.throughput_rps for m in overloaded), default=None)
    purpose = {s.index: s.purpose for s in results.segments}
    profile = [m for i, m in stages if purpose.get(i) == "profile"]
    latency_at = []
    for m in profile:
        frac = m.target_rps / sat if sat else None
        latency_at.append(
            {
                "fraction": round(frac, 3) if frac else None,
                "offered_rps": round(m.offered_rps, 3),
                "throughput_rps": round(m.throughput_rps, 3),
                "latency_ms": {k: m.latency_ms[k] for k in ("p50", "p90", "p99", "max")},
                "verdict": m.verdict,
            }
        )
    slo = f.get("slo") or None
    rec = None
    if sat is not None:
        rec = recommend(sat, float(f.get("margin", 0.15)), f.get("peak_rps"), f.get("min_rps")).to_dict()
    notes: list[str] = []
    if gen_limited:
        notes.append(
            "generator-limited: the generator fell behind before the server saturated; the saturation "
            "point is a lower bound"
        )
    if sat is None and history:
        notes.append("no stable stage was found: even the lowest rate tried overloaded the server or failed")
    if b.unstable_rps is None and history and not gen_limited:
        notes.append("no unstable stage was reached: the saturation point is above the highest rate tried")
    for m in profile:
        frac = m.target_rps / sat if sat else None
        if m.verdict != Verdict.STABLE and frac is not None and frac <= 1.0 + 1e-9:
            notes.append(
                f"the profile stage at {frac:.0%} of the saturation point was {m.verdict}: this "
                "server's capacity varies between runs; keep the margin, or raise it"
            )
    if lost is not None:
        left_out = " and that stage is left out of it" if lost.get("segment") is not None else ""
        notes.append(f"the search ended because the target stopped answering{left_out}")
    elif not finished:
        notes.append("the search stopped before reaching the requested precision (budget or interruption)")
    return {
        "saturation_rps": round(sat, 3) if sat is not None else None,
        "unstable_rps": round(b.unstable_rps, 3) if b.unstable_rps is not None else None,
        "max_throughput_rps": round(max_tp, 3) if max_tp is not None else None,
        "precision": params.precision,
        "precision_achieved": round(b.ratio, 4) if b.ratio is not None else None,
        "slo": slo,
        "search": {
            "params": {"start_rps": params.start_rps, "growth": params.growth, "max_rps": params.max_rps},
            "steps": [{"rate_rps": round(h.rate_rps, 4), "verdict": h.verdict} for h in history],
            "finished": finished,
            "replay_matches": replay_ok,
            "next": _step_dict(decisions[-1]) if decisions else None,
        },
        "latency_at": latency_at,
        "recommendation": rec,
        "find_notes": notes,
    }
