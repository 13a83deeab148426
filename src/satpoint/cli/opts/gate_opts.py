"""``sweep`` and ``compare``'s gates and exit codes: ``--threshold`` and ``--slo`` judged on the measurements
the command answers with (the recommended point's searches; each protocol's search), ``find``'s rules.

A gate judges figures that were measured: a measurement without the figure fails it (never a pass on
nothing), and a command without an answer (no recommended point, a protocol without a saturation point)
exits 4 whatever the gates say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from satpoint import api
from satpoint.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_ANSWER,
    EXIT_OK,
    EXIT_THRESHOLD,
    console,
    err_console,
    format_result,
)

#: how a gate judges one search (the stages ``find --threshold`` judges), said in each gate's help
_JUDGED = (
    "saturation_rps and max_throughput_rps as found; latency and error_rate on the worst profile stage at or below "
    "the per-replica target (else the worst stable search stage)"
)
SweepThresholdOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="gate on the recommended point, e.g. 'p99<50ms', 'saturation_rps>400' (repeatable): judged on each "
        f"of its measurements ({_JUDGED}); exit 3 if one fails, 4 if no point is recommended"
    ),
]
SWEEP_SLO_HELP = (
    "latency objective, e.g. p99<50ms (repeatable): every search answers under it (a stage over it fails), and "
    "it is a gate on the recommended point as --threshold is (exit 3)"
)
CompareThresholdOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="gate on every protocol, e.g. 'p99<50ms', 'saturation_rps>400' (repeatable): judged on each "
        f"protocol's search ({_JUDGED}); exit 3 if one protocol fails it, 4 if one has no saturation point"
    ),
]
CompareSloOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="latency objective, e.g. p99<50ms (repeatable): a gate on every protocol as --threshold is (exit 3); "
        "the searches themselves are not limited by it"
    ),
]


def gate_exprs(threshold: Sequence[str] | None, slo: Sequence[str] | None) -> list[str]:
    """The expressions judged: ``--threshold``'s (checked now: a bad one is exit 2 before any load) and
    ``--slo``'s as upper limits (``p99=50ms`` is ``p99<=50ms``)."""
    return api.gate_expressions(list(threshold or ()), list(slo or ()))


def judge_folder(path: Path, exprs: Sequence[str]) -> list[dict[str, Any]]:
    """``exprs`` judged on one search's results folder, as ``find --threshold`` judges its own."""
    return api.judge(path, exprs)


def _print(label: str, results: Sequence[Mapping[str, Any]]) -> bool:
    """Print the gate lines of one measurement; True if one failed."""
    for t in results:
        console.print(f"{escape(label)}: {escape(format_result(t))}", style="green" if t["passed"] else "bold red")
    return any(not t["passed"] for t in results)


def sweep_exit(doc: Mapping[str, Any], out_dir: Path, exprs: Sequence[str], interrupted: bool) -> int:
    """``sweep``'s exit code: 130 interrupted; 1 nothing measured; 4 no recommended point (no point has a
    figure for the objective); 3 a gate failed on one of the recommended point's measurements; else 0."""
    if interrupted:
        return EXIT_INTERRUPTED
    measurements = list(doc.get("measurements") or [])
    if not any(m.get("status") == "done" for m in measurements):
        return EXIT_FAILED
    best = (doc.get("best") or {}).get(doc.get("objective"))
    if best is None:
        err_console.print("[bold red]no answer:[/] no point has a figure for the sweep's objective")
        return EXIT_NO_ANSWER
    if not exprs:
        return EXIT_OK
    done = [m for m in measurements if m.get("point") == best["point"] and m.get("status") == "done"]
    failed = not done  # nothing to judge the gates on
    for m in done:
        failed |= _print(f"{best['label']} ({m['dir']})", judge_folder(out_dir / m["dir"], exprs))
    return EXIT_THRESHOLD if failed else EXIT_OK


def compare_exit(dirs: Mapping[str, Path], exprs: Sequence[str], interrupted: bool) -> int:
    """``compare``'s exit code: 130 interrupted; 1 a protocol's search lost its target; 4 a protocol has no
    saturation point; 3 a gate failed on a protocol; else 0."""
    if interrupted:
        return EXIT_INTERRUPTED
    code, failed = EXIT_OK, False
    for proto, path in dirs.items():
        summary = api.load(path).summary
        if summary.target_lost is not None:
            err_console.print(f"[bold red]error:[/] {proto}: {escape(summary.target_lost.message)}")
            return EXIT_FAILED
        if getattr(summary, "saturation_rps", None) is None:  # a search's summary (FindSummary)
            err_console.print(f"[bold red]no answer:[/] {proto}: no saturation point (no rate was held)")
            code = EXIT_NO_ANSWER
        if exprs:
            failed |= _print(proto, judge_folder(path, exprs))
    if code != EXIT_OK:
        return code
    return EXIT_THRESHOLD if failed else EXIT_OK


def gates_exit(results: Sequence[dict[str, Any]], asked: int, code: int) -> int:
    """Print the gate lines judged (``summary.json``'s ``thresholds``) and turn a success ``code`` into 3
    when one failed, or when fewer were judged than ``asked`` (nothing to judge them on)."""
    for t in results:
        console.print(format_result(t), style="green" if t["passed"] else "bold red")
    failed = any(not t["passed"] for t in results) or len(results) < asked
    return EXIT_THRESHOLD if code == EXIT_OK and failed else code


def no_answer_exit(summary: api.FindSummary, code: int) -> int:
    """``find``'s exit code from ``exit_code``'s: ``EXIT_NO_ANSWER`` in place of a success or a failed
    threshold when the search held no rate (no saturation point, not even a lower bound), said in one line;
    an interrupted run, a lost target or a results folder written elsewhere keep their codes."""
    if code not in (EXIT_OK, EXIT_THRESHOLD) or summary.saturation_rps is not None:
        return code
    steps = summary.search.steps
    if steps:
        low = min(steps, key=lambda s: s.rate_rps)
        why = (
            f"no rate was held: {len(steps)} stage{'s' if len(steps) > 1 else ''} measured, the lowest "
            f"({low.rate_rps:g} rps) {low.verdict}"
        )
    else:
        why = "no stage was measured (see the lines above: the budget, or the target)"
    err_console.print(f"[bold red]no answer:[/] find found no saturation point ({why})")
    return EXIT_NO_ANSWER
