"""A results folder as tables: stages.csv and intervals.csv with unix times, ``LoadedResults.to_pandas()`` (every
request, every streamed gap), ``satpoint export`` and the ``model`` column across the segments of a mix."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import satpoint
from satpoint.cli.main import app
from satpoint.config import RunConfig
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import Results, Segment, append_segment, new_header
from satpoint.metrics.stream_records import attach
from satpoint.plan import Stage
from satpoint.reports.files.export import NO_PYARROW
from satpoint.reports.files.results import write_all

T0 = 1_767_225_600.0  # the first segment's started_unix
MIX = {"models": ["a", "b", "c"], "weights": [1 / 3] * 3, "spec": "uniform"}


def _rows(n: int, models: list[int] | None, streamed: bool = False) -> Records:
    rec = Records.empty(np.arange(n, dtype=np.float64) / 10.0)  # 10 rps for n/10 s
    rec.sent[:] = rec.intended
    rec.done[:] = rec.intended + 0.02
    rec.outcome[:] = Outcome.OK
    rec.status[:] = 200
    rec.outcome[-1], rec.status[-1] = Outcome.HTTP_ERROR, 503
    if models is not None:
        rec.model[:] = np.resize(models, n)
    if streamed:
        st = attach(rec)
        for i in range(n):
            st.chunk(i, rec.sent[i] + 0.005)
            st.chunk(i, rec.sent[i] + 0.008)
            if i % 2:
                st.chunk(i, rec.sent[i] + 0.015)
            st.end(i, rec.sent[i] + 0.02)
    return rec


def _folder(out: Path, *, streamed: bool = False) -> Results:
    """Two segments of a mix over three models; the second's rows all went to model 0 (it stores no column)."""
    config = {"mode": "open_loop", "rules": {"max_error_rate": 0.5}, "load": {"procs": 1}}
    target = {"url": "http://sim.invalid:8080", "model": "a", "protocol": "rest"}
    results = Results(new_header(RunConfig.from_header({"kind": "run", "config": config}), target, T0))
    results.header["mix"] = MIX
    append_segment(out, results, Segment(0, "run", [Stage(10, 0, 4)], "constant", 0, T0, _rows(40, [1, 2], streamed)))
    second = Segment(1, "run", [Stage(10, 0, 2)], "constant", 0, T0 + 100, _rows(20, [0], streamed))
    append_segment(out, results, second)
    write_all(out, results, html=False)
    return results


def test_the_model_column_stays_aligned_when_a_segment_stored_none(tmp_path: Path) -> None:
    _folder(tmp_path)
    loaded = satpoint.load(tmp_path)
    assert "model" not in loaded.segments[1].records.columns()  # all model 0: the rows file has no column
    rows = loaded.rows()
    assert len(rows["model"]) == len(rows["intended"]) == 60
    assert rows["model"][:40].tolist() == [1, 2] * 20 and rows["model"][40:].tolist() == [0] * 20
    frame = loaded.to_pandas()
    assert frame.groupby("segment")["model_name"].unique().map(sorted).to_dict() == {0: ["b", "c"], 1: ["a"]}


def test_rows_carry_unix_times_latency_and_outcome_names(tmp_path: Path) -> None:
    _folder(tmp_path)
    frame = satpoint.load(tmp_path).to_pandas()
    assert list(frame.columns[:6]) == ["segment", "row", "intended", "sent", "done", "intended_unix"]
    first = frame[frame.segment == 1].iloc[0]
    assert first["intended"] == 0.0 and first["row"] == 0
    # the run clock's zero is started_unix plus the generator's start lead (0.2 s for one process)
    assert first["intended_unix"] == pytest.approx(T0 + 100 + 0.2)
    assert frame["latency_ms"].iloc[0] == pytest.approx(20.0)
    assert frame["outcome"].value_counts()[["ok", "http_error"]].tolist() == [58, 2]
    assert satpoint.Outcome.HTTP_ERROR.name.lower() in frame["outcome"].cat.categories


def test_stream_gaps_are_a_table_of_their_own(tmp_path: Path) -> None:
    _folder(tmp_path, streamed=True)
    loaded = satpoint.load(tmp_path)
    rows, gaps = loaded.to_pandas(), loaded.to_pandas("stream_gaps")
    assert rows["stream_gaps"].tolist()[:2] == [1, 2]  # two chunks one gap, three chunks two
    assert len(gaps) == rows["stream_gaps"].sum() == 30 * 1 + 30 * 2
    odd = gaps[(gaps.segment == 0) & (gaps.row == 1)]
    assert odd["gap"].tolist() == [0, 1] and odd["gap_ms"].tolist() == pytest.approx([3.0, 7.0])
    joined = gaps.merge(rows, on=["segment", "row"])
    assert len(joined) == len(gaps) and set(joined["model_name"]) == {"a", "b", "c"}
    with pytest.raises(ValueError, match="rows, stream_gaps"):
        loaded.to_pandas("segments")


def test_stages_csv_has_one_row_per_stage_and_intervals_csv_unix_seconds(tmp_path: Path) -> None:
    _folder(tmp_path)
    with (tmp_path / "stages.csv").open() as f:
        stages = list(csv.DictReader(f))
    assert [(s["segment"], s["target_rps"]) for s in stages] == [("0", "10"), ("1", "10")]
    assert {"latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_p999_ms", "verdict"} <= set(stages[0])
    assert stages[0]["errors"] == "1" and float(stages[0]["window_start_unix"]) == pytest.approx(
        T0 + 0.2 + float(stages[0]["window_start_s"])
    )
    with (tmp_path / "intervals.csv").open() as f:
        iv = list(csv.DictReader(f))
    second = next(r for r in iv if r["segment"] == "1" and r["second"] == "1")
    assert float(second["second_unix"]) == pytest.approx(T0 + 100 + 0.2 + 1)


def test_report_rewrites_stages_csv(tmp_path: Path) -> None:
    _folder(tmp_path)
    (tmp_path / "stages.csv").unlink()
    satpoint.report([tmp_path])
    assert (tmp_path / "stages.csv").read_text().startswith("segment,stage,target_rps,offered_rps,throughput_rps")


def test_export_writes_the_tables_as_csv_and_parquet(tmp_path: Path) -> None:
    _folder(tmp_path / "run", streamed=True)
    r = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--to", "csv", "--out", str(tmp_path / "csv")])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "csv").iterdir()) == [
        "intervals.csv",
        "rows.csv",
        "stages.csv",
        "stream_gaps.csv",
    ]
    rows = pd.read_csv(tmp_path / "csv" / "rows.csv")
    assert len(rows) == 60 and set(rows["outcome"]) == {"ok", "http_error"}
    pytest.importorskip("pyarrow")
    r = CliRunner().invoke(app, ["export", str(tmp_path / "run")])  # parquet, into DIR/export
    assert r.exit_code == 0, r.output
    back = pd.read_parquet(tmp_path / "run" / "export" / "rows.parquet")
    assert back["intended_unix"].tolist() == pytest.approx(rows["intended_unix"].tolist())


def test_parquet_without_pyarrow_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _folder(tmp_path)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    r = CliRunner().invoke(app, ["export", str(tmp_path), "--to", "parquet"])
    assert r.exit_code == 2, r.output
    assert NO_PYARROW in r.output and "satpoint[export]" in r.output and not (tmp_path / "export").exists()
