"""The terminal summary of a pipeline's search: each step against the pipeline, the prediction, the sizing."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _num(v: Any, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def print_pipeline(console: Console, block: dict[str, Any]) -> None:
    """``block``: the ``pipeline`` block of ``summary.json`` (``satpoint.pipeline.find.pipeline_block``)."""
    replicas = {s["step"]: s["replicas"] for s in (block.get("sizing") or {}).get("steps", [])}
    table = Table(title=f"pipeline {block['name']} (called as {block['called_as']})")
    for column in ("step", "reads", "saturation rps", "p50 ms", "p99 ms", "replicas"):
        table.add_column(column, justify="left" if column in ("step", "reads") else "right")
    inputs = {s["name"]: s["inputs"] for s in block["dag"]["steps"]}
    for row in block["steps"]:
        mark = " (bottleneck)" if row["step"] == block.get("bottleneck") else ""
        sat = _num(row["saturation_rps"]) + (" (lower bound)" if row.get("lower_bound") else "")
        table.add_row(
            row["step"] + mark, ", ".join(inputs.get(row["step"], [])) or "(request)", sat,
            _num(row["latency_ms"]["p50"], ".2f"), _num(row["latency_ms"]["p99"], ".2f"),
            _num(replicas.get(row["step"]), "d"),
        )  # fmt: skip
    console.print(table)
    predicted, measured = block.get("predicted_saturation_rps"), block.get("saturation_rps")
    if predicted is None:
        console.print("[bold yellow]no prediction: a step's search found no saturation point[/]")
    else:
        console.print(f"predicted from the steps: {predicted:.1f} rps, bottleneck {block['bottleneck']}")
    if measured is None:
        console.print("[bold red]the pipeline end to end: no saturation point found[/]")
    else:
        ratio = block.get("measured_over_predicted")
        console.print(
            f"[bold green]the pipeline end to end: {measured:.1f} rps[/]"
            + (" (a lower bound)" if block.get("lower_bound") else "")
            + (f", {ratio:.2f}x the prediction" if ratio is not None else "")
        )
    path = block.get("critical_path")
    if path:
        lat = path["latency_ms"]
        console.print(
            f"critical path: {' -> '.join(path['steps'])} ({_num(lat.get('p50'), '.2f')} ms p50 at light load)"
        )
    overhead = block.get("overhead_ms")
    if overhead:
        console.print(
            f"the pipeline's own cost (end to end minus the critical path): p50 {_num(overhead['p50'], '.2f')} ms, "
            f"p99 {_num(overhead['p99'], '.2f')} ms"
        )
    sizing = block.get("sizing")
    if sizing:
        after = sizing.get("saturation_rps")
        console.print(
            f"sizing for {sizing['target_rps']:.1f} rps with a {sizing['margin']:.0%} margin: the replicas above"
            + (f"; the pipeline then carries {after:.1f} rps (bottleneck {sizing['bottleneck']})" if after else "")
        )
