"""Cold starts and overcommit, summarised: pure functions of what ``satpoint coldstart`` recorded.

A cold-start repetition (``Repetition``) is one unload and load of one model through the repository API:
the unload's answer time, the wait until the model stopped answering ready, the load's answer time (both
servers answer a load once the model is loaded), the first inference after the load and a few warm ones,
and the requests of a small open-loop stream sent at the model while it was loading (their latency from
their intended times; MLServer answers 404 while a model is absent and 400 while it loads, so most are errors).

An overcommit run (``overcommit_summary``) is a constant-rate mix over N models of which at most K stay
resident (``transports.overcommit``): its latency distribution, that of its cold requests (those that arrived
for a model that was not resident) and of the others, the share of cold requests, loads and evictions.

``recommend`` turns both into what a replica plan needs: the latency a cold start adds to the request that
wakes a model, and the smallest resident set K whose p99 met the SLO.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.metrics.records import CENSORED, Outcome, Records
from satpoint.metrics.stats import pct_ms
from satpoint.transports.grpc.codec import status_name

#: the percentiles a cold-start distribution reports
COLD_PCTS = {"p50": 50.0, "p90": 90.0, "p99": 99.0}

F64 = npt.NDArray[np.float64]


def dist_ms(values_s: Sequence[float] | F64) -> dict[str, float | None]:
    """p50/p90/p99/max (ms) and the count of ``values_s`` (seconds; NaN ignored)."""
    arr = np.asarray(values_s, dtype=np.float64)
    out: dict[str, float | None] = dict(pct_ms(arr, COLD_PCTS))
    out["n"] = float(int(np.count_nonzero(~np.isnan(arr))))
    return out


@dataclass
class Repetition:
    """One unload + load of one model (times in seconds)."""

    model: str
    rep: int
    unload_s: float | None = None
    absent_wait_s: float | None = None
    load_s: float | None = None
    load_error: str | None = None
    first_infer_s: float | None = None
    first_status: int | None = None
    warm_infer_s: float | None = None  # the median of a few inferences right after the first
    #: the during-load stream: each request's latency from its intended time, its outcome and status
    during_latency_s: list[float] = field(default_factory=list)
    during_outcome: list[int] = field(default_factory=list)
    during_status: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Repetition:
        return cls(**doc)


def during_rows(rec: Records, t_start: float, t_end: float) -> tuple[list[float], list[int], list[int]]:
    """The stream's requests intended while the model was loading (``t_start``..``t_end``, the records'
    clock): latency from the intended time (censored rows at the time waited so far), outcome, status."""
    sel = (rec.intended >= t_start) & (rec.intended <= t_end)
    lat = (rec.done - rec.intended)[sel]
    return [float(x) for x in lat], [int(x) for x in rec.outcome[sel]], [int(x) for x in rec.status[sel]]


def _vals(reps: Sequence[Repetition], key: str) -> list[float]:
    out = []
    for r in reps:
        v = getattr(r, key)
        if v is not None:
            out.append(float(v))
    return out


def _outcome_name(outcome: int, status: int) -> str:
    if outcome == Outcome.OK:
        return "ok"
    if outcome == Outcome.HTTP_ERROR:
        return f"http_{status}"
    if outcome == Outcome.GRPC_ERROR:
        return f"grpc_{status_name(status).lower()}"
    return Outcome(outcome).name.lower()


def during_summary(reps: Sequence[Repetition]) -> dict[str, Any]:
    """Every repetition's during-load requests pooled: how many, how they ended, their latency (all, and
    the successful ones alone)."""
    lat = np.asarray([x for r in reps for x in r.during_latency_s], dtype=np.float64)
    outcome = np.asarray([x for r in reps for x in r.during_outcome], dtype=np.int64)
    status = np.asarray([x for r in reps for x in r.during_status], dtype=np.int64)
    ends = Counter(_outcome_name(int(o), int(s)) for o, s in zip(outcome, status, strict=True))
    ok = outcome == Outcome.OK
    return {
        "requests": len(lat),
        "outcomes": dict(sorted(ends.items())),
        "error_share": round(float(np.mean(~ok)), 4) if len(lat) else None,
        "latency_ms": dist_ms(lat),
        "ok_latency_ms": dist_ms(lat[ok]),
    }


def coldstart_summary(reps: Sequence[Repetition], ok_status: int = 200) -> dict[str, Any]:
    """Distributions over every repetition (and per model) of the unload, the load, the first inference
    after it, warm inferences, and the during-load stream.  ``ok_status``: a successful first inference's
    status (HTTP 200; over gRPC 0, OK)."""
    models = list(dict.fromkeys(r.model for r in reps))
    per_model = []
    for m in models:
        mine = [r for r in reps if r.model == m]
        per_model.append(
            {
                "model": m,
                "repetitions": len(mine),
                "load_ms": dist_ms(_vals(mine, "load_s")),
                "first_infer_ms": dist_ms(_vals(mine, "first_infer_s")),
            }
        )
    failed = [r for r in reps if r.load_error is not None]
    bad_first = [r for r in reps if r.first_status not in (None, ok_status)]
    return {
        "repetitions": len(reps),
        "models": models,
        "unload_ms": dist_ms(_vals(reps, "unload_s")),
        "absent_wait_ms": dist_ms(_vals(reps, "absent_wait_s")),
        "load_ms": dist_ms(_vals(reps, "load_s")),
        "first_infer_ms": dist_ms(_vals(reps, "first_infer_s")),
        "warm_infer_ms": dist_ms(_vals(reps, "warm_infer_s")),
        "load_failures": len(failed),
        "load_errors": sorted({str(r.load_error) for r in failed})[:5],
        "first_infer_failures": len(bad_first),
        "during_load": during_summary(reps),
        "per_model": per_model,
    }


def latency_s(rec: Records) -> F64:
    """Each row's latency from its intended time, NaN for rows answered with an error (counted apart):
    successful and censored rows (timed out, unfinished, never sent: a lower bound) keep theirs."""
    lat = rec.done - rec.intended
    keep = (rec.outcome == Outcome.OK) | np.isin(rec.outcome, [int(o) for o in CENSORED])
    return np.where(keep, lat, np.nan)


def overcommit_summary(
    rec: Records,
    cold_rows: Sequence[int],
    counters: dict[str, Any],
    *,
    resident: int,
    models: int,
    mix: str,
    rate_rps: float,
    duration_s: float,
    model_of_row: Sequence[int] | npt.NDArray[np.integer[Any]] | None = None,
) -> dict[str, Any]:
    """One overcommit run: latency (all, cold, warm), the share of cold requests, errors, the completion
    rate, loads and evictions (``counters``: the wrapper's ``stats()["overcommit"]``)."""
    n = len(rec)
    cold = np.zeros(n, dtype=np.bool_)
    if len(cold_rows):
        cold[np.asarray(cold_rows, dtype=np.int64)] = True
    lat = latency_s(rec)
    errors = int(np.count_nonzero((rec.outcome != Outcome.OK) & ~np.isin(rec.outcome, [int(o) for o in CENSORED])))
    ok = int(np.count_nonzero(rec.outcome == Outcome.OK))
    span = float(np.nanmax(rec.done) - rec.intended[0]) if n and not np.all(np.isnan(rec.done)) else duration_s
    out: dict[str, Any] = {
        "resident": resident,
        "models": models,
        "mix": mix,
        "rate_rps": rate_rps,
        "duration_s": duration_s,
        "requests": n,
        "cold_requests": int(cold.sum()),
        "cold_share": round(float(cold.mean()), 4) if n else None,
        "latency_ms": dist_ms(lat),
        "cold_latency_ms": dist_ms(lat[cold]),
        "warm_latency_ms": dist_ms(lat[~cold]),
        "errors": errors,
        "error_rate": round(errors / n, 4) if n else None,
        "throughput_rps": round(ok / span, 2) if span > 0 else None,
        "loads": counters.get("loads", 0),
        "evictions": counters.get("evictions", 0),
        "load_failures": counters.get("load_failures", 0),
        "load_ms": dist_ms(counters.get("load_s", [])),
        "control_errors": counters.get("errors", []),
    }
    if model_of_row is not None:
        rows = np.asarray(model_of_row, dtype=np.int64)
        out["requests_per_model"] = [int(x) for x in np.bincount(rows, minlength=models)]
    return out


def recommend(
    summary: dict[str, Any], overcommit: Sequence[dict[str, Any]], slo_p99_ms: float | None
) -> dict[str, Any]:
    """What a replica plan takes from the measurements: the latency a cold start adds to the request that
    wakes a model (load + first inference − a warm inference, at p50 and p99 of each), and, with an SLO,
    the smallest resident set K whose run kept p99 within it (None if none did) with an error rate ≤ 1 %."""
    out: dict[str, Any] = {}
    load, first, warm = (
        summary.get("load_ms") or {},
        summary.get("first_infer_ms") or {},
        summary.get("warm_infer_ms") or {},
    )
    added: dict[str, float | None] = {}
    for key in ("p50", "p99"):
        parts = (load.get(key), first.get(key), warm.get("p50"))
        added[key] = None if any(p is None for p in parts) else round(parts[0] + parts[1] - parts[2], 3)  # type: ignore[operator]
    out["cold_start_added_ms"] = added
    if slo_p99_ms is not None:
        out["slo_p99_ms"] = slo_p99_ms
        meets = [
            o["resident"]
            for o in overcommit
            if (o["latency_ms"].get("p99") is not None and o["latency_ms"]["p99"] <= slo_p99_ms)
            and (o.get("error_rate") or 0.0) <= 0.01
        ]
        out["resident_for_slo"] = min(meets) if meets else None
        out["resident_tried"] = sorted(o["resident"] for o in overcommit)
    return out
