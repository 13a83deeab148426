"""Stream columns: stamping chunks, gaps kept exactly, rows picked and shards merged, folders and checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from satpoint.metrics.checkpoint import RowCheckpoint, read_shard_file
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.stream_records import StreamRecords, attach

T0 = 1000.0


def _stamped() -> Records:
    """Five rows; rows 1 and 3 streamed (row 1 given up while open at 10.010 s), on the raw clock."""
    rec = Records.empty(np.arange(5.0))
    st = attach(rec)
    st.chunk(1, T0 + 10.0)
    st.chunk(3, T0 + 10.5)  # streams interleave
    st.chunk(1, T0 + 10.002)
    st.chunk(1, T0 + 10.007)
    st.chunk(3, T0 + 10.6)
    st.end(3, T0 + 10.6)  # row 3 ends first: its gaps come first in the flat array
    st.end(1, T0 + 10.010, open_gap=True)
    st.end(1, T0 + 11.0, open_gap=True)  # a second end does nothing
    st.end(0, T0 + 11.0)  # nor does ending a row without chunks
    return rec


def test_stamper_keeps_every_gap_in_microseconds_contiguous_per_row() -> None:
    s = _stamped().stream
    assert s is not None
    assert s.chunks.tolist() == [0, 3, 0, 2, 0]
    assert s.first_s[1] == T0 + 10.0 and s.last_s[1] == T0 + 10.007
    assert np.isnan(s.first_s[0])
    assert s.row_gaps(3).tolist() == [100_000]
    assert s.row_gaps(1).tolist() == [2_000, 5_000, 3_000]  # the open gap (10.007 -> 10.010) is the third
    assert s.row_gaps(0).tolist() == []
    assert s.max_gap_s[1] == 0.005 and s.max_gap_s[3] == 0.1
    assert np.isnan(s.max_gap_s[0])


def test_select_gathers_the_picked_rows_gaps_in_row_order() -> None:
    rec = _stamped()
    picked = rec.select(np.array([3, 1]))
    assert picked.stream is not None
    assert picked.stream.gaps_us.tolist() == [100_000, 2_000, 5_000, 3_000]
    assert picked.stream.row_gaps(1).tolist() == [2_000, 5_000, 3_000]
    by_mask = rec.select(rec.intended >= 2)
    assert by_mask.stream is not None and by_mask.stream.gaps_us.tolist() == [100_000]
    assert rec.stream is not None
    assert rec.stream.gaps_of(slice(None)).tolist() == [2_000, 5_000, 3_000, 100_000]


def test_merge_concatenates_shards_and_fills_a_shard_without_streams() -> None:
    a = _stamped()
    b = Records.empty(np.array([0.5, 1.5]))
    merged = Records.merge([a, b])
    s = merged.stream
    assert s is not None and len(s) == 7
    assert merged.intended.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]
    assert s.chunks.tolist() == [0, 0, 3, 0, 0, 2, 0]
    assert s.gaps_us.tolist() == [2_000, 5_000, 3_000, 100_000]
    assert Records.merge([b, b]).stream is None


def test_shifted_moves_chunk_times_not_gaps() -> None:
    rec = _stamped().shifted(-T0)
    assert rec.stream is not None
    assert rec.stream.first_s[3] == 10.5
    assert rec.stream.row_gaps(3).tolist() == [100_000]


def test_columns_round_trip_and_folders_without_streams_load_unchanged() -> None:
    rec = _stamped()
    back = Records.from_columns(rec.columns())
    assert back.stream is not None
    assert back.stream.gap_start.tolist() == [-1, 0, -1, 3, -1]  # stored in row order
    assert back.stream.row_gaps(1).tolist() == [2_000, 5_000, 3_000]
    plain = Records.empty(np.arange(3.0))
    assert "stream_chunks" not in plain.columns()
    assert Records.from_columns(plain.columns()).stream is None


def test_gaps_grow_past_the_initial_room() -> None:
    s = StreamRecords.empty(2)
    st = attach(
        Records(
            np.zeros(2),
            np.zeros(2),
            np.zeros(2),
            np.zeros(2, np.int8),
            np.zeros(2, np.int32),
            np.zeros(2, np.bool_),
            stream=s,
        )
    )
    for i in range(101):
        st.chunk(0, i * 0.001)
    st.end(0, 0.1)
    assert s.row_gaps(0).tolist() == [1_000] * 100


def test_checkpoint_keeps_the_stream_columns_of_finished_rows(tmp_path: Path) -> None:
    rec = _stamped()
    rec.sent[[1, 3]] = T0 + np.array([1.0, 3.0])
    rec.done[3], rec.outcome[3], rec.status[3] = T0 + 10.6, Outcome.OK, 200
    cp = RowCheckpoint(tmp_path / "x.rows")
    cp.write(rec, 4, T0, T0 + 11.0)
    rec.done[1], rec.outcome[1] = T0 + 10.01, Outcome.TIMEOUT
    cp.write(rec, 5, T0, T0 + 12.0, final=True)
    cp.close()
    got = read_shard_file(tmp_path / "x.rows")
    assert got is not None
    s = got.records.stream
    assert s is not None
    assert s.chunks.tolist() == [0, 3, 0, 2, 0]
    assert s.first_s[3] == 10.5  # on the run clock
    assert s.row_gaps(1).tolist() == [2_000, 5_000, 3_000]
    assert s.row_gaps(3).tolist() == [100_000]
