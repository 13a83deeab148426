"""The terminal's lines for ``find --trace``: the headroom factor, the trace's peak, replicas, latency."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _ms(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, (int, float)) else "-"


def print_headroom(console: Console, h: dict[str, Any]) -> None:
    """``summary.json``'s ``trace_headroom`` block."""
    x = h.get("speed")
    lo, hi = h.get("bracket") or [None, None]
    replays = h.get("replays") or []
    t = Table(title="replays of the trace (each from idle; stable: every stage stable)", title_justify="left")
    for c in ("#", "speed", "phase", "verdict", "stages not stable", "worst p99 ms", "s"):
        t.add_column(c, justify="left" if c in ("phase", "verdict") else "right")
    for i, r in enumerate(replays, 1):
        t.add_row(
            str(i), f"{r['speed']:.3f}", r["phase"], r["verdict"], f"{r['unstable_stages']}/{r['stages']}",
            _ms(r.get("p99_ms_worst_stage")), f"{r['seconds']:.0f}",
        )  # fmt: skip
    console.print(t)
    if x is None:
        console.print(
            f"[bold red]no headroom found[/]: the trace was not sustained at any speed tried ({h.get('ended')})"
        )
        return
    if h.get("ended") == "target_lost":
        at = next((r["speed"] for r in reversed(replays) if r.get("target_lost")), hi)
        console.print(
            f"[bold red]the server stopped answering under the replay at speed {at}[/]: no headroom is "
            f"drawn from the speeds held before it (up to {x:.3f}); no replica count or per-replica target"
        )
    elif h.get("lower_bound"):
        why = {
            "limit": "the next speed was generator- or client-limited: those replays said nothing about the server",
            "max_speed": "the highest speed allowed was sustained",
        }.get(str(h.get("ended")), f"no unstable speed reached; {h.get('ended')}")
        console.print(
            f"[bold yellow]headroom: X ≥ {x:.3f}[/], a lower bound only ({why}): no replica count or per-replica "
            "target is drawn from it"
        )
    else:
        console.print(
            f"[bold green]headroom: X = {x:.3f}[/] (sustained at {lo:.3f}, not at {hi:.3f}: within "
            f"{hi / lo - 1:.1%}, precision {h['precision']:.0%}"
            + ("; confirmed by a second replay at X" if h.get("confirmed") else "; not confirmed")
            + ")"
        )
    console.print(
        f"trace peak: {h['trace_peak_rps_per_minute']:.1f} rps in its busiest minute, "
        f"{h['trace_peak_rps_per_second']:.0f} in its busiest second (as recorded, speed 1)"
    )
    if h.get("source_note"):
        console.print(f"[yellow]{h['source_note']}[/]")
    if h.get("sizing_withheld"):
        console.print(f"[bold yellow]no replica count or per-replica target[/]: {h['sizing_withheld']}")
    if h.get("capacity_rps") is None:
        return
    console.print(
        f"one replica: {h['capacity_rps']:.1f} rps of this traffic's busiest minute (X x the peak minute); at the "
        f"{h['margin']:.0%} margin {h['target_rps_per_replica']:.1f} rps; the trace's peak needs "
        f"{h['replicas_for_peak']} replica(s) = ceil(1 / (X x (1 - margin)))"
    )
    rows = h.get("latency_at") or []
    if rows:
        lt = Table(title="latency at fractions of X (the worst stage of each replay)", title_justify="left")
        for c in ("of X", "speed", "verdict", "stage rps", "p50 ms", "p99 ms", "p99.9 ms"):
            lt.add_column(c, justify="left" if c == "verdict" else "right")
        for r in rows:
            lt.add_row(
                f"{r['fraction']:.0%}", f"{r['speed']:.3f}", r["verdict"], _ms(r.get("offered_rps")),
                _ms(r.get("p50_ms")), _ms(r.get("p99_ms")), _ms(r.get("p999_ms")),
            )  # fmt: skip
        console.print(lt)
