"""Chunks that one read carried together: a chunk stamped at the same instant as its stream's previous one
is counted as coalesced (its gap is the read's, 0, not the server's), kept through the row operations and
the results folder, and a stage's stream figures say which share of their gaps that is."""

from __future__ import annotations

import numpy as np

from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.stream_records import COALESCED_COLUMN, StreamRecords, attach
from satpoint.metrics.stream_stats import stream_window
from satpoint.reports.terminal.stream import stream_line


def _rec() -> Records:
    """Two streams: row 0 read once per chunk, row 1 with three chunks in one read after its first."""
    rec = Records.empty(np.array([0.0, 0.0]))
    st = attach(rec)
    for t in (0.010, 0.020, 0.030, 0.040):
        st.chunk(0, t)
    for t in (0.010, 0.050, 0.050, 0.050):  # a late read found three chunks waiting
        st.chunk(1, t)
    st.end(0, 0.04)
    st.end(1, 0.05)
    rec.sent[:] = 0.0
    rec.done[:] = [0.041, 0.051]
    rec.outcome[:] = int(Outcome.OK)
    return rec


def test_a_chunk_in_the_same_read_as_the_previous_one_is_coalesced() -> None:
    rec = _rec()
    s = rec.stream
    assert s is not None and s.coalesced.tolist() == [0, 2]
    assert s.row_gaps(1).tolist() == [40_000, 0, 0]  # what the read times alone say
    assert s.select(np.array([1])).coalesced.tolist() == [2]
    assert StreamRecords.concat([s, s]).coalesced.tolist() == [0, 2, 0, 2]
    cols = s.columns()
    back = StreamRecords.from_columns(cols)
    assert back is not None and back.coalesced.tolist() == [0, 2]
    del cols[COALESCED_COLUMN]  # a folder written before the column
    older = StreamRecords.from_columns(cols)
    assert older is not None and older.coalesced.tolist() == [0, 0]


def test_the_stage_figures_say_which_share_of_the_gaps_were_read_together() -> None:
    rec = _rec()
    fig = stream_window(rec, rec, -1.0, 1.0)
    assert fig is not None and fig["coalesced_gaps"] == 2 and fig["coalesced_share"] == round(2 / 6, 4)
    line = stream_line(1, {"stream": fig})
    assert line is not None and line.endswith("· 33 % of gaps read together (late reads or chunks sent together)")
