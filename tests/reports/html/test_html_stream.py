"""The report's streams section, from a results folder of the offline ``sim --stream`` twin."""

from __future__ import annotations

from pathlib import Path

from satpoint.config import RunConfig
from satpoint.engine.schedule import due_times
from satpoint.metrics.results import Results, Segment, append_segment, load_results, new_header
from satpoint.plan import Stage
from satpoint.reports.files.results import write_all
from satpoint.reports.html.report import load_folders
from satpoint.reports.html.stream import has_stream, stream_section, timeline_rows
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline_stream import simulate_stream


def test_a_streamed_folder_gets_its_section_and_a_timeline_of_whole_streams(tmp_path: Path) -> None:
    stages = [Stage(20, 1, 3), Stage(80, 1, 3)]
    sim = SimConfig(slots=4, stream=True, stream_first_ms=20, stream_gap_ms=5, stream_chunks=10)
    header = new_header(
        RunConfig(), {"url": "http://sim.invalid", "model": "sim", "protocol": "rest", "stream": True}, 0.0
    )
    results = Results(header)
    append_segment(
        tmp_path, results, Segment(0, "run", stages, "constant", 0, 0.0, simulate_stream(due_times(stages), sim))
    )
    summary = write_all(tmp_path, load_results(tmp_path), html=False)
    assert summary["target"]["stream"] is True
    (f,) = load_folders([tmp_path])
    assert has_stream(f)
    html = "\n".join(stream_section([f]))
    assert 'id="stream"' in html and "stream-timeline-0" in html and "<td>saturated</td>" in html
    rows = timeline_rows(f, rows=5)
    assert len(rows) == 5
    _due, chunks, end = rows[0]
    assert len(chunks) == 10 and abs(chunks[0] - 20) < 1e-3 and abs(chunks[-1] - end) < 1e-3  # the last chunk ends it
