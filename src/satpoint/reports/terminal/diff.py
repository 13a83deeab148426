"""``satpoint diff`` on the terminal: one line per metric, the evidence beneath, the overall verdict."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from satpoint.analysis.diff.verdict import DiffDoc

_STYLE = {"regression": "bold red", "improvement": "green", "no_change": "green", "inconclusive": "yellow"}


def print_diff(console: Console, doc: DiffDoc) -> None:
    console.print(
        f"[bold]satpoint diff[/] ({doc.compared}): base {escape(str(doc.base.get('dir')))}"
        + (escape(f" [{doc.base['point']}]") if doc.base.get("point") else "")
        + f", new {escape(str(doc.new.get('dir')))}"
        + (escape(f" [{doc.new['point']}]") if doc.new.get("point") else "")
        + f", tolerance {doc.tolerance * 100:.3g} %"
        + ("" if doc.tail_tolerance is None else f" (p90/p99 {doc.tail_tolerance * 100:.3g} %)")
        + ("" if doc.run_spread is None else f", run spread {doc.run_spread * 100:.3g} %")
    )
    for m in doc.metrics:
        console.print(f"[{_STYLE[m.verdict]}]{m.verdict:>12}[/]  {escape(m.text)}")
    hold = doc.target_hold
    if hold is not None:
        style = {True: "green", False: "bold red", None: "yellow"}[hold.held]
        word = {True: "holds", False: "regression", None: "inconclusive"}[hold.held]
        console.print(f"[{style}]{word:>12}[/]  {escape(hold.text)}")
    for n in doc.notes:
        console.print(f"note: {escape(n)}")
    counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in doc.counts.items())
    console.print(f"[{_STYLE[doc.verdict]}]verdict: {doc.verdict}[/] ({counts})")
