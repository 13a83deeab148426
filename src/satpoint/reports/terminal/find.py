"""The terminal summary of a saturation search: the answer, latency below it, the recommendation."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from satpoint.analysis.summary.hints import hints
from satpoint.reports.terminal.server import print_diagnosis


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}"


def print_find(console: Console, summary: dict[str, Any]) -> None:
    sat = summary.get("saturation_rps")
    if sat is None:
        console.print("[bold red]no saturation point found[/]")
    else:
        ach = summary.get("precision_achieved")
        console.print(
            f"[bold green]saturation point: {sat:.1f} rps[/] per replica "
            f"(next unstable rate {summary.get('unstable_rps') or '-'} rps; bracket within "
            f"{ach:.1%} of the requested {summary['precision']:.0%})"
            if ach is not None and not summary.get("lower_bound")
            else f"[bold yellow]saturation point: ≥ {sat:.1f} rps[/] per replica (a lower bound: no search bracketed "
            "the capacity)"
        )
    conf = (summary.get("search") or {}).get("confirmation")
    if conf and conf.get("verdict"):
        failed = conf.get("failed_holds") or 0
        console.print(
            f"confirmed: the per-replica target {conf['rate_rps']:.1f} rps held from idle was {conf['verdict']}"
            + (f" (after {conf['attempts']} holds, {failed} not stable)" if conf.get("attempts", 1) > 1 else "")
        )
    spread = summary.get("saturation_range_rps")
    if spread:
        n = len((summary.get("search") or {}).get("repeats") or [])
        console.print(
            f"{n} searches: saturation between {spread[0]:.1f} and {spread[1]:.1f} rps (the answer is the lowest)"
        )
    within = summary.get("saturation_bracket_rps")
    if within and within[1] is not None and spread:
        console.print(
            f"capacity within {within[0]:.1f}-{within[1]:.1f} rps (lowest answer to highest unstable rate: what the "
            "searches can tell; a sweep point's bracket is the same figure)"
        )
    if summary.get("max_throughput_rps") is not None:
        console.print(f"max throughput while overloaded: {summary['max_throughput_rps']:.1f} completions/s")
    if summary.get("slo"):
        console.print(f"latency objective: {summary['slo']}")
    rows = summary.get("latency_at") or []
    if rows:
        t = Table(title="latency below the saturation point (open loop, from intended send time)", title_justify="left")
        for c in ("load", "offered rps", "throughput", "p50 ms", "p90 ms", "p99 ms", "max ms", "verdict"):
            t.add_column(c, justify="right" if c != "verdict" else "left")
        for r in rows:
            lat = r["latency_ms"]
            t.add_row(
                f"{(r['fraction'] or 0):.0%}",
                f"{r['offered_rps']:.1f}",
                f"{r['throughput_rps']:.1f}",
                _ms(lat["p50"]),
                _ms(lat["p90"]),
                _ms(lat["p99"]),
                _ms(lat["max"]),
                r["verdict"],
            )
        console.print(t)
    print_hysteresis(console, summary.get("hysteresis"))
    if summary.get("recommendation_withheld"):
        console.print(f"[bold yellow]recommendation withheld:[/] {summary['recommendation_withheld']}")
    plan = summary.get("budget_plan")
    if plan:
        console.print(f"budget: {plan['budget_s']:g} s ({'--budget-s' if plan.get('given') else 'planned'})")
    rec = summary.get("recommendation")
    if rec:
        under = "the rate it recovers at" if rec.get("lowered_by") == "hysteresis" else "saturation"
        line = (
            f"[bold]recommendation:[/] autoscale at {rec['target_rps_per_replica']:.1f} rps per replica "
            f"({rec['margin']:.0%} under {under})"
        )
        if rec.get("replicas"):
            line += f"; {rec['replicas']} replicas for a peak of {rec['peak_rps']:g} rps"
        if rec.get("min_replicas"):
            line += f"; minReplicas {rec['min_replicas']} for {rec['min_rps']:g} rps"
        if rec.get("target_rps_per_replica_unlowered") is not None:
            line += f" [yellow](lowered from {rec['target_rps_per_replica_unlowered']:.1f}: see the note)[/]"
        console.print(line)
    for n in summary.get("find_notes", []):
        console.print(f"[yellow]note:[/] {n}")
    for h in hints(summary):
        console.print(f"[cyan]hint:[/] {h}")
    print_diagnosis(console, summary)


def print_hysteresis(console: Console, h: dict[str, Any] | None) -> None:
    """``find --hysteresis``: the steps down from the overload, and the figures in words."""
    if not h:
        return
    t = Table(title="hysteresis: tipped over, then the load stepped down (no pause)", title_justify="left")
    for c in ("load", "offered rps", "throughput", "p50 ms (last half)", "queue /s", "CPU µs/req", "state"):
        t.add_column(c, justify="right" if c != "state" else "left")
    for s in h.get("steps") or []:
        cpu = s.get("cpu_us_per_request")
        t.add_row(
            f"{s['fraction']:.0%}",
            f"{s['offered_rps']:.1f}",
            f"{s['throughput_rps']:.1f}",
            _ms(s.get("latency_p50_ms")),
            f"{s['queue_slope_rps']:+.1f}",
            "-" if cpu is None else f"{cpu:.0f}",
            s["state"],
        )
    console.print(t)
    figures = []
    if h.get("goodput_share") is not None:
        figures.append(f"goodput while overloaded {h['overload_throughput_rps']:.1f}/s ({h['goodput_share']:.0%})")
    if h.get("recovery_rps") is not None:
        figures.append(f"recovers (drains) at {h['recovery_rps']:.1f} rps ({h['recovery_share']:.0%})")
    head = "[bold red]metastable[/]" if h.get("metastable") else "[bold]hysteresis[/]"
    console.print(f"{head}: " + "; ".join(figures) if figures else f"{head}:")
    console.print(h.get("explanation", ""))
