"""The terminal's lines for a replayed trace (``run --trace``): what was replayed, its fidelity, and the
measured latency beside a simple queue's prediction."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _ms(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, (int, float)) else "-"


def print_trace(console: Console, summary: dict[str, Any]) -> None:
    """The trace block of ``summary.json``: slice, speed, and per stage the send lag against the trace's
    own times and the share of requests sent more than 1 ms late."""
    tr = summary.get("trace")
    if not tr:
        return
    peak = tr.get("peak_window")
    head = (
        f"trace {tr['path']} · speed {tr['speed']:g} · slice {tr['window_start']} .. {tr['window_end']}"
        + (f" (busiest {tr['peak']})" if peak else "")
        + f" · {tr['replayed']:,} requests over {tr['run_s']:.1f} s"
    )
    console.print(head)
    table = Table(title="replay fidelity (send lag against the trace's own times)", title_justify="left")
    for col in ("stage", "from s", "to s", "requests", "trace rps", "lag p50 ms", "lag p99 ms", "lag max ms", "> 1 ms"):
        table.add_column(col, justify="right")
    for row in tr.get("fidelity", []):
        lag = row["lag_ms"]
        table.add_row(
            str(row["stage"] + 1),
            f"{row['start_s']:.1f}",
            f"{row['end_s']:.1f}",
            str(row["requests"]),
            f"{row['trace_rps']:.1f}",
            _ms(lag["p50"]),
            _ms(lag["p99"]),
            _ms(lag["max"]),
            f"{row['late_fraction']:.2%}",
        )
    console.print(table)
    total = tr.get("fidelity_overall") or {}
    if total:
        console.print(
            f"replay: {total['late_fraction']:.2%} of {total['requests']:,} requests sent > 1 ms after their trace "
            f"time; worst stage p99 lag {_ms(total.get('worst_stage_lag_p99_ms'))} ms"
        )
    print_prediction(console, tr.get("prediction"))


def print_prediction(console: Console, pred: dict[str, Any] | None) -> None:
    """Measured p50/p99 beside a simple queue's prediction per stage (``trace.prediction``), and verdicts."""
    if not pred:
        return
    svc = pred["service_ms"]
    how = {"given": "given", "busy_throughput": "estimated: busy throughput x service time"}.get(
        pred["slots_source"], "estimated: the most requests seen in service at once"
    )
    console.print(
        f"a simple queue: the replay's own intended times through {pred['slots']} FIFO slots ({how}); service "
        f"{_ms(svc['p50'])} ms p50 / {_ms(svc['mean'])} ms mean from {pred['service_samples']:,} requests "
        f"({pred['service_source']}), of which {_ms(pred['overhead_ms'])} ms outside the slots"
    )
    table = Table(title="measured against a simple queue's prediction (latency ms)", title_justify="left")
    for col in ("stage", "p50 measured", "p50 predicted", "p99 measured", "p99 predicted", "verdict"):
        table.add_column(col, justify="left" if col == "verdict" else "right")
    for row in pred["stages"]:
        m, p = row["measured_ms"], row["predicted_ms"]
        table.add_row(str(row["stage"] + 1), _ms(m["p50"]), _ms(p["p50"]), _ms(m["p99"]), _ms(p["p99"]), row["text"])
    console.print(table)
