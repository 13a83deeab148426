"""The rows' model column (a model mix): kept through selections, merges, the closed loop's growth and the
row checkpoints (a crash keeps each row's model); older checkpoint frames read as model 0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import satpoint.metrics.checkpoint as ck
from satpoint.engine.closed_loop import _grow
from satpoint.metrics.records import Outcome, Records


def rows(n: int = 40) -> Records:
    rec = Records.empty(np.arange(n, dtype=np.float64) / 20.0)
    rec.sent[:] = rec.intended
    rec.done[:] = rec.intended + 0.01
    rec.outcome[:] = Outcome.OK
    rec.status[:] = 200
    rec.model[:] = np.arange(n) % 7
    return rec


def test_the_column_follows_its_rows() -> None:
    rec = rows()
    assert rec.select(np.arange(40) % 2 == 1).model.tolist() == (np.arange(1, 40, 2) % 7).tolist()
    merged = Records.merge([rec.select(slice(0, 40, 2)), rec.select(slice(1, 40, 2))])
    assert merged.model.tolist() == rec.model.tolist()
    assert Records.from_columns(rec.columns()).model.tolist() == rec.model.tolist()
    _grow(rec, 50)
    assert len(rec.model) == 50 and rec.model[40:].tolist() == [0] * 10
    with pytest.raises(ValueError, match="model"):
        Records(rec.intended, rec.sent, rec.done, rec.outcome, rec.status, rec.waited, model=np.zeros(3, np.int16))


def test_a_checkpoint_keeps_each_rows_model_and_older_frames_read_as_model_0(tmp_path: Path) -> None:
    rec = rows()
    t0 = 100.0
    rec.sent += t0  # live columns hold raw clock values
    rec.done += t0
    writer = ck.RowCheckpoint(tmp_path / "s.rows")
    writer.write(rec, 30, t0, t0 + 1.6)  # cut off: no final frame
    writer.close()
    got = ck.read_shard_file(tmp_path / "s.rows")
    assert got is not None and not got.final
    assert got.records.model.tolist() == (np.arange(30) % 7).tolist()
    old = np.zeros(2, dtype=ck.ROW_V2)  # a frame from before the column (magic SPC2)
    old["idx"] = [0, 1]
    old["intended"] = [0.0, 0.1]
    old["done"] = [0.01, 0.11]
    header = ck._HEADER.pack(b"SPC2", ck._FINAL, len(old), 1.0, 2)
    (tmp_path / "old.rows").write_bytes(header + old.tobytes())
    back = ck.read_shard_file(tmp_path / "old.rows")
    assert back is not None and back.records.model.tolist() == [0, 0]
    assert back.records.intended.tolist() == [0.0, 0.1]
