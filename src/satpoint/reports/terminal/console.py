"""Terminal output: live progress while running and the summary table afterwards."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from satpoint.engine.live import WINDOW_S, LiveSnapshot
from satpoint.plan import RateCurve, Stage, StageSpan, spans
from satpoint.redact import redact_url
from satpoint.reports.per_model import print_models
from satpoint.reports.terminal.server import print_diagnosis, print_flamegraph, print_server
from satpoint.reports.terminal.stream import print_stream
from satpoint.reports.terminal.trace import print_trace

VERDICT_STYLE = {
    "stable": "green",
    "saturated": "yellow",
    "generator_limited": "bold red",
    "failing": "red",
    "slo_violated": "magenta",
    "incomplete": "dim",
}


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


class LiveView:
    """Renders snapshots; call :meth:`update` from any thread, it throttles itself."""

    def __init__(self, console: Console, stages: list[Stage], title: str, interval_s: float = 0.5) -> None:
        self.console = console
        # the plan was checked before it started (falling targets only in satpoint's own sequences)
        self.spans: list[StageSpan] = spans(stages, descending=True)
        self.curve = RateCurve(stages, descending=True)
        self.title = title
        self.interval_s = interval_s if console.is_terminal else 5.0
        self._last = 0.0
        self._live: Live | None = None
        self._answers: deque[tuple[float, int]] = deque()  # (run clock, OK answers so far), the last second

    def answered_rps(self, s: LiveSnapshot) -> float:
        """OK answers per second over the last second, whenever those requests were due: under a backlog the
        requests due in the last second are not answered yet, but the server still answers older ones.  Until
        a second has been seen: the OK answers among the requests due in the last second."""
        hist = self._answers
        if not hist or s.now_s > hist[-1][0]:
            hist.append((s.now_s, s.ok_total))
        while len(hist) > 2 and hist[1][0] <= s.now_s - WINDOW_S:
            hist.popleft()
        t0, ok0 = hist[0]
        if s.now_s - t0 < 0.5 * WINDOW_S:
            return s.ok_recent / WINDOW_S
        return (s.ok_total - ok0) / (s.now_s - t0)

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            self._live = Live(console=self.console, auto_refresh=False, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def update(self, snap: LiveSnapshot) -> None:
        self.answered_rps(snap)  # every snapshot feeds the answered rate, shown or not
        now = time.monotonic()
        if now - self._last < self.interval_s:
            return
        self._last = now
        text = self.render(snap)
        if self._live is not None:
            self._live.update(text, refresh=True)
        else:
            self.console.print(text, soft_wrap=True)

    def render(self, s: LiveSnapshot) -> Text:
        t = s.now_s
        sp = next((x for x in self.spans if x.start_s <= t < x.end_s), self.spans[-1])
        phase = "ramp" if t < sp.hold_start_s else "hold"
        lat = s.latency_sample_s
        p50 = float(np.percentile(lat, 50)) * 1000 if len(lat) else None
        p99 = float(np.percentile(lat, 99)) * 1000 if len(lat) else None
        lag99 = float(np.percentile(s.lag_sample_s, 99)) * 1000 if len(s.lag_sample_s) else None
        offered = s.due_recent / WINDOW_S
        achieved = self.answered_rps(s)
        line = Text()
        line.append(f"{self.title} ", style="bold")
        line.append(
            f"t={t:6.1f}s stage {sp.index + 1}/{len(self.spans)} ({phase}, target {sp.stage.target_rps:g} rps) "
        )
        line.append(f"offered {offered:7.1f}/s answered {achieved:7.1f}/s ")
        line.append(f"p50 {_fmt_ms(p50)} ms p99 {_fmt_ms(p99)} ms ")
        line.append(f"lag p99 {_fmt_ms(lag99)} ms ", style="red" if (lag99 or 0) > 10 else "")
        line.append(f"in-flight {s.inflight} waiting {s.backlog} ")
        line.append(f"errors {s.errors}", style="red" if s.errors else "")
        return line


def stage_table(stages: list[dict[str, Any]], title: str = "stages (steady windows)") -> Table:
    table = Table(title=title, title_justify="left")
    for col in (
        "#",
        "target",
        "offered",
        "throughput",
        "err %",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "svc p99",
        "lag p99",
        "late %",
        "verdict",
    ):
        table.add_column(col, justify="right" if col not in ("verdict",) else "left")
    for i, s in enumerate(stages, start=1):
        lat, svc, lag = s["latency_ms"], s["service_ms"], s["send_lag_ms"]
        v = s["verdict"]
        shown = f"{v} (interrupted)" if s.get("interrupted") and v != "incomplete" else v
        table.add_row(
            str(i),
            f"{s['target_rps']:g}",
            f"{s['offered_rps']:.1f}",
            f"{s['throughput_rps']:.1f}",
            f"{100 * s['error_rate']:.2f}",
            _fmt_ms(lat["p50"]),
            _fmt_ms(lat["p90"]),
            _fmt_ms(lat["p99"]),
            _fmt_ms(lat["max"]),
            _fmt_ms(svc["p99"]),
            _fmt_ms(lag["p99"]),
            f"{100 * s['late_fraction']:.1f}",
            Text(shown, style=VERDICT_STYLE.get(v, "")),
        )
    return table


def print_summary(console: Console, summary: dict[str, Any], out_dir: str) -> None:
    tgt = summary["target"]
    url = escape(redact_url(str(tgt["url"])))
    console.print(f"[bold]satpoint[/] {summary['kind']} · {tgt['protocol']} {url} model [bold]{tgt['model']}[/]")
    console.print(stage_table(summary["stages"]))
    if summary.get("mode") == "closed_loop":
        console.print("closed loop: each user waits for its response; latency = done − actual send (hides queueing)")
    else:
        console.print("latency = done − intended send time (coordinated-omission free); svc = done − actual send")
    for s in summary["stages"]:
        for r in s.get("reasons", []):
            console.print(f"  stage {summary['stages'].index(s) + 1}: {r}")
    print_trace(console, summary)
    print_stream(console, summary)
    print_models(console, summary)
    print_server(console, summary)
    print_flamegraph(console, summary, out_dir)
    if summary.get("kind") != "find":  # find prints it with its answer
        print_diagnosis(console, summary)
    gen = summary.get("generator", {})
    if gen.get("cpu_us_per_request") is not None:
        console.print(f"generator: {gen['cpu_us_per_request']:.1f} µs CPU per request over {gen['requests']} requests")
    for line in hosts_lines(gen.get("ray")):
        console.print(line)
    for w in summary.get("warnings", []):
        console.print(f"[bold red]WARNING[/] {w}")
    console.print(f"results: {out_dir}")


def hosts_lines(ray: dict[str, Any] | None) -> list[str]:
    """The generator hosts of a ``--ray`` run: where they ran, their clocks, their start, their load."""
    if not ray:
        return []
    hosts = ray.get("hosts") or []
    skew, bound = ray.get("start_skew_max_s"), ray.get("start_skew_bound_max_s")
    start = "start skew not measured" if len(hosts) > 1 else "one host: no start skew"
    if isinstance(skew, (int, float)):
        start = f"start skew {skew * 1e6:.0f} µs (measured)"
    if isinstance(bound, (int, float)) and len(hosts) > 1:
        start += f", clock bound ±{bound * 1e3:.2f} ms"
    each = f"{ray.get('procs_per_host')} process(es) each"
    out = [f"generator hosts: {len(hosts)} on Ray ({ray.get('address')}), {each}; {start}"]
    for h in hosts:
        cpu = h.get("cpu_us_per_request")
        lag = h.get("lag_p99_max_ms")
        lost = f"; LOST in segment(s) {[x['segment'] for x in h['lost_segments']]}" if h.get("lost_segments") else ""
        out.append(
            f"  host {h['index']} {h.get('host')}: {h.get('requests')} requests, "
            + (f"{cpu:.1f} µs CPU per request, " if cpu is not None else "")
            + (f"worst stage p99 send lag {lag:.2f} ms, " if lag is not None else "")
            + f"clock offset {1e3 * (h.get('clock_offset_s') or 0):+.3f} ms "
            + f"±{1e3 * h['clock_uncertainty_max_s']:.3f}{lost}"
        )
    return out
