"""``satpoint diff``'s inputs and outputs: the two folders loaded, ``diff.json``, the overlay page
(``diff.html``), the Markdown summary (also appended to ``$GITHUB_STEP_SUMMARY`` when it is set) and the JUnit
file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.markup import escape

from satpoint._version import __version__
from satpoint.analysis.diff.busy import held_by_machine
from satpoint.analysis.diff.calibration import calibrated
from satpoint.analysis.diff.compare import SWEEP_FILE, Folder, diff_folders, parse_fraction, sweep_points_diff
from satpoint.analysis.diff.target import baseline_target
from satpoint.analysis.diff.tolerances import DEFAULT_ERROR_TOLERANCE, DEFAULT_TAIL_TOLERANCE, DEFAULT_TOLERANCE
from satpoint.analysis.diff.verdict import DEFAULT_RUN_SPREAD, DIFF_FILE, DiffDoc
from satpoint.analysis.summary.build import build_summary
from satpoint.analysis.summary.model import parse_summary
from satpoint.metrics.results import RESULTS_FILE, load_results
from satpoint.reports.files.junit import write_junit
from satpoint.reports.files.markdown import diff_markdown
from satpoint.reports.files.results import SUMMARY_FILE
from satpoint.reports.html.diff import write_diff_report
from satpoint.reports.terminal.diff import print_diff


def load_folder(path: Path) -> Folder:
    """A results folder of ``run``, ``find`` (its summary recomputed from its rows) or ``sweep``."""
    if (path / SWEEP_FILE).is_file():
        return Folder(str(path), "sweep", json.loads((path / SWEEP_FILE).read_text()), {})
    if not (path / RESULTS_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a results folder (no {RESULTS_FILE} or {SWEEP_FILE})")
    results = load_results(path)
    doc = parse_summary(build_summary(results)).model_dump()
    rows = {seg.index: seg.records for seg in results.segments}
    purposes = {seg.index: seg.purpose for seg in results.segments}
    return Folder(str(path), str(doc.get("kind")), doc, rows, purposes, results.header)


#: the baseline kinds each measuring command diffs against (``run --baseline``: a run, or a find's target)
BASELINE_KINDS = {"find": ("find",), "run": ("run", "find")}


def read_baseline_target(path: Path, kind: str = "find") -> tuple[float | None, str]:
    """``find``/``run --baseline DIR``, before measuring: the per-replica target in the baseline's
    ``summary.json`` (a ``run`` baseline's: the target it held itself), or None and why (see
    ``analysis.diff.target.baseline_target``).  A folder that is not a results folder, or one of a kind the
    ``kind`` command's diff cannot compare (``BASELINE_KINDS``), is refused at once, not after the measurement."""
    if (path / SWEEP_FILE).is_file():
        raise ValueError(f"--baseline {path} is a sweep folder: give a find or run results folder")
    if not (path / RESULTS_FILE).is_file():
        raise FileNotFoundError(f"--baseline {path} is not a results folder (no {RESULTS_FILE})")
    header = json.loads((path / RESULTS_FILE).read_text())
    base_kind = str(header.get("kind") or "run")  # as ``Results.kind`` reads it
    if base_kind not in BASELINE_KINDS.get(kind, (kind,)):
        raise ValueError(f"--baseline {path} is a {base_kind} folder: {kind} --baseline compares with a "
                         f"{' or '.join(BASELINE_KINDS.get(kind, (kind,)))} folder")  # fmt: skip
    if not (path / SUMMARY_FILE).is_file():
        return None, f"the baseline folder has no {SUMMARY_FILE}: its per-replica target was not held"
    purposes = {int(sd["index"]): str(sd["purpose"]) for sd in header.get("segments") or []}
    return baseline_target(json.loads((path / SUMMARY_FILE).read_text()), purposes)


def parse_tolerances(tolerance: str, error_tolerance: str, tail_tolerance: str) -> tuple[float, float, float]:
    """``--tolerance``, ``--error-tolerance``, ``--tail-tolerance`` as fractions (a ValueError names a bad one)."""
    return (
        parse_fraction(tolerance, "--tolerance"),
        parse_fraction(error_tolerance, "--error-tolerance"),
        parse_fraction(tail_tolerance, "--tail-tolerance"),
    )


def parse_run_spread(run_spread: str) -> float:
    """``--run-spread`` as a fraction (a ValueError names it when it does not parse)."""
    return parse_fraction(run_spread, "--run-spread")


def html_path(json_out: Path, html: Path | None, no_html: bool) -> Path | None:
    """Where the overlay page goes: ``--html FILE``, else ``diff.html`` beside diff.json; None with ``--no-html``."""
    return None if no_html else html or json_out.with_name(DIFF_HTML)


def noted_baseline_target(baseline: Path | None, console: Console, kind: str = "find") -> tuple[float | None, str]:
    """``find``/``run --baseline``, before measuring: the baseline's per-replica target to hold after the
    search or the run's stages (None: none, and the note that says why, printed now and kept for the diff)."""
    if baseline is None:
        return None, ""
    rate, note = read_baseline_target(baseline, kind)
    if note:
        console.print(f"note: {escape(note)}")
    return rate, note


def baseline_diff(
    baseline: Path, out_dir: Path, console: Console, note: str = "", fail_on_inconclusive: bool = False
) -> GateOutcome:
    """After ``run``/``find --baseline``: the diff (``diff.json`` and ``diff.html`` in the new folder, ``note``
    in its notes) and the gate's outcome (``gate``)."""
    doc, json_out = compare(baseline, str(out_dir))
    if note:
        doc = doc.model_copy(update={"notes": [*doc.notes, note]})
    return gate(doc, console, json_out, None, None, fail_on_inconclusive, json_out.with_name(DIFF_HTML))


#: a gate's outcome: a regression (or an inconclusive verdict with ``--fail-on-inconclusive``); figures held
#: back because of the machine (busy, or its speed changed: not judged, so the gate cannot pass); or passed
GateOutcome = Literal["failed", "unjudged", "passed"]


def compare(
    base: Path,
    new: str,
    point_b: str | None = None,
    sweep: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    error_tolerance: float = DEFAULT_ERROR_TOLERANCE,
    version: str = __version__,
    tail_tolerance: float = DEFAULT_TAIL_TOLERANCE,
    calibrate: bool = False,
    run_spread: float = DEFAULT_RUN_SPREAD,
) -> tuple[DiffDoc, Path]:
    """``diff BASE NEW`` (two folders) or ``diff --sweep DIR A B`` (two points of one sweep); the diff and
    where its ``diff.json`` goes by default (the new folder, or the sweep's)."""
    if sweep:
        if point_b is None:
            raise ValueError("--sweep needs the sweep folder and two points: diff --sweep DIR POINT_A POINT_B")
        if not (base / SWEEP_FILE).is_file():
            raise FileNotFoundError(f"{base} is not a sweep folder (no {SWEEP_FILE})")
        doc = json.loads((base / SWEEP_FILE).read_text())
        out = sweep_points_diff(doc, str(base), new, point_b, tolerance, version, tail_tolerance, run_spread)
        return calibrated(out) if calibrate else out, base / DIFF_FILE
    if point_b is not None:
        raise ValueError("two folders are compared (diff BASE NEW); three arguments need --sweep")
    b, n = load_folder(base), load_folder(Path(new))
    out = diff_folders(b, n, tolerance, error_tolerance, version, tail_tolerance, run_spread)
    return calibrated(out) if calibrate else out, Path(new) / DIFF_FILE


#: the overlay page's default name, beside diff.json
DIFF_HTML = "diff.html"

#: ``satpoint diff``'s longer option help (the command line keeps one line per option)
HELP = {
    "baseline": "then satpoint diff against this baseline: exit 3 on a regression; also hold the baseline's "
    "per-replica target from idle (a find's recommendation; run: also a find folder, or a run that held one), "
    "not held is a regression",
    "tolerance": "the change that matters, relative, for the saturation point, p50, service p50 and throughput: "
    "5% or 0.05 (default 5%)",
    "tail_tolerance": "the same for p90 and p99 of latency and service time (default 20%: in A/A pairs on a shared "
    "machine the tails of two runs of one server differed by 15-22 %, p50 by under 1 %)",
    "run_spread": "how far one run's figures move between runs of an unchanged server (default 10%: one search's "
    "saturation point moved 8-9 % between A/A runs of the embedded MLServer): a figure resting on one run a side "
    "must change by more to be called (latency at a loaded rate: times its queueing); with find --repeats on both "
    "sides, the searches' own spread is used; 0 trusts one run",
    "sweep": "two points of one sweep: diff --sweep DIR A B (ids or labels)",
    "html": "the overlay page: verdicts, the two folders' figures (default: diff.html beside diff.json)",
    "fail_on_inconclusive": "exit 3 on an inconclusive verdict too (with --baseline: of the diff against it)",
}


def publish(
    doc: DiffDoc,
    json_out: Path,
    markdown: Path | None,
    junit: Path | None,
    fail_incl: bool,
    html_out: Path | None = None,
) -> None:
    """diff.json, and the overlay page, Markdown and JUnit files asked for; the Markdown also to
    $GITHUB_STEP_SUMMARY."""
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(doc.model_dump(), indent=2) + "\n")
    if html_out is not None:
        write_diff_report(doc, html_out)
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


def gate(
    doc: DiffDoc,
    console: Console,
    json_out: Path,
    markdown: Path | None = None,
    junit: Path | None = None,
    fail_on_inconclusive: bool = False,
    html_out: Path | None = None,
) -> GateOutcome:
    """Print the diff, write its files; "failed" on a regression (or an inconclusive verdict with
    ``fail_on_inconclusive``), "unjudged" when figures were held back because of the machine (said in one
    line), else "passed"."""
    print_diff(console, doc)
    publish(doc, json_out, markdown, junit, fail_on_inconclusive, html_out)
    console.print(f"diff: {json_out}" + (f", {html_out}" if html_out is not None else ""))
    # inconclusive: a metric, the target's hold, or the whole diff (nothing could be compared)
    if doc.regressed or (fail_on_inconclusive and (doc.inconclusive or doc.verdict == "inconclusive")):
        return "failed"
    held = held_by_machine(doc.metrics) + ([doc.target_hold] if doc.target_hold and doc.target_hold.busy else [])
    if held:
        console.print(
            f"[bold yellow]not judged:[/] {len(held)} figure{'s' if len(held) > 1 else ''} measured on a busy machine "
            "or one whose speed changed between the runs (see above): the gate cannot pass on them; measure both "
            "sides on one quiet machine"
        )
    spread = sorted((m for m in doc.metrics if m.worse_undecided), key=lambda m: -abs(m.change or 0.0))
    if spread:
        top = spread[0]
        console.print(
            f"[bold yellow]not judged:[/] {len(spread)} change{'s' if len(spread) > 1 else ''} for the worse beyond "
            f"the tolerance left undecided (largest {(top.change or 0) * 100:+.1f} % {top.metric} @ {top.point}: "
            "within what an unchanged server moves between runs, or ranges that overlap): the gate cannot pass on "
            f"{'them' if len(spread) > 1 else 'it'}; repeat both runs (find --repeats 3), or, if changes this large "
            "do not matter, a larger --tolerance / --tail-tolerance (diff --calibrate shows what an A/A pair needs)"
        )
    return "unjudged" if held or spread else "passed"
