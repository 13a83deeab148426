"""The terminal's lines for ``scale-test``: the replica times, the time to recover, the seconds and requests over
the objective, the scale-down, the margin check, and a compressed timeline."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _s(v: Any) -> str:
    return f"{v:.1f} s" if isinstance(v, (int, float)) else "-"


def _timeline(block: dict[str, Any]) -> Table:
    """The timeline, one row per change of state (over or not, replicas) rather than per second."""
    metric = block["slo"]["metric"]
    t = Table(title=f"timeline (seconds of due times; over: {metric} above {block['slo']['limit_ms']:g} ms or failed)",
              title_justify="left")  # fmt: skip
    for c in ("from s", "to s", "offered/s", "failed", f"worst {metric} ms", "over", "ready", "desired"):
        t.add_column(c, justify="right")
    rows = block.get("timeline") or []
    i = 0
    while i < len(rows):
        j = i
        key = (rows[i]["over"], rows[i]["ready"], rows[i]["desired"])
        while j + 1 < len(rows) and (rows[j + 1]["over"], rows[j + 1]["ready"], rows[j + 1]["desired"]) == key:
            j += 1
        span = rows[i : j + 1]
        worst = [r.get(f"{metric}_ms") for r in span]
        worst_txt = "failed" if any(w is None for w in worst) else f"{max(w for w in worst if w is not None):.1f}"
        offered = sum(r["offered"] for r in span) / len(span)
        t.add_row(
            str(rows[i]["t_s"]), str(rows[j]["t_s"] + 1), f"{offered:.0f}", str(sum(r["failed"] for r in span)),
            worst_txt, "yes" if key[0] else "", _n(key[1]), _n(key[2]),
        )  # fmt: skip
        i = j + 1
    return t


def _n(v: Any) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) else "-"


def print_scale(console: Console, block: dict[str, Any], out_dir: str) -> None:
    """``summary.json``'s ``scale`` block."""
    console.print(_timeline(block))
    console.print(
        f"load {block['from_rps']:g} -> {block['to_rps']:g} rps at {block['step_s']:g} s "
        f"(ramp {block['ramp_s']:g} s), back at {block['down_s']:g} s; replicas from {block['source']}"
    )
    if block["scaled"]:
        each = ", ".join(f"{x:.1f}" for x in block["replica_ready_s"])
        console.print(
            f"replicas {_n(block['replicas_before'])} -> {_n(block['replicas_peak'])}: desired changed after "
            f"{_s(block['time_to_desired_s'])}, each new replica ready after [{each}] s; "
            f"time to replicas {_s(block['time_to_replicas_s'])}"
        )
    else:
        console.print(f"[bold yellow]the replica count never rose[/] (stayed at {_n(block['replicas_before'])})")
    if block["recovered"] is True:
        console.print(f"[green]recovered[/]: the objective held again {_s(block['time_to_recover_s'])} after the step")
    elif block["recovered"] is False:
        console.print("[bold red]not recovered[/]: still over the objective at the end of the peak")
    console.print(
        f"over the objective: {block['seconds_over_slo']} s ({block['seconds_over_slo_peak']} in the peak), "
        f"{block['requests_over_slo']} of {block['requests']} requests ({block['requests_failed']} failed)"
    )
    down = block["scale_down"]
    console.print(
        f"scale-down: back to {_n(block['replicas_before'])} replicas after {_s(down['time_to_scale_down_s'])} "
        f"(from the load's fall); {down['seconds_over_slo']} s over the objective, {down['requests_failed']} failed; "
        f"{block['direction_changes']} turns of the replica count"
    )
    margin = block.get("margin")
    if margin:
        if margin.get("enough") is None:
            console.print(f"margin check: no verdict ({margin.get('why')})")
        else:
            word = "[green]enough[/]" if margin["enough"] else "[bold red]too tight[/]"
            console.print(
                f"margin check: {word}: in use {margin['in_use']:.1%} under saturation, needed {margin['needed']:.1%} "
                f"(m >= r x d / S, d = {_s(margin['delay_s'])}, S = {margin['capacity_rps']:g} rps per replica)"
            )
    pred = block.get("predict")
    if pred:
        if "error" in pred:
            console.print(f"prediction: none ({pred['error']})")
        else:
            lo, hi = pred["seconds_over_slo_range"]
            console.print(
                f"prediction (target {pred['target']:g}, delay {pred['delay_s']:g} s, sync {pred['sync_s']:g} s): "
                f"{pred['seconds_over_slo']:g} s over the objective ({lo}-{hi} by the sync's phase), measured "
                f"{pred['measured_seconds_over_slo']} s"
            )
    for note in block.get("notes") or []:
        console.print(f"[yellow]note:[/] {note}")
    console.print(f"results: {out_dir}")
