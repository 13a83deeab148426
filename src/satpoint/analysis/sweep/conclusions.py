"""A sweep's figures: pure functions of its measurements (each one a ``find`` summary).

- ``measurement_figures`` (``analysis.sweep.measurement``): what one measurement (one ``find`` on a
  freshly started server) contributes.
- ``aggregate``: per point, every figure as median with its range over the measurements, the
  saturation per server core, and how far n workers get relative to one worker × cores.
- ``best``: the best point per objective; the winner is named only when its measured range is
  separated from the runner-up's (ranges that overlap are a tie, said in plain words).
- ``pareto_front``: the points no other point beats on both saturation and p99 at 85 % of saturation.
- ``remeasure_plan``: which points to measure again so the leaders each have at least two measurements.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from satpoint.analysis.search import brackets
from satpoint.analysis.sweep.measurement import LOWER_BOUND_TEXT as LOWER_BOUND_TEXT
from satpoint.analysis.sweep.measurement import OPERATING_FRACTION as OPERATING_FRACTION
from satpoint.analysis.sweep.measurement import STREAM_FIELDS, rounded
from satpoint.analysis.sweep.measurement import lower_bound_reasons as lower_bound_reasons
from satpoint.analysis.sweep.measurement import measurement_figures as measurement_figures

Objective = Literal["saturation", "per_core", "p99", "slo"]
OBJECTIVES: tuple[Objective, ...] = ("saturation", "per_core", "p99", "slo")
OBJECTIVE_TEXT: dict[Objective, str] = {
    "saturation": "highest saturation point",
    "per_core": "highest saturation per server core",
    "p99": "lowest p99 latency at the chosen rate (--at-rps)",
    "slo": "highest saturation point meeting the latency objective (--slo)",
}


def spread(values: Sequence[float | None]) -> dict[str, Any] | None:
    """Median, min, max and count of the values that exist; None when none does."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return {"median": rounded(statistics.median(xs)), "min": rounded(min(xs)), "max": rounded(max(xs)), "n": len(xs)}


@dataclass(frozen=True)
class PointInput:
    """What ``aggregate`` needs of one point: its knobs, server cores, rows per request, measurements."""

    id: str
    label: str
    knobs: Mapping[str, Any]
    server_cores: int | None
    batch: int
    measurements: Sequence[Mapping[str, Any]]  # measurement_figures of the finished measurements


def _scaled(s: Mapping[str, Any], factor: float) -> dict[str, Any]:
    return {
        "median": rounded(s["median"] * factor),
        "min": rounded(s["min"] * factor),
        "max": rounded(s["max"] * factor),
        "n": s["n"],
    }


def _nested(ms: Sequence[Mapping[str, Any]], key: str, field: str) -> dict[str, Any] | None:
    return spread([(m.get(key) or {}).get(field) for m in ms])


def _stream_nested(ms: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
    """``--stream``: time to first chunk and gaps (``STREAM_FIELDS``) where the latency is taken, median and
    range over the measurements; no keys when no measurement streamed there."""
    if not any(f in (m.get(key) or {}) for m in ms for f in STREAM_FIELDS):
        return {}
    return {f: _nested(ms, key, f) for f in STREAM_FIELDS}


def aggregate(p: PointInput) -> dict[str, Any]:
    """One point's row of ``sweep.json``: figures as median/min/max over its measurements."""
    # a search that lost its target is no measurement of the server (the sweep marks it failed)
    ms = [m for m in p.measurements if not m.get("interrupted") and not m.get("target_lost")]
    sat = spread([m.get("saturation_rps") for m in ms])
    # the range a point's capacity lies in: from its lowest saturation point up to the highest rate a
    # search found unstable; open upwards (None) when a search never found one above its answer
    got = brackets.capacity_bracket(
        (float(m["saturation_rps"]), m.get("unstable_rps")) for m in ms if m.get("saturation_rps") is not None
    )
    bracket = None if got is None else list(got)
    per_core = None
    if sat and p.server_cores:
        per_core = _scaled(sat, 1.0 / p.server_cores)
    inferences = _scaled(sat, float(p.batch)) if sat else None
    return {
        "id": p.id,
        "label": p.label,
        "knobs": dict(p.knobs),
        "measurements": len(ms),
        # each measurement's own answer, in the order measured: the repeats behind the median
        "repeats": [{"saturation_rps": m.get("saturation_rps"), "unstable_rps": m.get("unstable_rps")} for m in ms],
        "saturation_rps": sat,
        "bracket_rps": bracket,
        "max_throughput_rps": spread([m.get("max_throughput_rps") for m in ms]),
        "batch": p.batch,
        "inferences_per_s": inferences,
        "server_cores": p.server_cores,
        "rps_per_core": per_core,
        "low_load": {
            "rps": _nested(ms, "low_load", "rps"),
            "p50_ms": _nested(ms, "low_load", "p50_ms"),
            "p99_ms": _nested(ms, "low_load", "p99_ms"),
            **_stream_nested(ms, "low_load"),
        },
        "at_operating_point": {
            "rps": _nested(ms, "at_operating_point", "rps"),
            "p50_ms": _nested(ms, "at_operating_point", "p50_ms"),
            "p99_ms": _nested(ms, "at_operating_point", "p99_ms"),
            **_stream_nested(ms, "at_operating_point"),
        },
        "at_rps": (
            {
                "p50_ms": _nested(ms, "at_rps", "p50_ms"),
                "p99_ms": _nested(ms, "at_rps", "p99_ms"),
                "stable": all((m.get("at_rps") or {}).get("verdict") == "stable" for m in ms) if ms else None,
                **_stream_nested(ms, "at_rps"),
            }
            if any(m.get("at_rps") is not None for m in ms)
            else None
        ),
        "server": {
            "cpu_cores_at_saturation": _nested(ms, "server_at_saturation", "cpu_cores"),
            "cpu_us_per_request": spread([_cpu_us(m) for m in ms]),
            "rss_mb_max": spread([m.get("rss_mb_max") for m in ms]),
            "memory_peak_mb": spread([m.get("memory_peak_mb") for m in ms]),
            "rss_mb_at_ready": spread([m.get("rss_mb_at_ready") for m in ms]),
            "pss_mb_at_ready": spread([m.get("pss_mb_at_ready") for m in ms]),
            "main_rss_mb_at_ready": spread([m.get("main_rss_mb_at_ready") for m in ms]),
            "startup_s": spread([m.get("startup_s") for m in ms]),
            "models": next((m.get("models") for m in ms if m.get("models") is not None), None),
            "throttled_share_at_saturation": _nested(ms, "server_at_saturation", "throttled_share"),
            "throttled_share_at_operating_point": _nested(ms, "server_at_operating_point", "throttled_share"),
            "diagnosis": sorted({k for m in ms for k in m.get("diagnosis") or [] if k}),
        },
        # Triton's statistics: the batch size its scheduler achieved at and above the saturation point
        "triton": (
            {
                "batch_at_saturation": _nested(ms, "triton_at_saturation", "batch_size"),
                "queue_ms_at_saturation": _nested(ms, "triton_at_saturation", "queue_ms"),
                "batch_above_saturation": _nested(ms, "triton_above_saturation", "batch_size"),
            }
            if any(m.get("triton_at_saturation") or m.get("triton_above_saturation") for m in ms)
            else None
        ),
        "lower_bound": any(bool(m.get("lower_bound")) for m in ms),
        "lower_bound_reasons": sorted({r for m in ms for r in _reasons(m)}),
        "feasible": sat is not None,
        "scaling": None,
    }


def _reasons(m: Mapping[str, Any]) -> list[str]:
    """A measurement's lower-bound reasons (figures written before they were recorded: the flag's)."""
    got = m.get("lower_bound_reasons")
    if got is None and m.get("lower_bound"):
        return ["generator_limited"]
    return list(got or [])


def _cpu_us(m: Mapping[str, Any]) -> float | None:
    """Server CPU per request at the operating point (85 %), else at the saturation point."""
    for key in ("server_at_operating_point", "server_at_saturation"):
        v = (m.get(key) or {}).get("cpu_us_per_request")
        if v is not None:
            return float(v)
    return None


def _workers(knobs: Mapping[str, Any]) -> int | None:
    w = knobs.get("workers")
    return int(w) if isinstance(w, int | float) else None


def add_scaling(rows: list[dict[str, Any]], workers_use_cores: bool = True) -> None:
    """For points with a ``workers`` knob: saturation relative to the one-worker point with the same
    other knobs, the ideal and the efficiency (their ratio).  The ideal is min(processes doing
    inference, cores) when workers are processes that each need a core (MLServer), else the count
    (the synthetic server's slots cost no CPU)."""
    for row in rows:
        n = _workers(row["knobs"])
        if n is None or row["saturation_rps"] is None:
            continue
        others = {k: v for k, v in row["knobs"].items() if k != "workers"}
        one = next(
            (
                r
                for r in rows
                if _workers(r["knobs"]) == 1
                and {k: v for k, v in r["knobs"].items() if k != "workers"} == others
                and r["saturation_rps"] is not None
            ),
            None,
        )
        if one is None:
            continue
        ratio = row["saturation_rps"]["median"] / one["saturation_rps"]["median"]
        cores = row["server_cores"]
        ideal: float | None = float(min(n, cores)) if cores and workers_use_cores else float(n)
        if n == 0:  # inference in the main process: no worker processes, no IPC; nothing to scale
            ideal = None
        row["scaling"] = {
            "vs_one_worker": round(ratio, 3),
            "ideal": ideal,
            "efficiency": round(ratio / ideal, 3) if ideal else None,
            "one_worker_x_cores_rps": rounded(one["saturation_rps"]["median"] * cores) if cores else None,
            "rule": "min(workers, cores)" if workers_use_cores else "workers",
        }


def _score(row: Mapping[str, Any], objective: Objective) -> tuple[float, float, float] | None:
    """(median, worst, best) in 'higher is better' form, or None when the point has no figure."""
    if objective in ("saturation", "slo"):
        s = row["saturation_rps"]
        if s is None:
            return None
        lo, hi = _bracket(row)
        return s["median"], lo, hi
    if objective == "per_core":
        s = row["rps_per_core"]
        if s is None or not row["server_cores"]:
            return None
        cores = float(row["server_cores"])
        lo, hi = _bracket(row)
        return s["median"], lo / cores, hi / cores
    at = row.get("at_rps")
    if not at or not at.get("stable") or not at.get("p99_ms"):
        return None
    p = at["p99_ms"]
    return -p["median"], -p["max"], -p["min"]


def _bracket(row: Mapping[str, Any]) -> tuple[float, float]:
    """(low, high) of a point's saturation range; high is infinite when the range is open (a lower bound)."""
    s = row["saturation_rps"]
    b = row.get("bracket_rps")
    if not b:
        return float(s["min"]), float(s["max"])
    return float(b[0]), math.inf if b[1] is None else float(b[1])


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x


def best(rows: Sequence[Mapping[str, Any]], objective: Objective) -> dict[str, Any] | None:
    """The best point for ``objective``, the points it is tied with, and whether it is separated."""
    scored = [(r, sc) for r in rows if (sc := _score(r, objective)) is not None]
    if not scored:
        return None
    scored.sort(key=lambda x: x[1][0], reverse=True)
    top, (med, lo, hi) = scored[0]
    # tied: another point whose measured range reaches into the winner's (an open range reaches everything)
    tied = [r for r, (_, lo2, hi2) in scored[1:] if brackets.ranges_tie(lo2, hi2, lo, hi)]
    runner = scored[1] if len(scored) > 1 else None
    separated = runner is not None and not tied
    enough = top["measurements"] >= 2 and (runner is None or runner[0]["measurements"] >= 2)
    return {
        "objective": objective,
        "point": top["id"],
        "label": top["label"],
        "value": abs(med),
        # [low, high]; high is null when the winner's range is open upwards (a lower bound)
        "range": [_finite(x) for x in sorted([abs(lo), abs(hi)])],
        "tied_with": [r["id"] for r in tied],
        "runner_up": runner[0]["id"] if runner else None,
        "separated": separated,
        "repeated": enough,
        "text": _best_text(top, objective, med, lo, hi, tied, runner, enough),
    }


def _fmt(objective: Objective, v: float) -> str:
    v = abs(v)
    if objective == "p99":
        return f"{v:.1f} ms"
    if objective == "per_core":
        return f"{v:.1f} rps/core"
    return f"{v:.1f} rps"


def _range_text(objective: Objective, lo: float, hi: float) -> str:
    a, b = sorted([abs(lo), abs(hi)])
    if a == b:
        return f"{_fmt(objective, a)}, one measurement"
    return f"{_fmt(objective, a)}–{_fmt(objective, b)}"


def _best_text(
    top: Mapping[str, Any],
    objective: Objective,
    med: float,
    lo: float,
    hi: float,
    tied: Sequence[Mapping[str, Any]],
    runner: tuple[Mapping[str, Any], tuple[float, float, float]] | None,
    enough: bool,
) -> str:
    spread_text = f"median of {top['measurements']}, range {_shown_range(top, objective)}"
    if top["measurements"] == 1:
        spread_text = "one measurement"
    bound = objective in ("saturation", "slo", "per_core")
    head = f"{top['label']}: {_fmt(objective, med)} ({spread_text})" + (_bound_mark(top) if bound else "")
    if runner is None:
        return f"{head}; the only point with a figure"
    if tied:
        names = ", ".join(r["label"] + (_bound_mark(r) if bound else "") for r in tied)
        why = "their measured ranges overlap, so the difference is within this server's run-to-run noise"
        if bound and any(r.get("lower_bound") and r.get("bracket_rps") and r["bracket_rps"][1] is None for r in tied):
            why = (
                "their measured ranges overlap (a lower bound's range is open upwards: its capacity was never "
                "reached, so it may be as high as any point above it)"
            )
        return f"no clear winner: {head} is tied with {names}: {why}; prefer the cheapest of them"
    r = runner[0]
    caveat = "" if enough else " (one measurement each: repeat to be sure)"
    return (
        f"{head} beats the runner-up {r['label']} ({_shown_range(r, objective)}) beyond the noise: "
        f"their ranges do not overlap{caveat}"
    )


def _bound_mark(row: Mapping[str, Any]) -> str:
    return " (a lower bound)" if row.get("lower_bound") else ""


def _shown_range(row: Mapping[str, Any], objective: Objective) -> str:
    """The measured range the tables show for the objective's figure."""
    s = {"saturation": row["saturation_rps"], "slo": row["saturation_rps"], "per_core": row["rps_per_core"]}.get(
        objective, ((row.get("at_rps") or {}).get("p99_ms"))
    )
    return _range_text(objective, s["min"], s["max"]) if s else "-"


def pareto_front(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Ids of the points not dominated on (higher saturation, lower p99 at the operating point)."""
    pts = []
    for r in rows:
        s = r["saturation_rps"]
        p = (r["at_operating_point"] or {}).get("p99_ms")
        if s is not None and p is not None:
            pts.append((r["id"], s["median"], p["median"]))
    front = []
    for pid, x, y in pts:
        dominated = any((x2 >= x and y2 <= y) and (x2 > x or y2 < y) for _, x2, y2 in pts)
        if not dominated:
            front.append(pid)
    return front


def rank(rows: Sequence[Mapping[str, Any]], objective: Objective) -> list[str]:
    """Point ids, best first for ``objective``; points without a figure last, in grid order."""
    scored = [(r["id"], sc[0]) for r in rows if (sc := _score(r, objective)) is not None]
    scored.sort(key=lambda x: x[1], reverse=True)
    ids = [i for i, _ in scored]
    return ids + [r["id"] for r in rows if r["id"] not in ids]


def remeasure_plan(
    rows: Sequence[Mapping[str, Any]], objective: Objective, top_n: int, min_measurements: int = 2
) -> list[str]:
    """Point ids to measure once more: the ``top_n`` leaders with fewer than ``min_measurements``."""
    leaders = [i for i in rank(rows, objective) if _score(_by_id(rows, i), objective) is not None][:top_n]
    return [i for i in leaders if _by_id(rows, i)["measurements"] < min_measurements]


def _by_id(rows: Sequence[Mapping[str, Any]], pid: str) -> Mapping[str, Any]:
    return next(r for r in rows if r["id"] == pid)


def recommendation_lines(doc: Mapping[str, Any]) -> list[str]:
    """Plain-language lines: the best point for the chosen objective, with its evidence and the noise rule."""
    objective: Objective = doc["objective"]
    lines = []
    b = (doc.get("best") or {}).get(objective)
    if b is None:
        lines.append(f"no point has a figure for the objective ({OBJECTIVE_TEXT[objective]})")
    else:
        lines.append(f"best for the {OBJECTIVE_TEXT[objective]}: {b['text']}")
    for other, ob in (doc.get("best") or {}).items():
        if other != objective and ob is not None:
            lines.append(f"best for the {OBJECTIVE_TEXT[other]}: {ob['label']} ({_fmt(other, ob['value'])})")
    lines.append(
        "how to read this: every figure is the median of a point's measurements with their range (each "
        "measurement a search on a freshly started server); two points are tied when their ranges overlap "
        "(a saturation point counted up to the next rate that was unstable, the search's precision), "
        "because a server's capacity varies from run to run; only a point clear of the runner-up is a winner"
    )
    for r in doc.get("points", []):
        if r.get("lower_bound") and r.get("saturation_rps"):
            why = "; ".join(LOWER_BOUND_TEXT.get(k, k) for k in r.get("lower_bound_reasons") or [])
            opened = (r.get("bracket_rps") or [None, 0])[1] is None
            lines.append(
                f"{r['label']}: {r['saturation_rps']['median']:.1f} rps is a lower bound"
                + (f" ({why})" if why else "")
                + (": its capacity was not bracketed, so it is tied with every point above it" if opened else "")
            )
    scaled = [r for r in doc.get("points", []) if r.get("scaling")]
    for r in scaled:
        s = r["scaling"]
        if r["knobs"].get("workers") == 0:
            lines.append(
                f"{r['label']}: {s['vs_one_worker']:.2f}x one worker's saturation (inference in the main "
                "process: no worker processes, no inter-process hop)"
            )
        elif r["knobs"].get("workers") != 1:
            rule = f"min(workers, {r['server_cores']} cores)" if s.get("rule") != "workers" else "the worker count"
            lines.append(
                f"{r['label']}: {s['vs_one_worker']:.2f}x one worker's saturation; the ideal is {s['ideal']:g}x "
                f"({rule}), so it reaches {s['efficiency']:.0%} of it"
            )
    return lines
