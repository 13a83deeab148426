"""A sweep's table, recommendation and CSV: functions of ``sweep.json``."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from satpoint.analysis.sweep.measurement import STREAM_FIELDS


def _num(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def median_range(s: Mapping[str, Any] | None, spec: str = ".1f") -> str:
    if not s:
        return "-"
    if s["n"] == 1:
        return format(s["median"], spec)
    return f"{format(s['median'], spec)} ({format(s['min'], spec)}–{format(s['max'], spec)})"


def scaling_text(sc: Mapping[str, Any] | None) -> str:
    """``1.80x (90%)``: saturation relative to one worker, and (in brackets) the share of the ideal."""
    if not sc:
        return "-"
    eff = f" ({sc['efficiency']:.0%})" if sc.get("efficiency") is not None else ""
    return f"{sc['vs_one_worker']:.2f}x{eff}"


def has_quality(doc: Mapping[str, Any]) -> bool:
    """Whether the points carry their artefact's quality figures (a sweep over artefacts)."""
    return any((r.get("quality") or {}).get("accuracy") is not None for r in doc["points"])


def quality_cells(r: Mapping[str, Any]) -> list[str]:
    """A point's artefact quality for the tables: held-out accuracy % (loss in pp), agreement with the
    reference %, the largest |Δ probability|."""
    q = r.get("quality") or {}
    if q.get("accuracy") is None:
        return ["-", "-", "-"]
    return [
        f"{100 * q['accuracy']:.1f} ({q['accuracy_loss_pp']:+.1f})",
        f"{100 * q['agreement']:.1f}",
        "-" if q.get("max_abs_proba_diff") is None else f"{q['max_abs_proba_diff']:.3g}",
    ]


QUALITY_HEADS = ("accuracy % (loss pp)", "agree % vs ref.", "max |Δp|")


def has_stream(doc: Mapping[str, Any]) -> bool:
    """Whether the points carry stream figures (a sweep with ``--stream``: TTFC and gaps at 85 %)."""
    return any("ttfc_p99_ms" in (r.get("at_operating_point") or {}) for r in doc["points"])


def stream_cells(at: Mapping[str, Any]) -> list[str]:
    """TTFC p99 and gap p99 (ms, median (min–max)) where a point's latency is taken."""
    return [median_range(at.get("ttfc_p99_ms"), ".1f"), median_range(at.get("gap_p99_ms"), ".1f")]


def sorted_rows(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    by_id = {r["id"]: r for r in doc["points"]}
    return [by_id[i] for i in doc.get("order") or by_id]


def sweep_table(doc: Mapping[str, Any]) -> Table:
    """Points sorted by the chosen objective; ``*`` marks the non-dominated front.  Columns that would
    say nothing are left out (inferences/s when every request carries one row)."""
    title = escape(f"sweep: points by {doc['objective']} (median (min–max) over the measurements)")
    t = Table(title=title, title_justify="left")
    rows = sorted_rows(doc)
    batched = any(r["batch"] != 1 for r in rows)
    tri = any(r.get("triton") for r in rows)
    quality = has_quality(doc)
    srv = [r.get("server") or {} for r in rows]
    limited = any(x.get("throttled_share_at_saturation") or x.get("memory_peak_mb") for x in srv)  # cgroup limits
    streamed = has_stream(doc)
    cols = [("point", "left"), ("knobs", "left"), ("n", "right"), ("saturation rps", "right")]
    if batched:
        cols.append(("inferences/s", "right"))
    if tri:
        cols += [("Triton batch at sat.", "right"), ("queue ms at sat.", "right"), ("batch above sat.", "right")]
    cols += [
        ("rps/core", "right"),
        ("low load p50/p99 ms", "right"),
        ("p99 ms at 85 %", "right"),
        *([("TTFC p99 ms at 85 %", "right"), ("gap p99 ms at 85 %", "right")] if streamed else []),
        ("server cores at sat.", "right"),
        ("server µs/req", "right"),
        ("vs 1 worker (of ideal)", "right"),
    ]
    if limited:
        cols += [("throttled at sat./85 %", "right"), ("cgroup peak MB", "right")]
    if quality:
        cols += [(h, "right") for h in QUALITY_HEADS]
    for col, just in cols:
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    front = set(doc.get("pareto_front") or [])
    for r in rows:
        low = r["low_load"]
        low_txt = "-"
        if low["p50_ms"] and low["p99_ms"]:
            low_txt = f"{low['p50_ms']['median']:.2f}/{low['p99_ms']['median']:.2f}"
        cells = [
            r["id"] + (" *" if r["id"] in front else ""),
            escape(r["label"]),
            str(r["measurements"]),
            median_range(r["saturation_rps"], ".0f") + (" ≥" if r.get("lower_bound") else ""),
        ]
        if batched:
            cells.append(median_range(r["inferences_per_s"], ".0f"))
        if tri:
            tr = r.get("triton") or {}
            cells += [
                median_range(tr.get("batch_at_saturation"), ".2f"),
                median_range(tr.get("queue_ms_at_saturation"), ".2f"),
                median_range(tr.get("batch_above_saturation"), ".2f"),
            ]
        cells += [
            median_range(r["rps_per_core"], ".0f"),
            low_txt,
            median_range(r["at_operating_point"]["p99_ms"], ".1f"),
            *(stream_cells(r["at_operating_point"]) if streamed else []),
            median_range(r["server"]["cpu_cores_at_saturation"], ".2f"),
            median_range(r["server"]["cpu_us_per_request"], ".0f"),
            scaling_text(r.get("scaling")),
        ]
        if limited:
            x = r.get("server") or {}
            sat_th, op_th = x.get("throttled_share_at_saturation"), x.get("throttled_share_at_operating_point")
            share = "/".join(f"{v['median']:.0%}" if v else "-" for v in (sat_th, op_th))
            cells += [share, median_range(x.get("memory_peak_mb"), ".0f")]
        if quality:
            cells += quality_cells(r)
        t.add_row(*cells)
    return t


def print_sweep(console: Console, doc: Mapping[str, Any]) -> None:
    console.print(sweep_table(doc))
    console.print("* = on the front: no other point has both a higher saturation and a lower p99 at 85 %")
    if any(r.get("lower_bound") for r in doc["points"]):
        console.print(
            "≥ = a lower bound: the search never overloaded the server (the generator or its connection cap, "
            "the budget or max_rps was the limit); its range is open upwards"
        )
    if doc.get("models_memory"):
        from satpoint.reports.sweep_models import models_table

        console.print(models_table(doc))
    for line in doc.get("recommendation") or []:
        console.print(escape(line))
    failed = [m for m in doc.get("measurements", []) if m.get("status") == "failed"]
    for m in failed:
        console.print(f"[yellow]{m['point']} measurement {m['repeat']} failed: {m.get('error')}[/]")
    if doc.get("stopped"):
        console.print(f"[yellow]the sweep stopped early: {doc['stopped']}[/]")


CSV_COLUMNS = (
    "id",
    "label",
    "measurements",
    "saturation_rps_median",
    "saturation_rps_min",
    "saturation_rps_max",
    "max_throughput_rps_median",
    "inferences_per_s_median",
    "server_cores",
    "rps_per_core_median",
    "low_load_rps",
    "low_load_p50_ms",
    "low_load_p99_ms",
    "operating_point_rps",
    "operating_point_p50_ms",
    "operating_point_p99_ms",
    "at_rps_p99_ms",
    "server_cpu_cores_at_saturation",
    "server_cpu_us_per_request",
    "server_rss_mb_max",
    "server_memory_peak_mb",
    "server_throttled_share_at_saturation",
    "server_throttled_share_at_operating_point",
    "triton_batch_at_saturation",
    "triton_queue_ms_at_saturation",
    "triton_batch_above_saturation",
    "diagnosis",
    "vs_one_worker",
    "scaling_efficiency",
    "lower_bound",
    "lower_bound_reasons",
    "on_front",
    "quality_accuracy",
    "quality_accuracy_loss_pp",
    "quality_agreement",
    "quality_max_abs_proba_diff",
    "quality_within_bound",
    "models",
    "server_rss_mb_at_ready",
    "server_pss_mb_at_ready",
    "server_startup_s",
    "operating_point_ttfc_p50_ms",
    "operating_point_ttfc_p99_ms",
    "operating_point_gap_p50_ms",
    "operating_point_gap_p99_ms",
    "low_load_ttfc_p99_ms",
    "low_load_gap_p99_ms",
    "at_rps_ttfc_p99_ms",
    "at_rps_gap_p99_ms",
)


def _m(s: Mapping[str, Any] | None, key: str = "median") -> Any:
    return None if not s else s.get(key)


def csv_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per point (knob columns first, then CSV_COLUMNS), in the objective's order."""
    knobs: list[str] = []
    for r in doc["points"]:
        for k in r["knobs"]:
            if k not in knobs:
                knobs.append(k)
    front = set(doc.get("pareto_front") or [])
    choice = doc.get("artefact_choice") or {}
    within = set(choice.get("within_bound") or [])
    out = []
    for r in sorted_rows(doc):
        q = r.get("quality") or {}
        sc = r.get("scaling") or {}
        at = r.get("at_rps") or {}
        op, low = r["at_operating_point"], r["low_load"]
        row: dict[str, Any] = {f"knob.{k}": r["knobs"].get(k) for k in knobs}
        row.update(
            {
                "id": r["id"],
                "label": r["label"],
                "measurements": r["measurements"],
                "saturation_rps_median": _m(r["saturation_rps"]),
                "saturation_rps_min": _m(r["saturation_rps"], "min"),
                "saturation_rps_max": _m(r["saturation_rps"], "max"),
                "max_throughput_rps_median": _m(r["max_throughput_rps"]),
                "inferences_per_s_median": _m(r["inferences_per_s"]),
                "server_cores": r["server_cores"],
                "rps_per_core_median": _m(r["rps_per_core"]),
                "low_load_rps": _m(r["low_load"]["rps"]),
                "low_load_p50_ms": _m(r["low_load"]["p50_ms"]),
                "low_load_p99_ms": _m(r["low_load"]["p99_ms"]),
                "operating_point_rps": _m(r["at_operating_point"]["rps"]),
                "operating_point_p50_ms": _m(r["at_operating_point"]["p50_ms"]),
                "operating_point_p99_ms": _m(r["at_operating_point"]["p99_ms"]),
                "at_rps_p99_ms": _m(at.get("p99_ms")),
                "server_cpu_cores_at_saturation": _m(r["server"]["cpu_cores_at_saturation"]),
                "server_cpu_us_per_request": _m(r["server"]["cpu_us_per_request"]),
                "server_rss_mb_max": _m(r["server"]["rss_mb_max"], "max"),
                "server_memory_peak_mb": _m(r["server"].get("memory_peak_mb"), "max"),
                "server_throttled_share_at_saturation": _m(r["server"].get("throttled_share_at_saturation")),
                "server_throttled_share_at_operating_point": _m(r["server"].get("throttled_share_at_operating_point")),
                "triton_batch_at_saturation": _m((r.get("triton") or {}).get("batch_at_saturation")),
                "triton_queue_ms_at_saturation": _m((r.get("triton") or {}).get("queue_ms_at_saturation")),
                "triton_batch_above_saturation": _m((r.get("triton") or {}).get("batch_above_saturation")),
                "diagnosis": " ".join(r["server"]["diagnosis"]),
                "vs_one_worker": sc.get("vs_one_worker"),
                "scaling_efficiency": sc.get("efficiency"),
                "lower_bound": r.get("lower_bound"),
                "lower_bound_reasons": " ".join(r.get("lower_bound_reasons") or []),
                "on_front": r["id"] in front,
                "quality_accuracy": q.get("accuracy"),
                "quality_accuracy_loss_pp": q.get("accuracy_loss_pp"),
                "quality_agreement": q.get("agreement"),
                "quality_max_abs_proba_diff": q.get("max_abs_proba_diff"),
                "quality_within_bound": (r["id"] in within) if choice else None,
                "models": r["server"].get("models"),
                "server_rss_mb_at_ready": _m(r["server"].get("rss_mb_at_ready")),
                "server_pss_mb_at_ready": _m(r["server"].get("pss_mb_at_ready")),
                "server_startup_s": _m(r["server"].get("startup_s")),
                # --stream: time to first chunk and gaps (empty without)
                **{f"operating_point_{k}": _m(op.get(k)) for k in STREAM_FIELDS},
                **{
                    f"{pre}_{k}": _m(x.get(k))
                    for pre, x in (("low_load", low), ("at_rps", at))
                    for k in ("ttfc_p99_ms", "gap_p99_ms")
                },
            }
        )
        out.append(row)
    return out


def write_sweep_csv(doc: Mapping[str, Any], path: Path) -> Path:
    rows = csv_rows(doc)
    names = list(rows[0]) if rows else list(CSV_COLUMNS)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=names)
        w.writeheader()
        w.writerows(rows)
    return path
