"""``satpoint export DIR --to parquet|csv``: a results folder's tables for duckdb, polars or pandas.

Writes ``rows``, ``stages`` and ``intervals`` (and ``stream_gaps`` when the run streamed) as ``.parquet`` or ``.csv``
files (the tables of ``reports.files.frames``, with unix times beside the run clock's and outcomes by name).
Parquet needs pyarrow, imported only then.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

from satpoint.analysis.summary.build import build_summary
from satpoint.errors import ConfigError
from satpoint.metrics.results import load_results
from satpoint.reports.files.frames import gap_columns, pandas, to_pandas
from satpoint.reports.files.results import write_intervals, write_stages

FORMATS = ("parquet", "csv")
NO_PYARROW = "--to parquet needs pyarrow, which is not installed: pip install 'satpoint[export]' (or use --to csv)"


def export_folder(folder: Path, to: str, out: Path | None = None) -> list[Path]:
    """Write the folder's tables to ``out`` (default ``DIR/export``) as ``to`` files; returns the files."""
    if to not in FORMATS:
        raise ConfigError(f"--to: parquet or csv, got {to!r}")
    if to == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ConfigError(NO_PYARROW)
    pd = pandas()
    results = load_results(folder)
    out = out if out is not None else folder / "export"
    out.mkdir(parents=True, exist_ok=True)
    tables = {"rows": to_pandas(results.segments, results.header, "rows")}
    if len(gap_columns(results.segments)["row"]) or any(s.records.stream is not None for s in results.segments):
        tables["stream_gaps"] = to_pandas(results.segments, results.header, "stream_gaps")
    with tempfile.TemporaryDirectory() as tmp:  # the folder's own CSV writers, read back as tables
        write_stages(Path(tmp), results, build_summary(results))
        write_intervals(Path(tmp), results)
        tables["stages"] = pd.read_csv(Path(tmp) / "stages.csv")
        tables["intervals"] = pd.read_csv(Path(tmp) / "intervals.csv")
    files = []
    for name, frame in tables.items():
        path = out / f"{name}.{to}"
        if to == "parquet":
            frame.to_parquet(path, index=False)
        else:
            frame.to_csv(path, index=False)
        files.append(path)
    return files
