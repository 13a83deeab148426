"""``satpoint report DIR`` on every kind of folder: what each one's files are rewritten from, offline.

A run or find folder (``results.json``) goes through ``api.report``.  The others are rewritten from what they
recorded, measuring nothing: a sweep from its measurements' folders (``sweep.json``, ``sweep.csv``,
``report.html``), a compare from its protocols' folders (``compare.json``, ``report.html``), a cold start from
its repetitions (``summary.json``, ``report.html``), the coordinated-omission demo from its two runs
(``comparison.json``, ``report.html``), a ``find --trace`` from its replays (each replay's files; its
``headroom.json`` is the search's own record and is kept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from satpoint.analysis.models.coldstart import Repetition, coldstart_summary, recommend
from satpoint.errors import SatpointError
from satpoint.experiments.compare import COMPARE_FILE, rewrite_compare
from satpoint.experiments.sweep import SWEEP_FILE, rewrite_sweep
from satpoint.metrics.documents import (
    ColdStartDataDoc,
    ColdStartSummaryDoc,
    ComparisonDoc,
    HeadroomDoc,
    check_version,
    write_document,
)
from satpoint.metrics.results import RESULTS_FILE, load_results
from satpoint.reports.files.results import write_all
from satpoint.reports.html.coldstart import write_html
from satpoint.reports.terminal.co_demo import comparison

#: what a folder is, from the files it holds (the first that matches)
KINDS = (
    (RESULTS_FILE, "results"),
    (SWEEP_FILE, "sweep"),
    (COMPARE_FILE, "compare"),
    (ColdStartDataDoc.FILE, "coldstart"),
    (ComparisonDoc.FILE, "co_demo"),
    (HeadroomDoc.FILE, "headroom"),
)


@dataclass(frozen=True)
class Rewritten:
    """One folder rewritten: its kind and the files written."""

    folder: Path
    kind: str
    files: tuple[Path, ...]


def folder_kind(folder: Path) -> str:
    """``results`` (run, find), ``sweep``, ``compare``, ``coldstart``, ``co_demo`` or ``headroom``."""
    for name, kind in KINDS:
        if (folder / name).is_file():
            return kind
    known = ", ".join(name for name, _ in KINDS)
    raise SatpointError(f"{folder} is not a satpoint results folder: it holds none of {known}")


def rewrite_folder(folder: Path) -> Rewritten:
    """Rewrite a sweep, compare, cold-start, demo or ``find --trace`` folder (see the module's docstring)."""
    kind = folder_kind(folder)
    if kind == "sweep":
        rewrite_sweep(folder)
        return Rewritten(folder, kind, tuple(folder / n for n in (SWEEP_FILE, "sweep.csv", "report.html")))
    if kind == "compare":
        doc = rewrite_compare(folder)
        html = (folder / "report.html",) if len(doc["protocols"]) > 1 else ()
        return Rewritten(folder, kind, (folder / COMPARE_FILE, *html))
    if kind == "coldstart":
        return Rewritten(folder, kind, _coldstart(folder))
    if kind == "co_demo":
        return Rewritten(folder, kind, _co_demo(folder))
    if kind == "headroom":
        replays = sorted({p.parent for p in folder.rglob(RESULTS_FILE)})
        for d in replays:  # a replay written without report.html (--no-html) is rewritten without it
            write_all(d, load_results(d), html=(d / "report.html").exists())
        return Rewritten(folder, kind, tuple(d / "summary.json" for d in replays))
    raise SatpointError(f"{folder}: a run or find folder is rewritten by satpoint.report")


def _read(path: Path, reads: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    if "schema_version" in doc:  # written before the envelope: version 1's shape
        check_version(doc, path, reads)
    return doc


def _coldstart(folder: Path) -> tuple[Path, ...]:
    """summary.json's distributions and recommendation from coldstart.json's repetitions, and report.html."""
    summary = _read(folder / ColdStartSummaryDoc.FILE, ColdStartSummaryDoc.VERSION)
    data = _read(folder / ColdStartDataDoc.FILE, ColdStartDataDoc.VERSION)
    reps = [Repetition.from_dict(r) for r in data.get("repetitions", [])]
    ok_status = 0 if (summary.get("target") or {}).get("protocol") == "grpc" else 200
    summary["coldstart"] = coldstart_summary(reps, ok_status=ok_status)
    runs = data.get("overcommit") or []
    summary["recommendation"] = recommend(summary["coldstart"], runs, (summary.get("options") or {}).get("slo_p99_ms"))
    summary.update(ColdStartSummaryDoc.envelope())
    data.update(ColdStartDataDoc.envelope())
    write_document(folder / ColdStartDataDoc.FILE, ColdStartDataDoc.model_validate(data), indent=None)
    write_document(folder / ColdStartSummaryDoc.FILE, ColdStartSummaryDoc.model_validate(summary))
    return (
        folder / ColdStartSummaryDoc.FILE,
        folder / ColdStartDataDoc.FILE,
        write_html(summary, folder / "report.html", data),
    )


def _co_demo(folder: Path) -> tuple[Path, ...]:
    """Both runs' files, comparison.json's two sides from their summaries, and the overlaid report.html."""
    from satpoint.reports.html.report import write_report

    old = _read(folder / ComparisonDoc.FILE, ComparisonDoc.VERSION)
    dirs = [folder / "open-loop", folder / "closed-loop"]
    opened, closed = (write_all(d, load_results(d), html=False) for d in dirs)
    keep = {k: v for k, v in old.items() if k not in ("open_loop", "closed_loop", "open_over_closed")}
    doc = {**keep, **comparison(opened, closed), **ComparisonDoc.envelope()}
    write_document(folder / ComparisonDoc.FILE, ComparisonDoc.model_validate(doc))
    return folder / ComparisonDoc.FILE, write_report(dirs, folder / "report.html")
