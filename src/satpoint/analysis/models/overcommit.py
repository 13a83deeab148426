"""summary.json's ``overcommit`` block: a run or search with ``--resident K`` (``transports.overcommit``).

The emulated scheduler's counters are in each segment's ``generator.transport.overcommit`` (results.json);
this adds them up, gives each segment's share of cold requests, and words the warning every report shows:
the figures include loads and evictions that satpoint itself made (an overcommitting scheduler's policy
emulated from the client's side, not Seldon's code).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from satpoint.metrics.results import Results
from satpoint.payloads.mix import HEADER_KEY as MIX_KEY

_COUNTS = ("loads", "evictions", "cold_requests", "load_failures")


def _ms(values: list[float]) -> dict[str, Any] | None:
    if not values:
        return None
    a = np.asarray(values, dtype=np.float64) * 1e3
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p99": round(float(np.percentile(a, 99)), 3),
        "max": round(float(a.max()), 3),
        "n": len(values),
    }


def overcommit_block(results: Results) -> dict[str, Any] | None:
    """The counters over the whole run and per segment (None: not an overcommit run)."""
    mix = results.header.get("target", {}).get("mix")
    resident = mix.get("resident") if isinstance(mix, dict) else None
    parts = [(seg, seg.generator.get("transport", {}).get("overcommit")) for seg in results.segments]
    parts = [(seg, oc) for seg, oc in parts if isinstance(oc, dict)]
    if resident is None and not parts:
        return None
    segments: list[dict[str, Any]] = []
    load_s: list[float] = []
    for seg, oc in parts:
        requests = len(seg.records)
        cold = int(oc.get("cold_requests", 0))
        segments.append(
            {"segment": seg.index, "purpose": seg.purpose, "requests": requests}
            | {k: int(oc.get(k, 0)) for k in _COUNTS}
            | {"cold_share": round(cold / requests, 4) if requests else None, "load_ms": _ms(oc.get("load_s", []))}
        )
        load_s.extend(oc.get("load_s", []))
    requests = sum(s["requests"] for s in segments)
    totals = {k: sum(s[k] for s in segments) for k in _COUNTS}
    first = parts[0][1] if parts else {}
    k = first.get("resident_max", resident)
    n = first.get("models", len(results.header.get(MIX_KEY, {}).get("models") or []))
    return {
        "emulated": True,
        "resident_max": k,
        "models": n,
        "requests": requests,
        **totals,
        "cold_share": round(totals["cold_requests"] / requests, 4) if requests else None,
        "load_ms": _ms(load_s),
        "segments": segments,
        "warning": _warning(k, n, totals, requests),
    }


def _warning(k: Any, n: Any, totals: dict[str, int], requests: int) -> str:
    head = (
        f"OVERCOMMIT EMULATED: at most {k} of the {n} models resident, loaded on demand and evicted least "
        "recently used by satpoint (an overcommitting scheduler's policy, not Seldon's code)"
    )
    if not totals["loads"] and not totals["cold_requests"]:
        return f"{head}: no model was loaded or evicted in this run (0 of {requests} requests waited for a load)"
    return (
        f"{head}: every figure here includes those loads ({totals['loads']} loads, {totals['evictions']} "
        f"evictions; {totals['cold_requests']} of {requests} requests waited for a load)"
    )
