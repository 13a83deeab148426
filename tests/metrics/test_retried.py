"""The ``retried`` column: carried by every Records operation, optional in old folders, counted per stage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from satpoint.analysis.summary.build import build_summary
from satpoint.analysis.summary.model import parse_summary
from satpoint.config import RunConfig
from satpoint.engine.closed_loop import _grow
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import RESULTS_FILE, Results, Segment, append_segment, load_results, new_header
from satpoint.metrics.stats import stage_metrics
from satpoint.plan import Stage, spans


def rows(n: int = 100, rate: float = 20.0) -> Records:
    rec = Records.empty(np.arange(n, dtype=np.float64) / rate)
    rec.sent[:] = rec.intended
    rec.done[:] = rec.intended + 0.01
    rec.outcome[:] = Outcome.OK
    rec.status[:] = 200
    rec.retried[::10] = True
    return rec


def test_constructed_without_it_every_row_is_not_retried() -> None:
    rec = Records(np.zeros(3), np.zeros(3), np.zeros(3), np.zeros(3, np.int8), np.zeros(3, np.int32), np.zeros(3, bool))
    assert rec.retried.dtype == np.bool_ and rec.retried.tolist() == [False] * 3
    with pytest.raises(ValueError, match="retried"):
        Records(
            np.zeros(3),
            np.zeros(3),
            np.zeros(3),
            np.zeros(3, np.int8),
            np.zeros(3, np.int32),
            np.zeros(3, bool),
            np.zeros(2, bool),
        )


def test_select_shift_merge_and_grow_carry_it() -> None:
    rec = rows(20)
    assert rec.select(slice(0, 11)).retried.sum() == 2
    assert rec.select(rec.retried).retried.all()
    assert (rec.shifted(5.0).retried == rec.retried).all()
    merged = Records.merge([rec.select(slice(0, 10)), rec.select(slice(10, 20))])
    assert (merged.retried == rec.retried).all()
    _grow(rec, 30)
    assert len(rec.retried) == 30 and not rec.retried[20:].any()
    assert {len(c) for c in rec.columns().values()} == {30}


def test_a_folder_written_before_the_column_existed_loads(tmp_path: Path) -> None:
    results = Results(new_header(RunConfig(), {"url": "http://x", "model": "m", "protocol": "rest"}, 1.0))
    seg = Segment(0, "run", [Stage(20.0, 0.0, 5.0)], "constant", 0, 1.0, rows())
    append_segment(tmp_path, results, seg)
    npz = tmp_path / "segment-000.npz"
    with np.load(npz) as cols:
        old = {k: cols[k] for k in cols.files if k != "retried"}  # what an older satpoint wrote
    np.savez_compressed(npz, **old)  # type: ignore[arg-type]
    assert (tmp_path / RESULTS_FILE).exists()
    loaded = load_results(tmp_path)
    assert not loaded.segments[0].records.retried.any()
    assert all(s["retries"] == 0 for s in build_summary(loaded)["stages"])


def test_retries_are_counted_per_stage_and_in_the_summary(tmp_path: Path) -> None:
    rec = rows(200)  # 10 s at 20 rps, a row in ten retried
    (sp,) = spans([Stage(20.0, 0.0, 10.0)])
    m = stage_metrics(rec, sp)
    in_window = (rec.intended >= m.window_start_s) & (rec.intended < m.window_end_s)
    assert m.retries == int(np.count_nonzero(rec.retried & in_window)) > 0
    assert m.error_rate == 0  # a resend that succeeded is no error

    results = Results(new_header(RunConfig(), {"url": "http://x", "model": "m", "protocol": "rest"}, 1.0))
    append_segment(tmp_path, results, Segment(0, "run", [Stage(20.0, 0.0, 10.0)], "constant", 0, 1.0, rec))
    doc = build_summary(load_results(tmp_path))
    assert doc["stages"][0]["retries"] == m.retries
    assert parse_summary(doc).stages[0].retries == m.retries


def test_checkpoints_keep_it_and_older_frames_still_read(tmp_path: Path) -> None:
    from satpoint.metrics import checkpoint as ck

    t0 = 1000.0
    rec = rows(50)
    rec.sent += t0  # live columns hold raw clock values
    rec.done += t0
    writer = ck.RowCheckpoint(tmp_path / "s.rows")
    writer.write(rec, 50, t0, t0 + 3.0, final=True)
    writer.close()
    got = ck.read_shard_file(tmp_path / "s.rows")
    assert got is not None and got.final
    assert (got.records.retried == rec.retried).all() and got.records.retried.any()

    # a frame written before the column existed (magic SPCK, 38-byte rows): every row reads as not retried
    old = np.zeros(3, dtype=ck.ROW_V1)
    old["idx"] = [0, 1, 2]
    old["intended"] = [0.0, 0.1, 0.2]
    old["done"] = [0.01, 0.11, 0.21]
    old["status"] = 200
    header = ck._HEADER.pack(b"SPCK", ck._FINAL, len(old), 1.0, 3)
    (tmp_path / "old.rows").write_bytes(header + old.tobytes())
    back = ck.read_shard_file(tmp_path / "old.rows")
    assert back is not None and len(back.records) == 3 and not back.records.retried.any()
    assert back.records.intended.tolist() == [0.0, 0.1, 0.2]
