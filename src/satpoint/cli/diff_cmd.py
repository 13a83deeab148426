"""``satpoint diff``: the regression gate between two results folders (``analysis.diff``), for CI."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from satpoint import api
from satpoint._version import __version__
from satpoint.analysis.diff import (
    DEFAULT_ERROR_TOLERANCE,
    DEFAULT_TOLERANCE,
    DIFF_FILE,
    DiffDoc,
    Folder,
    diff_folders,
    sweep_points_diff,
)
from satpoint.cli.common import EXIT_OK, EXIT_THRESHOLD, console, fail, guarded
from satpoint.experiments.sweep import SWEEP_FILE
from satpoint.metrics.results import RESULTS_FILE
from satpoint.reports.diff_junit import write_junit
from satpoint.reports.diff_markdown import diff_markdown
from satpoint.reports.diff_terminal import print_diff

#: the exit code of a regression (as a failed --threshold)
EXIT_REGRESSION = EXIT_THRESHOLD


def parse_fraction(text: str, what: str) -> float:
    """``5%`` or ``0.05`` as 0.05."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise fail(f"{what} must be a fraction (0.05) or a percentage (5%), not {text!r}") from None
    if not 0 <= v < 10:
        raise fail(f"{what} {text!r} is out of range")
    return v


def load_folder(path: Path) -> Folder:
    """A results folder of ``run``, ``find`` (its summary recomputed from its rows) or ``sweep``."""
    if (path / SWEEP_FILE).is_file():
        return Folder(str(path), "sweep", json.loads((path / SWEEP_FILE).read_text()), {})
    if not (path / RESULTS_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a results folder (no {RESULTS_FILE} or {SWEEP_FILE})")
    loaded = api.load(path)
    doc = loaded.summary.model_dump()
    return Folder(str(path), str(doc.get("kind")), doc, {seg.index: seg.records for seg in loaded.segments})


def publish(doc: DiffDoc, json_out: Path, markdown: Path | None, junit: Path | None, fail_incl: bool) -> None:
    """diff.json, and the Markdown and JUnit files asked for; the Markdown also to $GITHUB_STEP_SUMMARY."""
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(doc.model_dump(), indent=2) + "\n")
    md = diff_markdown(doc)
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(md)
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with open(step, "a", encoding="utf-8") as f:
            f.write(md + "\n")
    if junit is not None:
        write_junit(doc, junit, fail_incl)


def diff(
    base: Annotated[Path, typer.Argument(help="the baseline results folder (or, with --sweep, the sweep folder)")],
    new: Annotated[str, typer.Argument(help="the new results folder of the same kind (with --sweep: point A)")],
    point_b: Annotated[str | None, typer.Argument(help="with --sweep: point B, compared with A")] = None,
    sweep: Annotated[
        bool, typer.Option("--sweep", help="compare two points of one sweep: diff --sweep DIR A B (ids or labels)")
    ] = False,
    tolerance: Annotated[
        str, typer.Option(help="the change that matters, relative: 5% or 0.05 (default 5%)")
    ] = f"{DEFAULT_TOLERANCE:.0%}",
    error_tolerance: Annotated[
        str, typer.Option(help="the error-rate change that matters, in percentage points (default 0.5%)")
    ] = f"{DEFAULT_ERROR_TOLERANCE:.1%}",
    fail_on_inconclusive: Annotated[
        bool, typer.Option(help="exit 3 on an inconclusive verdict too, not only on a regression")
    ] = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="diff.json path (default: in the new folder, or the sweep's)")
    ] = None,
    markdown: Annotated[
        Path | None, typer.Option(help="write a Markdown summary here (also to $GITHUB_STEP_SUMMARY when set)")
    ] = None,
    junit: Annotated[Path | None, typer.Option(help="write JUnit XML here: one test case per metric and point")] = None,
) -> None:
    """Did capacity or latency get worse? Verdicts per metric with their evidence; exit 3 on a regression."""

    def body() -> int:
        tol = parse_fraction(tolerance, "--tolerance")
        err_tol = parse_fraction(error_tolerance, "--error-tolerance")
        if sweep:
            if point_b is None:
                raise fail("--sweep needs the sweep folder and two points: diff --sweep DIR POINT_A POINT_B")
            path = base / SWEEP_FILE
            if not path.is_file():
                raise FileNotFoundError(f"{base} is not a sweep folder (no {SWEEP_FILE})")
            doc = sweep_points_diff(json.loads(path.read_text()), str(base), new, point_b, tol, __version__)
            out = json_out or base / DIFF_FILE
        else:
            if point_b is not None:
                raise fail("two folders are compared (diff BASE NEW); three arguments need --sweep")
            b, n = load_folder(base), load_folder(Path(new))
            doc = diff_folders(b, n, tol, err_tol, __version__)
            out = json_out or Path(new) / DIFF_FILE
        print_diff(console, doc)
        publish(doc, out, markdown, junit, fail_on_inconclusive)
        console.print(f"diff: {out}")
        if doc.regressed or (fail_on_inconclusive and doc.inconclusive):
            return EXIT_REGRESSION
        return EXIT_OK

    guarded(body)
