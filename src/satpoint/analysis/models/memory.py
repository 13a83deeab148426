"""Many models on one server, from a sweep over the model count (``sweep --set models=1,10,50,200``):
memory per model and the largest count that meets the SLO within a memory budget. Pure functions of the
sweep's rows (``analysis.sweep.conclusions.aggregate``).

- ``memory_fit``: the least-squares line of the server's memory against the model count: MB per model
  (the slope, with its standard error when three counts or more were measured) and the intercept (what
  the server holds with no model at all, extrapolated).
- ``models_analysis``: per group of points that differ only in the count (e.g. one group per ``workers``
  value): the figures per count, the fits of the memory once ready and of the largest memory under load,
  and the recommendation: the largest measured count whose search met the SLO and whose memory under
  load stayed within ``--server-memory-mb``, beside the count memory alone would allow (``load_line``: the
  slope once ready, which an idle server gives steadily, through the memory under load).

Memory is the RSS summed over the server's process tree (main process and parallel workers): a page
shared by two processes counts twice, so it overstates what a memory limit charges (PSS, where read, is
given beside it); a budget judged on it errs on the safe side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

COUNT_KNOB = "models"


def memory_fit(points: Sequence[tuple[float | None, float | None]]) -> dict[str, Any] | None:
    """``(count, mb)`` pairs → ``{"mb_per_model", "intercept_mb", "stderr_mb_per_model", "r2", "n",
    "counts"}``; None with fewer than two distinct counts."""
    pts = [(float(c), float(m)) for c, m in points if c is not None and m is not None]
    counts = sorted({c for c, _ in pts})
    if len(counts) < 2:
        return None
    n = len(pts)
    mx = sum(c for c, _ in pts) / n
    my = sum(m for _, m in pts) / n
    sxx = sum((c - mx) ** 2 for c, _ in pts)
    sxy = sum((c - mx) * (m - my) for c, m in pts)
    slope = sxy / sxx
    intercept = my - slope * mx
    sse = sum((m - intercept - slope * c) ** 2 for c, m in pts)
    syy = sum((m - my) ** 2 for _, m in pts)
    stderr = math.sqrt(sse / (n - 2) / sxx) if n > 2 else None
    return {
        "mb_per_model": round(slope, 4),
        "intercept_mb": round(intercept, 2),
        "stderr_mb_per_model": None if stderr is None else round(stderr, 4),
        "r2": None if syy == 0 else round(1.0 - sse / syy, 4),
        "n": n,
        "counts": [int(c) if c.is_integer() else c for c in counts],
    }


def models_within(fit: Mapping[str, Any] | None, budget_mb: float | None) -> int | None:
    """How many models the fitted line puts within ``budget_mb`` (None: no budget, no fit, or a slope
    that is not positive: memory does not grow measurably with the count)."""
    if fit is None or budget_mb is None or not fit["mb_per_model"] > 0:
        return None
    return max(0, math.floor((budget_mb - float(fit["intercept_mb"])) / float(fit["mb_per_model"])))


def _median(row: Mapping[str, Any], *path: str) -> float | None:
    node: Any = row
    for key in path:
        node = (node or {}).get(key)
    return None if node is None else node.get("median")


def _count(row: Mapping[str, Any]) -> int | None:
    value = row.get("knobs", {}).get(COUNT_KNOB)
    if value is None:
        value = (row.get("server") or {}).get("models")
    return None if value is None else int(value)


def _group_key(row: Mapping[str, Any]) -> str:
    rest = [f"{k}={v}" for k, v in row.get("knobs", {}).items() if k != COUNT_KNOB]
    return " ".join(rest)


def count_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One point's figures against its model count."""
    return {
        "id": row.get("id"),
        "models": _count(row),
        "saturation_rps": _median(row, "saturation_rps"),
        "lower_bound": bool(row.get("lower_bound")),
        "target_rps": _median(row, "at_operating_point", "rps"),
        "p99_ms_at_target": _median(row, "at_operating_point", "p99_ms"),
        "p50_ms_at_target": _median(row, "at_operating_point", "p50_ms"),
        "rss_mb_at_ready": _median(row, "server", "rss_mb_at_ready"),
        "pss_mb_at_ready": _median(row, "server", "pss_mb_at_ready"),
        "main_rss_mb_at_ready": _median(row, "server", "main_rss_mb_at_ready"),
        "rss_mb_max": _median(row, "server", "rss_mb_max"),
        "startup_s": _median(row, "server", "startup_s"),
        "feasible": bool(row.get("feasible")),
        "measured": bool(row.get("measurements")),
    }


def models_analysis(
    rows: Sequence[Mapping[str, Any]], *, slo: Sequence[str] = (), budget_mb: float | None = None
) -> dict[str, Any] | None:
    """Memory per model and the recommended count, per group of points that differ only in the count;
    None when no point varies the count (``models`` knob)."""
    if not any(COUNT_KNOB in (r.get("knobs") or {}) for r in rows):
        return None
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if _count(r) is not None:
            groups.setdefault(_group_key(r), []).append(count_row(r))
    out = []
    for key, table in groups.items():
        table.sort(key=lambda x: x["models"])
        at_ready = memory_fit([(x["models"], x["rss_mb_at_ready"]) for x in table])
        under_load = memory_fit([(x["models"], x["rss_mb_max"]) for x in table])
        out.append(
            {
                "group": key,
                "counts": table,
                "fit_at_ready": at_ready,
                "fit_under_load": under_load,
                "fit_pss_at_ready": memory_fit([(x["models"], x["pss_mb_at_ready"]) for x in table]),
                # where the memory per model lives: the main process, or the other processes (the workers)
                "fit_main_at_ready": memory_fit([(x["models"], x["main_rss_mb_at_ready"]) for x in table]),
                "fit_others_at_ready": memory_fit([(x["models"], _others(x)) for x in table]),
                "budget_fit": (budget_fit := load_line(table, at_ready, under_load)),
                "recommendation": recommend(table, budget_fit, bool(slo), budget_mb),
            }
        )
    return {"budget_mb": budget_mb, "slo": list(slo), "groups": out}


def load_line(
    table: Sequence[Mapping[str, Any]], at_ready: Mapping[str, Any] | None, under_load: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The line a budget is judged on: the slope of the memory once ready (measured on an idle server, the
    steadier of the two) through the memory under load (the intercept: the mean of RSS max - slope x
    count), so the load's own buffers are counted; the fit under load alone when nothing was read once
    ready."""
    if at_ready is None:
        return None if under_load is None else {**under_load, "from": "under_load"}
    slope = float(at_ready["mb_per_model"])
    loads = [(x["models"], x["rss_mb_max"]) for x in table if x.get("rss_mb_max") is not None]
    if not loads:
        return {**at_ready, "from": "at_ready"}
    intercept = sum(m - slope * c for c, m in loads) / len(loads)
    return {"mb_per_model": round(slope, 4), "intercept_mb": round(intercept, 2), "from": "slope_at_ready_under_load"}


def _others(x: Mapping[str, Any]) -> float | None:
    total, main = x.get("rss_mb_at_ready"), x.get("main_rss_mb_at_ready")
    return None if total is None or main is None else float(total) - float(main)


def _memory(x: Mapping[str, Any]) -> float | None:
    """A count's memory as judged against the budget: the largest under load, else the memory once ready."""
    v = x.get("rss_mb_max")
    return v if v is not None else x.get("rss_mb_at_ready")


def recommend(
    table: Sequence[Mapping[str, Any]], fit: Mapping[str, Any] | None, slo: bool, budget_mb: float | None
) -> dict[str, Any]:
    """The largest measured count that met the SLO (its search found a stable rate meeting it; without
    ``--slo``: any stable rate) and whose memory stayed within ``budget_mb`` (without one: any), and the
    count the memory fit allows within the budget."""
    ok = [
        x for x in table if x["feasible"] and (budget_mb is None or ((m := _memory(x)) is not None and m <= budget_mb))
    ]
    best = max(ok, key=lambda x: x["models"], default=None)
    done = [x for x in table if x.get("measured", True)]  # a point not measured yet says nothing
    measured = [x["models"] for x in done]
    over = [x["models"] for x in done if budget_mb is not None and (_memory(x) or 0.0) > budget_mb]
    missed = [x["models"] for x in done if not x["feasible"]]
    return {
        "models": best["models"] if best else None,
        "saturation_rps": best["saturation_rps"] if best else None,
        "p99_ms_at_target": best["p99_ms_at_target"] if best else None,
        "memory_mb": _memory(best) if best else None,
        "largest_measured": max(measured) if measured else None,
        "over_budget": over,
        "missed_slo": missed,
        "memory_allows": models_within(fit, budget_mb),
        "judged_on": "slo" if slo else "stable",
    }


def _fmt_fit(fit: Mapping[str, Any] | None, counts: bool = True) -> str:
    if fit is None:
        return "not enough counts to fit"
    err = fit.get("stderr_mb_per_model")
    per = f"{fit['mb_per_model'] * 1024:.0f} KB" if abs(fit["mb_per_model"]) < 1 else f"{fit['mb_per_model']:.2f} MB"
    pm = ""
    if err is not None:
        pm = f" ± {err * 1024:.0f} KB" if abs(fit["mb_per_model"]) < 1 else f" ± {err:.2f} MB"
    text = f"{per}{pm} per model over {fit['intercept_mb']:.0f} MB"
    return text + (f" (counts {', '.join(map(str, fit['counts']))})" if counts else "")


def models_lines(doc: Mapping[str, Any] | None) -> list[str]:
    """Plain-language lines for the sweep's recommendation."""
    if not doc:
        return []
    lines = []
    budget = doc.get("budget_mb")
    for g in doc["groups"]:
        head = f"models ({g['group']})" if g["group"] else "models"
        lines.append(
            f"{head}: memory once ready {_fmt_fit(g['fit_at_ready'])}; under load {_fmt_fit(g['fit_under_load'])}"
        )
        if g["fit_main_at_ready"] is not None and g["fit_others_at_ready"] is not None:
            lines.append(
                f"{head}: of it, the main process {_fmt_fit(g['fit_main_at_ready'], False)}, the other processes "
                f"(parallel workers) {_fmt_fit(g['fit_others_at_ready'], False)}"
            )
        for key, when in (("fit_at_ready", "once ready"), ("fit_under_load", "under load")):
            fit = g[key]
            err = fit.get("stderr_mb_per_model") if fit is not None else None
            if fit is not None and err is not None and fit["mb_per_model"] < 2 * err:
                lines.append(f"{head}: {when}, the memory per model is within the noise (RSS moves by more)")
        rec = g["recommendation"]
        judged = "met the SLO" if rec["judged_on"] == "slo" else "had a stable rate (no --slo given)"
        within = f" within {budget:g} MB" if budget is not None else ""
        if rec["models"] is None:
            why = [f"over the budget: {', '.join(map(str, rec['over_budget']))}"] if rec["over_budget"] else []
            why += [f"no rate met the SLO: {', '.join(map(str, rec['missed_slo']))}"] if rec["missed_slo"] else []
            lines.append(f"{head}: no measured count {judged}{within}" + (f" ({'; '.join(why)})" if why else ""))
            continue
        text = (
            f"{head}: the largest count measured that {judged}{within}: {rec['models']} "
            f"(saturation {rec['saturation_rps']:.1f} rps"
            + (f", p99 {rec['p99_ms_at_target']:.1f} ms at the per-replica target" if rec["p99_ms_at_target"] else "")
            + (f", {rec['memory_mb']:.0f} MB RSS" if rec["memory_mb"] is not None else "")
            + ")"
        )
        if rec["memory_allows"] is not None and rec["models"] == rec["largest_measured"]:
            text += (
                f"; memory alone would allow about {rec['memory_allows']} models (the memory per model once ready, "
                f"over the memory under load, extrapolated), latency was measured up to {rec['largest_measured']}"
            )
        lines.append(text)
    return lines
