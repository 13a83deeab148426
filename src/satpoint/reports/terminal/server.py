"""The terminal view of what the server did: its CPU, memory and own metrics per stage, the diagnosis."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _f(v: Any, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def server_table(stages: list[dict[str, Any]]) -> Table | None:
    """One row per stage with server figures (None when no stage has any)."""
    rows = [(n, s) for n, s in enumerate(stages, 1) if s.get("server") or s.get("server_metrics")]
    if not rows:
        return None
    t = Table(title="server side (steady window of each stage)", title_justify="left")
    heads: tuple[str, ...] = (
        "#",
        "offered",
        "cores",
        "p95",
        "allowed",
        "others",
        "µs/req",
        "RSS MB",
        "srv count",
        "srv inf ms",
        "check",
    )
    throttled = any((s.get("server") or {}).get("cpu_throttling") for _, s in rows)  # a CPU limit: a column
    if throttled:
        heads = (*heads[:5], "throttled", *heads[5:])
    for c in heads:
        t.add_column(c, justify="right")
    for n, s in rows:
        srv = s.get("server") or {}
        cores = srv.get("cpu_cores") or {}
        per = srv.get("cpu_us_per_inference") or srv.get("cpu_us_per_request")
        met = (s.get("server_metrics") or [{}])[0]
        cc = met.get("cross_check") or {}
        check = "-" if not cc else ("ok " if cc["agrees"] else "OFF ") + _f(cc.get("difference"), "+.2%")
        th = srv.get("cpu_throttling") or {}
        share = th.get("throttled_share")
        quota = [f"{share:.0%} {th.get('throttled_ms_per_s') or 0:.0f} ms/s" if share is not None else "-"]
        t.add_row(
            str(n),
            _f(s["offered_rps"], ".1f"),
            _f(cores.get("mean")),
            _f(cores.get("p95")),
            _f(srv.get("allowed_cores"), "g"),
            *(quota if throttled else []),
            _f(srv.get("other_cores")),
            _f(per, ".0f"),
            _f((srv.get("rss_mb") or {}).get("max"), ".0f"),
            _f(met.get("requests"), "d"),
            _f(met.get("mean_latency_ms"), ".3f"),
            check,
        )
    return t


def triton_stats_of(stage: dict[str, Any]) -> dict[str, Any] | None:
    """The stage's figures from Triton's statistics endpoint, if it was read."""
    return next((m for m in stage.get("server_metrics") or [] if m.get("source") == "triton_stats"), None)


def triton_table(stages: list[dict[str, Any]]) -> Table | None:
    """Triton's own statistics per stage: mean ms per request queued and in each compute phase, and the
    batch size its scheduler achieved (None when no stage has them)."""
    rows = [(n, s, m) for n, s in enumerate(stages, 1) if (m := triton_stats_of(s)) is not None]
    if not rows:
        return None
    t = Table(title="Triton statistics (per request, ms; batch = inferences / executions)", title_justify="left")
    for c in ("#", "offered", "requests", "executions", "batch", "queue", "input", "infer", "output", "window"):
        t.add_column(c, justify="right")
    for n, s, m in rows:
        t.add_row(
            str(n),
            _f(s["offered_rps"], ".1f"),
            _f(m.get("requests"), "d"),
            _f(m.get("executions"), "d"),
            _f(m.get("batch_size")),
            _f(m.get("queue_ms"), ".3f"),
            _f(m.get("compute_input_ms"), ".3f"),
            _f(m.get("compute_infer_ms"), ".3f"),
            _f(m.get("compute_output_ms"), ".3f"),
            str(m.get("window") or "-"),
        )
    return t


def print_server(console: Console, summary: dict[str, Any]) -> None:
    """The server tables and what could not be seen."""
    stages = summary.get("stages") or []
    for table in (server_table(stages), triton_table(stages)):
        if table is not None:
            console.print(table)
    observed = summary.get("observed") or {}
    for n in observed.get("not_seen") or []:
        console.print(f"[yellow]not seen:[/] {escape(n)}")
    for p in observed.get("problems") or []:
        console.print(f"[yellow]observer:[/] {escape(p)}")


def print_diagnosis(console: Console, summary: dict[str, Any]) -> None:
    for d in summary.get("diagnosis") or []:
        console.print(f"[bold cyan]diagnosis:[/] {escape(d['text'])}")


def print_flamegraph(console: Console, summary: dict[str, Any], out_dir: str) -> None:
    """Where the flame graph is and the functions with the most own time (or why there is none)."""
    fg = summary.get("flamegraph")
    if not fg:
        return
    if not fg.get("speedscope"):
        console.print(f"[yellow]flame graph: none[/] ({escape(str(fg.get('error') or 'not recorded'))})")
        return
    where = f"stage {fg['stage']}, " if fg.get("stage") else ""
    console.print(
        f"[bold]flame graph:[/] {escape(out_dir)}/{fg.get('svg')} ({where}{fg.get('target_rps') or 0:.1f} rps, "
        f"{fg.get('seconds') or 0:.1f} s, {fg.get('samples') or 0} samples; speedscope: {fg['speedscope']})"
    )
    if fg.get("error"):
        console.print(f"[yellow]flame graph:[/] {escape(str(fg['error']))}")
    top = fg.get("top") or []
    if top:
        t = Table(title="top functions by own time (py-spy samples in which the function itself ran)")
        for col in ("own", "on stack", "function", "where"):
            t.add_column(col, justify="right" if col in ("own", "on stack") else "left")
        for f in top:
            where_f = f"{f.get('file') or '?'}:{f.get('line')}" if f.get("line") is not None else f.get("file") or "?"
            total = f.get("total_fraction")
            t.add_row(
                f"{f['own_fraction']:.1%}",
                f"{total:.1%}" if isinstance(total, (int, float)) else "-",
                escape(str(f["function"])),
                escape(str(where_f)),
            )
        console.print(t)
