"""The report's "Inside the server" section: the diagnosis, the server's figures per stage beside the
client's, what could not be seen, and the flame graph (a link, the top functions)."""

from __future__ import annotations

from typing import Any

from satpoint.reports.html.data import FolderData
from satpoint.reports.html.tables import esc, fmt_ms, fmt_num, fmt_rps, table


def _throttled(srv: dict[str, Any]) -> str:
    """A stage's CFS throttling under a CPU limit: share of periods throttled and ms stalled per second."""
    th = srv.get("cpu_throttling") or {}
    share = th.get("throttled_share")
    if share is None:
        return "–"
    return esc(f"{share:.0%}, {th.get('throttled_ms_per_s') or 0:.0f}")


def _server_row(n: int, s: dict[str, Any], purpose: str, throttled: bool = False) -> list[str]:
    srv = s.get("server") or {}
    blocks = [b for b in s.get("server_metrics") or [] if b.get("source")]
    # Triton's statistics endpoint, when read, says queue, compute and batch size per request exactly
    met: dict[str, Any] = next((b for b in blocks if b["source"] == "triton_stats"), blocks[0] if blocks else {})
    cc = met.get("cross_check") or {}
    check = "–"
    if cc:
        diff = cc.get("difference")
        mark = "agrees" if cc.get("agrees") else "explained" if cc.get("explained") else "differs"
        check = esc(f"{mark} ({diff:+.2%})" if isinstance(diff, (int, float)) else mark)
    cores = srv.get("cpu_cores") or {}
    gpus = srv.get("gpus") or []
    gpu = ", ".join(f"#{g['device']} {g['util_percent']['mean']:.0f} %" for g in gpus) if gpus else "–"
    return [
        str(n),
        esc(purpose),
        fmt_rps(s.get("offered_rps")),
        fmt_rps(s.get("throughput_rps")),
        fmt_rps(met.get("rps")),
        fmt_num(cores.get("mean"), 2),
        fmt_num(srv.get("allowed_cores"), 2),
        *([_throttled(srv)] if throttled else []),
        fmt_num(srv.get("cpu_us_per_request"), 0),
        fmt_num((srv.get("rss_mb") or {}).get("max"), 0),
        fmt_ms(met.get("handler_mean_ms")),
        fmt_ms(met.get("mean_latency_ms")),
        fmt_ms(met.get("queue_ms")),
        fmt_ms(met.get("compute_ms")),
        fmt_num(met.get("batch_size"), 2),
        esc(gpu),
        check,
    ]


def server_table(f: FolderData) -> str:
    """Per stage: the server's CPU, memory, GPUs and its own metrics beside the client's figures."""
    segs = {s.index: s for s in f.results.segments}
    throttled = any((s.get("server") or {}).get("cpu_throttling") for s in f.summary.get("stages", []))
    rows = []
    for n, s in enumerate(f.summary.get("stages", []), start=1):
        if not s.get("server") and not s.get("server_metrics"):
            continue
        seg = segs.get(int(s.get("segment", -1)))
        rows.append(_server_row(n, s, seg.purpose if seg else "", throttled))
    if not rows:
        return '<p class="muted">nothing was seen of the server (see below)</p>'
    head = [
        "#",
        "phase",
        "offered/s",
        "client OK/s",
        "server counted/s",
        "CPU cores",
        "allowed",
        *(["throttled (periods, ms/s)"] if throttled else []),
        "CPU µs/req",
        "RSS MB",
        "handler ms",
        "inference ms",
        "queue ms",
        "compute ms",
        "batch",
        "GPU util",
        "counts",
    ]
    return table(head, rows, "stages")


def flamegraph_html(f: FolderData, link: str | None) -> str:
    """The flame graph: a link to the SVG (and the speedscope file) and the top functions, or why none."""
    fg = f.summary.get("flamegraph")
    if not fg:
        return ""
    parts = ["<h4>Flame graph (py-spy)</h4>"]
    if not fg.get("speedscope") or link is None:
        parts.append(f'<p class="muted">no flame graph: {esc(fg.get("error") or "not recorded")}</p>')
        return "".join(parts)
    where = f"stage {fg.get('stage')}, " if fg.get("stage") else ""
    scope = link.rsplit("/", 1)[0] + "/" + str(fg["speedscope"]) if "/" in link else str(fg["speedscope"])
    parts.append(
        f'<p><a class="flamegraph-link" href="{esc(link)}">flame graph (SVG)</a> · '
        f'<a href="{esc(scope)}">speedscope recording</a> (open it at speedscope.app) · {esc(where)}'
        f"{fmt_rps(fg.get('target_rps'))} rps, {fmt_num(fg.get('seconds'))} s, {esc(fg.get('samples') or 0)} samples"
        f" · <code>{esc(fg.get('command') or '')}</code></p>"
    )
    if fg.get("error"):
        parts.append(f'<p class="muted">{esc(fg["error"])}</p>')
    top = fg.get("top") or []
    if top:
        rows = [
            [
                f"{t['own_fraction']:.1%}",
                f"{t['total_fraction']:.1%}" if isinstance(t.get("total_fraction"), (int, float)) else "–",
                esc(t.get("function")),
                esc(f"{t.get('file') or '?'}:{t.get('line')}"),
            ]
            for t in top
        ]
        parts.append(table(["own time", "on the stack", "function", "file:line"], rows, "stages"))
    return "".join(parts)


def server_section(f: FolderData, flamegraph_link: str | None) -> str:
    """The server side of one folder: diagnosis, per-stage table, what was not seen, the flame graph."""
    parts = []
    diag = f.summary.get("diagnosis") or []
    if diag:
        items = "".join(f"<li>{esc(d.get('text'))}</li>" for d in diag)
        parts.append(f'<h4>Diagnosis</h4><ul class="diagnosis">{items}</ul>')
    parts.append(f'<div class="scroll">{server_table(f)}</div>')
    observed = f.summary.get("observed") or {}
    unseen = [*(observed.get("not_seen") or []), *(observed.get("problems") or [])]
    if unseen:
        items = "".join(f"<li>{esc(n)}</li>" for n in unseen)
        parts.append(f'<h4>Not seen</h4><ul class="muted">{items}</ul>')
    parts.append(flamegraph_html(f, flamegraph_link))
    return "".join(parts)
