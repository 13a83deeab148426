"""Terminal pieces for closed-loop runs and the coordinated-omission demo (``satpoint demo co``).

Pure functions of summary dicts (plus a live view for closed-loop runs): the side-by-side table of an
open-loop and a closed-loop run against the same pausing server, and the explanation a reader needs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from satpoint.engine.live import WINDOW_S, LiveSnapshot
from satpoint.plan import Stage
from satpoint.reports.terminal.console import LiveView

PCT_ROWS = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99.9", "p999"), ("max", "max"))


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if v >= 10 else f"{v:.2f}"


class ClosedLoopView(LiveView):
    """Live progress of a closed loop: there is no schedule, so it shows the send rate users achieve."""

    def __init__(self, console: Console, users: int, duration_s: float, title: str = "closed loop") -> None:
        super().__init__(console, [Stage(1.0, 0.0, duration_s)], title)
        self.users = users
        self.duration_s = duration_s

    def render(self, s: LiveSnapshot) -> Text:
        lat = s.latency_sample_s
        p50 = float(np.percentile(lat, 50)) * 1000 if len(lat) else None
        p99 = float(np.percentile(lat, 99)) * 1000 if len(lat) else None
        line = Text()
        line.append(f"{self.title} ", style="bold")
        line.append(f"t={s.now_s:6.1f}/{self.duration_s:g}s users {self.users} ")
        line.append(f"sending {s.due_recent / WINDOW_S:7.1f}/s answered {self.answered_rps(s):7.1f}/s ")
        line.append(f"p50 {_fmt_ms(p50)} ms p99 {_fmt_ms(p99)} ms (from actual send) ")
        line.append(f"in-flight {s.inflight} ")
        line.append(f"errors {s.errors}", style="red" if s.errors else "")
        return line


def side(summary: dict[str, Any]) -> dict[str, Any]:
    """The numbers one run contributes to the comparison (its first judged stage's steady window)."""
    stages = summary.get("stages") or []
    st = stages[0] if stages else {}
    lat = st.get("latency_ms") or {}
    return {
        "mode": summary.get("mode"),
        "latency_ms": {key: lat.get(key) for _, key in PCT_ROWS},
        "throughput_rps": st.get("throughput_rps"),
        "offered_rps": st.get("offered_rps"),
        "requests_window": st.get("requests"),
        "requests_total": (summary.get("generator") or {}).get("requests"),
        "window_s": [st.get("window_start_s"), st.get("window_end_s")],
        "verdict": st.get("verdict"),
    }


def comparison(open_summary: dict[str, Any], closed_summary: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A JSON-able record of the demo: both sides plus the ratios that carry its point."""
    o, c = side(open_summary), side(closed_summary)
    ratios: dict[str, float | None] = {}
    for label, key in PCT_ROWS:
        a, b = o["latency_ms"][key], c["latency_ms"][key]
        ratios[label] = round(a / b, 2) if a is not None and b else None
    return {"open_loop": o, "closed_loop": c, "open_over_closed": ratios, **extra}


def comparison_table(cmp: dict[str, Any], title: str = "same server, same pauses") -> Table:
    o, c, r = cmp["open_loop"], cmp["closed_loop"], cmp["open_over_closed"]
    users = cmp.get("users")
    table = Table(title=title, title_justify="left")
    table.add_column("")
    rate = cmp.get("rate_rps")
    table.add_column(f"open loop ({rate:g} rps)" if rate else "open loop", justify="right")
    table.add_column(f"closed loop ({users} users)" if users else "closed loop", justify="right")
    table.add_column("open / closed", justify="right")
    for label, key in PCT_ROWS:
        ratio = r.get(label)
        table.add_row(
            f"latency {label} ms",
            _fmt_ms(o["latency_ms"][key]),
            _fmt_ms(c["latency_ms"][key]),
            "-" if ratio is None else f"{ratio:,.1f}x",
            style="bold" if label == "p99" else None,
        )
    table.add_row("throughput rps", _fmt_ms(o["throughput_rps"]), _fmt_ms(c["throughput_rps"]), "")
    table.add_row("requests (steady window)", str(o["requests_window"]), str(c["requests_window"]), "")
    table.add_row("requests (whole run)", str(o["requests_total"]), str(c["requests_total"]), "")
    return table


def explanation(cmp: dict[str, Any]) -> list[str]:
    """What the table means, with its own numbers."""
    o, c = cmp["open_loop"], cmp["closed_loop"]
    pause_s, every_s = cmp.get("pause_s", 1.0), cmp.get("pause_every_s", 4.0)
    users = cmp.get("users", "N")
    rate = cmp.get("rate_rps", 0.0)
    op99, cp99 = o["latency_ms"]["p99"], c["latency_ms"]["p99"]
    lines = [
        f"The server froze for {pause_s:g} s every {every_s:g} s in both runs ({pause_s / every_s:.0%} of the time).",
        f"Open loop: requests leave on a fixed schedule ({rate:g} rps) whatever the server does; latency is "
        "measured from the time each request was due. Every request due during a freeze waits for its end, "
        f"so about {pause_s / every_s:.0%} of requests are delayed by up to {pause_s:g} s: p99 "
        f"{_fmt_ms(op99)} ms. That is what users of the service would see.",
        f"Closed loop: {users} users each wait for their answer before sending again. During a freeze they "
        f"are all stuck, so the freeze delays only the {users} requests in flight, and the requests real "
        "users would have sent meanwhile are never sent (the generator 'coordinates' with the server: "
        "coordinated omission). The slow samples become a tiny fraction: p99 "
        f"{_fmt_ms(cp99)} ms.",
    ]
    if op99 and cp99 and op99 / cp99 >= 2:
        lines.append(
            f"Same server, same freezes: the closed loop's p99 is {op99 / cp99:,.0f}x lower than the open loop's. "
            "Only its p99.9 and max still show the freeze; the percentiles people usually report do not."
        )
    elif op99 and cp99:
        lines.append(
            f"This time the closed loop's p99 is not much lower ({op99 / cp99:.1f}x): see the note on throughput."
        )
    ot, ct = o["throughput_rps"], c["throughput_rps"]
    if ot and ct:
        lines.append(
            f"It also sent less: {ct:.0f} rps against {ot:.0f} rps on average, because it stopped sending "
            "whenever the server stopped answering, so it cannot reveal a queue it does not create."
        )
        expected = rate * (1 - pause_s / every_s) if rate else None
        if expected and ct < 0.8 * expected:
            lines.append(
                f"Note: the closed loop reached only {ct:.0f} rps where about {expected:.0f} rps was expected "
                f"({rate:g} rps while the server answers, nothing while it is frozen): this machine looks busy, "
                "so answers were slower and the few frozen requests weigh more. Run it again on an idle machine."
            )
    lines.append(
        "Load tests that report closed-loop latencies (fixed concurrency) under-report tail latency; "
        "satpoint's default open loop does not."
    )
    return lines


def print_co_demo(con: Console, cmp: dict[str, Any], comparison_file: str) -> None:
    """The demo's table, what it means, and where everything was written."""
    con.print()
    con.print(comparison_table(cmp, title="coordinated omission: the same pausing server, measured two ways"))
    o, c = cmp["open_loop"], cmp["closed_loop"]
    con.print(
        f"steady windows: {o['window_s'][0]:g}-{o['window_s'][1]:g} s of each run; open-loop latency = done − "
        "intended send time, closed-loop latency = done − actual send (they coincide in a closed loop)"
    )
    con.print()
    for line in explanation(cmp):
        con.print(line)
    con.print()
    for note in cmp.get("notes", []):
        con.print(f"[yellow]note[/] {note}")
    con.print(f"results: {cmp['open_dir']} and {cmp['closed_dir']}; table: {comparison_file}")
    if cmp.get("report"):
        con.print(f"report (both runs overlaid, latency percentile spectra): {cmp['report']}")
    if c.get("latency_ms", {}).get("p99") is None or o.get("latency_ms", {}).get("p99") is None:
        con.print("[bold red]WARNING[/] a run measured nothing in its steady window")
