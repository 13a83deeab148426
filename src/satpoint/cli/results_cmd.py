"""``satpoint report``, ``analyze``, ``export`` and ``version``: what reads results folders offline, and the version."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from satpoint import api
from satpoint._version import __version__
from satpoint.cli.common import EXIT_FAILED, EXIT_OK, console, guarded
from satpoint.experiments.rewrite import folder_kind, rewrite_folder
from satpoint.reports.files.export import export_folder
from satpoint.reports.terminal.console import print_summary
from satpoint.reports.terminal.find import print_find


def report(
    dirs: Annotated[list[Path], typer.Argument(help="results folders")],
    out: Annotated[Path | None, typer.Option(help="report.html path (default: in the first folder)")] = None,
) -> None:
    """Rewrite a results folder's files offline: summary.json, stages.csv, intervals.csv and report.html of a run or
    find (several folders: one overlaid report.html); a sweep's, compare's, coldstart's, demo co's or find
    --trace's own files from what it recorded."""

    def body() -> int:
        runs = [d for d in dirs if folder_kind(d) == "results"]
        for d in dirs:
            if d not in runs:
                done = rewrite_folder(d)
                console.print(f"{done.kind} {d}: rewrote " + ", ".join(str(p.relative_to(d)) for p in done.files))
        if not runs:
            return EXIT_OK
        path = api.report(runs, out)
        for d in runs:
            summary = api.load(d).summary.model_dump()
            print_summary(console, summary, str(d))
            if summary["kind"] == "find":
                print_find(console, summary)
        console.print(f"report: {path}")
        return EXIT_OK

    guarded(body)


def analyze(dirs: Annotated[list[Path], typer.Argument(help="results folders")]) -> None:
    """Recompute verdicts and replay the saturation search offline from recorded results."""

    def body() -> int:
        code = EXIT_OK
        for d in dirs:
            summary = api.load(d).summary.model_dump()
            print_summary(console, summary, str(d))
            if summary["kind"] == "find":
                print_find(console, summary)
                search = summary["search"]
                ok = search["replay_matches"]
                console.print(
                    f"replay: {len(search['steps'])} decisions "
                    + ("reproduced exactly" if ok else "[bold red]DIFFER from the recorded run[/]")
                )
                if not ok:
                    code = EXIT_FAILED
        return code

    guarded(body)


def version_cmd() -> None:
    """Print the version."""
    console.print(f"satpoint {__version__}")


def print_version(value: bool) -> None:
    """``satpoint --version``: print the version and stop."""
    if value:
        version_cmd()
        raise typer.Exit()


class TableFormat(StrEnum):
    parquet = "parquet"
    csv = "csv"


def export(
    folder: Annotated[Path, typer.Argument(help="a run or find results folder")],
    to: Annotated[TableFormat, typer.Option("--to", help="parquet (needs pyarrow) or csv")] = TableFormat.parquet,
    out: Annotated[Path | None, typer.Option(help="the folder to write the tables to (default: DIR/export)")] = None,
) -> None:
    """Write a results folder's tables (rows, stream_gaps, stages, intervals) as Parquet or CSV, with unix times and
    outcomes by name, for duckdb, polars or pandas."""

    def body() -> int:
        for path in export_folder(folder, to.value, out):
            console.print(str(path))
        return EXIT_OK

    guarded(body)
