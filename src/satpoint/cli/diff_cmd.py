"""``satpoint diff``: the regression gate between two results folders (``analysis.diff``), for CI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from satpoint._version import __version__
from satpoint.analysis.diff import parse_fraction
from satpoint.analysis.diff_verdict import calibrated
from satpoint.cli.common import EXIT_OK, EXIT_THRESHOLD, console, guarded
from satpoint.reports.diff_files import DIFF_HTML, compare, gate, read_baseline_target

Opt = typer.Option
BaselineOpt = Annotated[
    Path | None,
    Opt(
        help="then satpoint diff against this baseline: exit 3 on a regression (find: also hold the baseline's "
        "per-replica target from idle; not held is a regression)"
    ),
]


def baseline_target_rps(baseline: Path | None) -> tuple[float | None, str]:
    """``find --baseline``, before measuring: the baseline's per-replica target to hold after the search
    (None: none, and the note that says why, printed now and kept for the diff)."""
    if baseline is None:
        return None, ""
    rate, note = read_baseline_target(baseline)
    if note:
        console.print(f"note: {escape(note)}")
    return rate, note


def baseline_gate(baseline: Path | None, out_dir: Path, code: int, note: str = "") -> int:
    """After ``run``/``find --baseline``: the diff (``diff.json`` in the new folder), exit 3 on a regression
    (or when the baseline's per-replica target was not held); ``note``: why no target was held."""
    if baseline is None or code not in (EXIT_OK, EXIT_THRESHOLD):
        return code
    doc, json_out = compare(baseline, str(out_dir))
    if note:
        doc = doc.model_copy(update={"notes": [*doc.notes, note]})
    return EXIT_THRESHOLD if gate(doc, console, json_out, html_out=json_out.with_name(DIFF_HTML)) else code


def diff(
    base: Annotated[Path, typer.Argument(help="the baseline results folder (with --sweep: the sweep folder)")],
    new: Annotated[str, typer.Argument(help="the new results folder of the same kind (with --sweep: point A)")],
    point_b: Annotated[str | None, typer.Argument(help="with --sweep: point B, compared with A")] = None,
    sweep: Annotated[
        bool, Opt("--sweep", help="two points of one sweep: diff --sweep DIR A B (ids or labels)")
    ] = False,
    tolerance: Annotated[
        str,
        Opt(
            help="the change that matters, relative, for the saturation point, p50, service p50 and throughput: "
            "5% or 0.05 (default 5%)"
        ),
    ] = "5%",
    tail_tolerance: Annotated[
        str,
        Opt(
            help="the same for p90 and p99 of latency and service time (default 20%: on a shared machine the "
            "tails of two runs of one server differ by 15-20 %, p50 by under 5 %)"
        ),
    ] = "20%",
    error_tolerance: Annotated[str, Opt(help="the error-rate change that matters, absolute (default 0.5%)")] = "0.5%",
    fail_on_inconclusive: Annotated[bool, Opt(help="exit 3 on an inconclusive verdict too")] = False,
    calibrate: Annotated[bool, Opt(help="BASE and NEW are an A/A pair: the false-alarm rate, exit 0")] = False,
    json_out: Annotated[Path | None, Opt("--json", help="diff.json path (default: in the new or sweep folder)")] = None,
    markdown: Annotated[Path | None, Opt(help="Markdown summary (also to $GITHUB_STEP_SUMMARY when set)")] = None,
    junit: Annotated[Path | None, Opt(help="JUnit XML: one test case per metric and point")] = None,
    html: Annotated[
        Path | None,
        Opt(help="the overlay page: verdicts, the two folders' figures (default: diff.html beside diff.json)"),
    ] = None,
    no_html: Annotated[bool, Opt("--no-html", help="no overlay page")] = False,
) -> None:
    """Did capacity or latency get worse? A verdict per metric with its evidence; exit 3 on a regression."""

    def body() -> int:
        tol, err_tol = parse_fraction(tolerance, "--tolerance"), parse_fraction(error_tolerance, "--error-tolerance")
        tail_tol = parse_fraction(tail_tolerance, "--tail-tolerance")
        doc, default_json = compare(base, new, point_b, sweep, tol, err_tol, __version__, tail_tol)
        doc = calibrated(doc) if calibrate else doc
        out = json_out or default_json
        html_out = None if no_html else html or out.with_name(DIFF_HTML)
        failed = gate(doc, console, out, markdown, junit, fail_on_inconclusive, html_out)
        return EXIT_THRESHOLD if failed and not calibrate else EXIT_OK

    guarded(body)
