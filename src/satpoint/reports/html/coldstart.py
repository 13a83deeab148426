"""``satpoint coldstart``'s report: the terminal tables and the HTML page (pure functions of its summary).

Distributions are p50/p90/p99/max over every repetition: the unload, the load (time to the load call's
answer), the first inference after the load, warm inferences, and the requests that arrived while a model
was loading (from their intended times, errors included); then one row per overcommit run (K resident of N
models) with the share of cold requests beside the latency, and the recommendation.
"""

from __future__ import annotations

from html import escape as esc
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from rich.console import Console
from rich.table import Table

from satpoint.reports.html.embed import figure_html
from satpoint.reports.html.report import page_head, page_tail

_DISTS = (
    ("unload (answer)", "unload_ms"),
    ("until not ready", "absent_wait_ms"),
    ("load (answer)", "load_ms"),
    ("first inference", "first_infer_ms"),
    ("warm inference", "warm_infer_ms"),
)
_KEYS = ("p50", "p90", "p99", "max")


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if v >= 10 else f"{v:.2f}"


def _dist_rows(cold: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rows = [(label, cold.get(key) or {}) for label, key in _DISTS]
    during = cold.get("during_load") or {}
    rows.append(("during load: all", during.get("latency_ms") or {}))
    rows.append(("during load: ok", during.get("ok_latency_ms") or {}))
    return rows


def _outcomes(during: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in (during.get("outcomes") or {}).items()) or "none"


def recommendation_lines(summary: dict[str, Any]) -> list[str]:
    rec = summary.get("recommendation") or {}
    lines = []
    added = rec.get("cold_start_added_ms") or {}
    if added.get("p50") is not None:
        lines.append(
            f"a cold start adds {_ms(added['p50'])} ms (p50 of load + first inference - a warm inference), "
            f"{_ms(added.get('p99'))} ms at p99, to the request that wakes a model: budget it in the replica "
            "plan wherever models are evicted or scaled from zero"
        )
    if "slo_p99_ms" in rec:
        k = rec.get("resident_for_slo")
        tried = ", ".join(str(x) for x in rec.get("resident_tried") or [])
        if k is None:
            lines.append(f"no resident set tried ({tried}) kept p99 within {_ms(rec['slo_p99_ms'])} ms")
        else:
            lines.append(f"K = {k} resident models is the smallest tried ({tried}) that kept p99 within "
                         f"{_ms(rec['slo_p99_ms'])} ms for this mix")  # fmt: skip
    return lines


def print_coldstart(console: Console, summary: dict[str, Any], where: str) -> None:
    cold = summary.get("coldstart") or {}
    table = Table(title=f"cold starts: {cold.get('repetitions', 0)} repetitions over {len(cold.get('models') or [])} "
                        "models (ms)")  # fmt: skip
    table.add_column("")
    for key in (*_KEYS, "n"):
        table.add_column(key, justify="right")
    for label, d in _dist_rows(cold):
        table.add_row(label, *(_ms(d.get(k)) for k in _KEYS), str(int(d.get("n") or 0)))
    console.print(table)
    during = cold.get("during_load") or {}
    console.print(f"requests that arrived during a load: {during.get('requests', 0)} ({_outcomes(during)})")
    if cold.get("load_failures"):
        console.print(f"[red]{cold['load_failures']} loads failed[/]: {'; '.join(cold.get('load_errors') or [])}")
    runs = summary.get("overcommit") or []
    if runs:
        t = Table(title="overcommit: at most K models resident (load on demand, LRU eviction; emulated)")
        for col in ("K", "models", "cold share", "p50", "p99", "max", "cold p99", "warm p99", "errors", "rps",
                    "loads"):  # fmt: skip
            t.add_column(col, justify="right")
        for r in runs:
            lat, c, w = r["latency_ms"], r["cold_latency_ms"], r["warm_latency_ms"]
            t.add_row(
                str(r["resident"]),
                str(r["models"]),
                f"{(r.get('cold_share') or 0) * 100:.1f} %",
                _ms(lat.get("p50")),
                _ms(lat.get("p99")),
                _ms(lat.get("max")),
                _ms(c.get("p99")),
                _ms(w.get("p99")),
                str(r["errors"]),
                _ms(r.get("throughput_rps")),
                str(r["loads"]),
            )
        console.print(t)
    for line in recommendation_lines(summary):
        console.print(line)
    console.print(f"results: {where}")


def _table_html(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _repetition_plot(data: dict[str, Any]) -> go.Figure:
    fig = go.Figure()
    reps = data.get("repetitions") or []
    for label, key in (("load", "load_s"), ("first inference", "first_infer_s")):
        ys = [r[key] * 1000 for r in reps if r.get(key) is not None]
        fig.add_trace(go.Box(y=ys, name=label, boxpoints="all", jitter=0.4))
    fig.update_layout(title="cold starts: every repetition (ms)", yaxis={"title": "ms", "type": "log"}, height=420)
    return fig


def _overcommit_plot(runs: list[dict[str, Any]]) -> go.Figure:
    fig = go.Figure()
    xs = [(r.get("cold_share") or 0) * 100 for r in runs]
    for key, label in (("p50", "p50"), ("p99", "p99")):
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[r["latency_ms"].get(key) for r in runs],
                mode="lines+markers+text",
                text=[f"K={r['resident']}" for r in runs],
                textposition="top center",
                name=label,
            )
        )
    fig.update_layout(
        title="overcommit: latency against the share of cold requests",
        xaxis={"title": "cold requests (%)"},
        yaxis={"title": "latency from intended time (ms)", "type": "log"},
        height=420,
    )
    return fig


def render_html(summary: dict[str, Any], data: dict[str, Any] | None = None) -> str:
    cold = summary.get("coldstart") or {}
    parts = page_head("satpoint coldstart")
    target = summary.get("target") or {}
    parts.append(f"<p>{esc(str(target.get('url')))}: models {esc(', '.join(target.get('models') or []))}</p>")
    parts.append("<h2>Cold starts</h2>")
    parts.append(
        "<p>Each repetition unloads a model, waits until it no longer answers ready, loads it (time to the "
        "load call's answer), then sends the first inference and a few warm ones. A small open-loop stream "
        "runs at the model during the load; its requests count from their intended times, errors included.</p>"
    )
    rows = [[label, *(_ms(d.get(k)) for k in _KEYS), str(int(d.get("n") or 0))] for label, d in _dist_rows(cold)]
    parts.append(_table_html(["ms", *_KEYS, "n"], rows))
    parts.append(f"<p>requests during loads: {esc(_outcomes(cold.get('during_load') or {}))}</p>")
    per = cold.get("per_model") or []
    if per:
        parts.append(
            _table_html(
                ["model", "repetitions", "load p50", "load p99", "first p50", "first p99"],
                [
                    [
                        p["model"],
                        str(p["repetitions"]),
                        _ms(p["load_ms"].get("p50")),
                        _ms(p["load_ms"].get("p99")),
                        _ms(p["first_infer_ms"].get("p50")),
                        _ms(p["first_infer_ms"].get("p99")),
                    ]
                    for p in per
                ],
            )
        )
    if data is not None:
        parts.append(figure_html(_repetition_plot(data), "coldstart-repetitions"))
    runs = summary.get("overcommit") or []
    if runs:
        parts.append("<h2>Overcommit</h2>")
        parts.append(f"<p>{esc(str(summary.get('note', '')))}</p>")
        parts.append(
            _table_html(
                ["K", "models", "cold share", "p50", "p99", "max", "cold p99", "warm p99", "errors", "rps", "loads"],
                [
                    [
                        str(r["resident"]),
                        str(r["models"]),
                        f"{(r.get('cold_share') or 0) * 100:.1f} %",
                        _ms(r["latency_ms"].get("p50")),
                        _ms(r["latency_ms"].get("p99")),
                        _ms(r["latency_ms"].get("max")),
                        _ms(r["cold_latency_ms"].get("p99")),
                        _ms(r["warm_latency_ms"].get("p99")),
                        str(r["errors"]),
                        _ms(r.get("throughput_rps")),
                        str(r["loads"]),
                    ]
                    for r in runs
                ],
            )
        )
        parts.append(figure_html(_overcommit_plot(runs), "coldstart-overcommit"))
    lines = recommendation_lines(summary)
    if lines:
        parts.append("<h2>Recommendation</h2><ul>" + "".join(f"<li>{esc(x)}</li>" for x in lines) + "</ul>")
    parts.append(page_tail())
    return "\n".join(parts)


def write_html(summary: dict[str, Any], path: Path, data: dict[str, Any] | None = None) -> Path:
    path.write_text(render_html(summary, data), encoding="utf-8")
    return path
