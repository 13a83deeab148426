"""Per-model figures of a model mix: a pure function of the rows' model column and the header's ``mix``.

summary.json's ``models`` block (None for a single-model run):

- ``names``, ``weights`` (the planned shares), ``spec``;
- ``counts``: every request of the run per model against the mix (``requests``, ``expected``, the z of
  each count under a binomial draw, and Pearson's chi-square with its degrees of freedom and p-value by
  the Wilson-Hilferty approximation): the draw is seeded, so this checks the plan, not luck;
- ``stages``: per judged stage (the stage's own steady window, so the models are measured over the same
  seconds as the stage) and model: requests, share, offered and answered rates, error rate and classes,
  latency percentiles from the intended time (censored rows included, as for the stage), and the
  server's own per-model figures where its metrics carry a ``model`` label (MLServer
  ``model_infer_request_*``, Triton ``nv_inference_*``);
- ``first_rise``: the model whose latency rose first as the offered rate rose (``RISE_RULE``).

The stage's verdict is the whole stage's (``analysis.search.verdicts``); the per-model figures explain it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from satpoint.metrics.observed import Observations
from satpoint.metrics.records import ERROR_NAMES, Outcome, Records
from satpoint.metrics.results import Results, Segment
from satpoint.metrics.stats import StageMetrics, pct_ms, queue_growth_rps
from satpoint.payloads.mix import ResolvedMix

#: a model's latency has risen in a stage when its p50 and its p99 are both at least this many times
#: what they were in its lowest-rate stage (the median too: a p99 over a few dozen requests of a rarely
#: drawn model is nearly its maximum, and one slow answer would pass for a rise) ...
RISE_FACTOR = 2.0
#: ... and at least this much higher (sub-millisecond noise on a fast server is not a rise) ...
RISE_MIN_MS = 1.0
#: ... counting only stages where the model had this many requests in the steady window
MIN_REQUESTS = 20
RISE_RULE = (
    f"the first stage, by offered rate, in which a model's p50 and p99 latency (from the intended time) both "
    f"reached {RISE_FACTOR:g}x their values in the model's lowest-rate stage (and at least +{RISE_MIN_MS:g} ms), "
    f"counting stages where the model had >= {MIN_REQUESTS} requests; of the models that crossed in that stage, "
    "the one whose p99 rose by the largest factor"
)
PCTS = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
#: the server's per-model figures kept (``analysis.server.server_side.interpret``)
SERVER_FIELDS = ("source", "window", "requests", "failures", "rps", "mean_latency_ms", "queue_ms", "compute_ms")


def models_block(results: Results, stages: list[tuple[int, StageMetrics]]) -> dict[str, Any] | None:
    """summary.json's ``models`` block (None when the run sent to one model)."""
    mix = ResolvedMix.from_header(results.header)
    if mix is None:
        return None
    segs = {s.index: s for s in results.segments}
    split: dict[int, list[Records]] = {}  # each segment's rows per model, split once
    rows = []
    for i, m in stages:
        seg = segs[i]
        if i not in split:
            split[i] = by_model(seg.records, len(mix.names))
        per = stage_models(seg.records, m, mix, split[i])
        server = server_by_model(seg, m, results.observed, mix)
        for doc in per:
            doc["server"] = server.get(doc["model"])
        rows.append(
            {"segment": i, "stage": m.index, "target_rps": round(m.target_rps, 4), "verdict": m.verdict, "models": per}
        )
    return {
        "names": list(mix.names),
        "weights": [round(w, 6) for w in mix.weights],
        "spec": mix.spec,
        "counts": count_check([s.records for s in results.segments], mix),
        "stages": rows,
        "first_rise": first_rise(rows),
        "rise_rule": RISE_RULE,
    }


def by_model(rec: Records, k: int) -> list[Records]:
    """The rows of each of ``k`` models (in intended order), from one sort of the model column."""
    order = np.argsort(rec.model, kind="stable")
    bounds = np.searchsorted(rec.model[order], np.arange(k + 1), side="left")
    return [rec.select(order[bounds[j] : bounds[j + 1]]) for j in range(k)]


def stage_models(
    rec: Records, m: StageMetrics, mix: ResolvedMix, per_model: list[Records] | None = None
) -> list[dict[str, Any]]:
    """Each model's figures over the stage's steady window ``[window_start_s, window_end_s)`` (``per_model``:
    ``by_model(rec)``, when the caller has it)."""
    per_model = per_model if per_model is not None else by_model(rec, len(mix.names))
    w0, w1 = m.window_start_s, m.window_end_s
    win = w1 - w0
    lo, hi = np.searchsorted(rec.intended, [w0, w1], side="left")
    part = rec.select(slice(int(lo), int(hi)))
    total = len(part)
    in_win = (rec.done >= w0) & (rec.done < w1) & rec.ok_mask()
    answered = np.bincount(rec.model[in_win], minlength=len(mix.names))
    lat = part.latency_s()
    lat_ok = part.latency_mask()
    err = part.error_mask()
    out = []
    for k, name in enumerate(mix.names):
        mine = part.model == k
        n = int(np.count_nonzero(mine))
        n_err = int(np.count_nonzero(mine & err))
        out.append(
            {
                "model": name,
                "requests": n,
                "share": round(n / total, 5) if total else 0.0,
                "weight": round(mix.weights[k], 5),
                "offered_rps": round(n / win, 3) if win > 0 else None,
                "answered_rps": round(int(answered[k]) / win, 3) if win > 0 else None,
                "error_rate": round(n_err / n, 5) if n else 0.0,
                "errors": _error_classes(part.outcome[mine & err], part.status[mine & err]),
                "latency_ms": pct_ms(lat[mine & lat_ok], PCTS),
                # the model's own outstanding count's slope over the window (> 0: its queue grows): one model
                # past its own capacity can hide in a stage whose whole queue grows too little to judge
                "queue_growth_rps": round(queue_growth_rps(per_model[k], w0, w1), 3) if n else 0.0,
            }
        )
    return out


def _error_classes(outcome: np.ndarray[Any, Any], status: np.ndarray[Any, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o, s in zip(outcome.tolist(), status.tolist(), strict=True):
        oc = Outcome(int(o))
        key = (
            f"{'http' if oc is Outcome.HTTP_ERROR else 'grpc'}_{int(s)}"
            if oc in (Outcome.HTTP_ERROR, Outcome.GRPC_ERROR)
            else ERROR_NAMES[oc]
        )
        out[key] = out.get(key, 0) + 1
    return out


def count_check(parts: list[Records], mix: ResolvedMix) -> dict[str, Any]:
    """The run's requests per model against the mix's weights: per-model z and Pearson's chi-square."""
    k = len(mix.names)
    counts = np.zeros(k, dtype=np.int64)
    for rec in parts:
        counts += np.bincount(rec.model, minlength=k)[:k]
    n = int(counts.sum())
    w = np.asarray(mix.weights, dtype=np.float64)
    expected = n * w
    var = n * w * (1 - w)
    z = np.where(var > 0, (counts - expected) / np.sqrt(np.where(var > 0, var, 1.0)), 0.0)
    pos = expected > 0
    chi2 = float((((counts[pos] - expected[pos]) ** 2) / expected[pos]).sum())
    dof = int(np.count_nonzero(pos)) - 1
    return {
        "requests": counts.tolist(),
        "expected": [round(float(e), 2) for e in expected],
        "z": [round(float(x), 3) for x in z],
        "max_abs_z": round(float(np.abs(z).max()), 3) if k else 0.0,
        "chi_square": round(chi2, 3),
        "dof": dof,
        "p_value": round(chi2_sf(chi2, dof), 4) if dof > 0 else None,
        "outside_weights": int(counts[~pos].sum()),  # rows drawn for a model of weight 0: must be 0
    }


def chi2_sf(x: float, dof: int) -> float:
    """P(chi-square with ``dof`` degrees of freedom >= x), by the Wilson-Hilferty normal approximation."""
    if dof <= 0:
        return math.nan
    if x <= 0:
        return 1.0
    c = 2.0 / (9.0 * dof)
    z = ((x / dof) ** (1.0 / 3.0) - (1.0 - c)) / math.sqrt(c)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def first_rise(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The model whose latency rose first (``RISE_RULE``) over the judged stages ``rows``; None if none rose."""
    ordered = sorted(rows, key=lambda r: (r["target_rps"], r["segment"], r["stage"]))
    base: dict[str, tuple[float, float, dict[str, Any]]] = {}
    for r in ordered:  # each model's baseline: its lowest-rate stage where it had enough requests
        for d in r["models"]:
            p50, p99 = d["latency_ms"].get("p50"), d["latency_ms"].get("p99")
            if d["model"] not in base and d["requests"] >= MIN_REQUESTS and p50 is not None and p99 is not None:
                base[d["model"]] = (float(p50), float(p99), r)
    for r in ordered:
        crossed = []
        for d in r["models"]:
            b = base.get(d["model"])
            p50, p99 = d["latency_ms"].get("p50"), d["latency_ms"].get("p99")
            if b is None or b[2] is r or p50 is None or p99 is None or d["requests"] < MIN_REQUESTS:
                continue
            if _rose(p50, b[0]) and _rose(p99, b[1]):
                crossed.append((p99 / b[1] if b[1] > 0 else math.inf, d, (b[1], b[2])))
        if crossed:
            ratio, d, (base_p99, base_stage) = max(crossed, key=lambda c: c[0])
            return {
                "model": d["model"],
                "segment": r["segment"],
                "stage": r["stage"],
                "target_rps": r["target_rps"],
                "verdict": r["verdict"],
                "p99_ms": d["latency_ms"]["p99"],
                "baseline_p99_ms": round(base_p99, 4),
                "baseline_target_rps": base_stage["target_rps"],
                "ratio": round(ratio, 3) if math.isfinite(ratio) else None,
                "models_crossed": sorted(c[1]["model"] for c in crossed),
            }
    return None


def _rose(now_ms: float, base_ms: float) -> bool:
    return now_ms >= RISE_FACTOR * base_ms and now_ms - base_ms >= RISE_MIN_MS


def server_by_model(
    seg: Segment, m: StageMetrics, obs: Observations | None, mix: ResolvedMix
) -> dict[str, dict[str, Any] | None]:
    """Per model, what the server's metrics say about the stage (the first endpoint that counts the model's
    requests: MLServer and Triton label them ``model``); an empty dict when nothing was scraped."""
    if obs is None or not obs.scrapes:
        return {}
    from satpoint.analysis.server.server_side import stage_metrics_blocks

    out: dict[str, dict[str, Any] | None] = {}
    for name in mix.names:
        blocks = [b for b in stage_metrics_blocks(seg, m, obs, name) if b.get("requests") is not None]
        b = blocks[0] if blocks else None
        out[name] = None if b is None else {k: b.get(k) for k in SERVER_FIELDS}
    return out
