"""The REST-vs-gRPC table of ``satpoint compare`` (a function of ``compare.json``; with ``--stream``, time
to first chunk and gap p99 beside latency at each offered load)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def compare_table(doc: dict[str, Any]) -> Table:
    protos = list(doc["protocols"])
    t = Table(title="REST vs gRPC (same server, same method)", title_justify="left")
    t.add_column("figure")
    for p in protos:
        t.add_column(p, justify="right")
    rows = [
        ("saturation point (rps)", "saturation_rps"),
        ("max throughput (rps)", "max_throughput_rps"),
        ("generator CPU per request (µs)", "generator_cpu_us_per_request"),
    ]
    for label, key in rows:
        t.add_row(label, *(_fmt(doc["protocols"][p][key]) for p in protos))
    n = min(len(doc["protocols"][p]["latency_at"]) for p in protos)
    for i in range(n):
        rate = doc["protocols"][protos[0]]["latency_at"][i]["offered_rps"]
        for pct in ("p50", "p99"):
            t.add_row(
                f"{pct} latency at {rate:.0f} rps (ms)",
                *(_fmt(doc["protocols"][p]["latency_at"][i]["latency_ms"][pct], ".2f") for p in protos),
            )
        if any(doc["protocols"][p].get("stream") for p in protos):  # --stream: first chunk and gaps there
            for label, key in (("TTFC p99", "ttfc_p99_ms"), ("gap p99", "gap_p99_ms")):
                t.add_row(
                    f"{label} at {rate:.0f} rps (ms)",
                    *(_fmt((doc["protocols"][p]["latency_at"][i].get("stream") or {}).get(key), ".2f") for p in protos),
                )
    return t


def print_compare(console: Console, doc: dict[str, Any]) -> None:
    console.print(compare_table(doc))
