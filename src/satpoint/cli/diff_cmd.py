"""``satpoint diff``: the regression gate between two results folders (``analysis.diff.compare``), for CI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from satpoint._version import __version__
from satpoint.cli.common import EXIT_FAILED, EXIT_NO_ANSWER, EXIT_OK, EXIT_THRESHOLD, console, fail, guarded
from satpoint.cli.tool_modes import refuse_for_diff
from satpoint.reports.files.diff import (
    HELP,
    baseline_diff,
    compare,
    gate,
    html_path,
    parse_run_spread,
    parse_tolerances,
)

Opt = typer.Option
BaselineOpt = Annotated[Path | None, Opt(help=HELP["baseline"])]
FailInconclusiveOpt = Annotated[bool, Opt(help=HELP["fail_on_inconclusive"])]


def refuse_fail_on_inconclusive(baseline: Path | None, fail_on_inconclusive: bool) -> None:
    """``run``/``find --fail-on-inconclusive`` judges the diff against ``--baseline``: refused without one."""
    if fail_on_inconclusive and baseline is None:
        raise fail("--fail-on-inconclusive judges the diff against --baseline DIR: give the baseline")


def baseline_gate(
    baseline: Path | None, out_dir: Path, code: int, note: str = "", fail_on_inconclusive: bool = False
) -> int:
    """After ``run``/``find --baseline``: the diff, exit 3 on a regression (and, with ``fail_on_inconclusive``,
    on an inconclusive verdict), 1 when figures were held back because of the machine (not judged).  A
    measurement that lost its target (exit 1) or held no rate (a find without an answer, exit 4) is diffed
    too: a server that crashed under load or fails every request is the regression the gate is there for.
    An interrupted one keeps its code."""
    if baseline is None or code not in (EXIT_OK, EXIT_THRESHOLD, EXIT_FAILED, EXIT_NO_ANSWER):
        return code
    outcome = baseline_diff(baseline, out_dir, console, note, fail_on_inconclusive)
    if outcome == "failed":
        return EXIT_THRESHOLD
    return EXIT_FAILED if outcome == "unjudged" and code == EXIT_OK else code


def diff(
    ctx: typer.Context,
    base: Annotated[Path, typer.Argument(help="the baseline results folder (with --sweep: the sweep folder)")],
    new: Annotated[str, typer.Argument(help="the new results folder of the same kind (with --sweep: point A)")],
    point_b: Annotated[str | None, typer.Argument(help="with --sweep: point B, compared with A")] = None,
    sweep: Annotated[bool, Opt("--sweep", help=HELP["sweep"])] = False,
    tolerance: Annotated[str, Opt(help=HELP["tolerance"])] = "5%",
    tail_tolerance: Annotated[str, Opt(help=HELP["tail_tolerance"])] = "20%",
    error_tolerance: Annotated[str, Opt(help="the error-rate change that matters, absolute (default 0.5%)")] = "0.5%",
    run_spread: Annotated[str, Opt(help=HELP["run_spread"])] = "10%",
    fail_on_inconclusive: FailInconclusiveOpt = False,
    calibrate: Annotated[bool, Opt(help="BASE and NEW are an A/A pair: the false-alarm rate, exit 0")] = False,
    json_out: Annotated[Path | None, Opt("--json", help="diff.json path (default: in the new or sweep folder)")] = None,
    markdown: Annotated[Path | None, Opt(help="Markdown summary (also to $GITHUB_STEP_SUMMARY when set)")] = None,
    junit: Annotated[Path | None, Opt(help="JUnit XML: one test case per metric and point")] = None,
    html: Annotated[Path | None, Opt(help=HELP["html"])] = None,
    no_html: Annotated[bool, Opt("--no-html", help="no overlay page")] = False,
) -> None:
    """Did capacity or latency get worse? A verdict per metric with its evidence; exit 3 on a regression."""

    def body() -> int:
        refuse_for_diff(ctx, sweep, calibrate, no_html)  # exit 2, before reading anything
        tol, err_tol, tail_tol = parse_tolerances(tolerance, error_tolerance, tail_tolerance)
        spread = parse_run_spread(run_spread)
        doc, default_json = compare(base, new, point_b, sweep, tol, err_tol, __version__, tail_tol, calibrate, spread)
        out = json_out or default_json
        outcome = gate(doc, console, out, markdown, junit, fail_on_inconclusive, html_path(out, html, no_html))
        if calibrate:  # an A/A pair: the false alarms are the result
            return EXIT_OK
        return {"failed": EXIT_THRESHOLD, "unjudged": EXIT_FAILED, "passed": EXIT_OK}[outcome]

    guarded(body)
