"""The terminal's stream line per stage."""

from __future__ import annotations

from satpoint.reports.terminal.stream import stream_line


def test_a_streamed_stage_gets_its_line_and_a_plain_one_none() -> None:
    stage = {
        "stream": {
            "ttfc_ms": {"p50": 20.1234, "p99": 2098.5},
            "gap_ms": {"p50": 5.12, "p99": None},
            "chunks_per_s": 615.57,
            "requests_per_s": 61.56,
            "chunks_per_request": 10.0,
        }
    }
    assert stream_line(3, stage) == (
        "stream stage 3: TTFC p50 20.1 p99 2098.5 ms · gap p50 5.12 p99 - ms · 615.6 chunks/s · 61.6 streams/s"
        " · 10.0 chunks/stream"
    )
    assert stream_line(1, {"latency_ms": {}}) is None
