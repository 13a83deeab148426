"""End-to-end: ``run --stream`` against ``sim --stream`` over REST (real sockets, server-sent events)."""

from __future__ import annotations

from pathlib import Path

import pytest

from satpoint import api
from satpoint.endpoints.spec import Target
from satpoint.metrics.results import load_results
from satpoint.servers.sim.process import SimServer

pytestmark = pytest.mark.slow


def test_a_streamed_run_measures_the_sims_first_chunk_and_gaps(tmp_path: Path) -> None:
    # 4 slots x (20 ms to the first chunk + 9 gaps of 5 ms): 61.5 streams/s; 30/s is about half of it
    stream = ["--stream", "--stream-first-ms", "20", "--stream-gap-ms", "5", "--stream-chunks", "10"]
    with SimServer(slots=4, extra_args=stream) as sim:
        result = api.run(
            Target(sim.url, "sim", stream=True), ["30:0.5:2.5"], thresholds=["gap_p99<50ms"], out=tmp_path, html=False
        )
    stage = result.summary.stages[0]
    assert stage.verdict == "stable", stage.reasons
    assert stage.stream is not None
    assert stage.stream.ttfc_ms.p50 == pytest.approx(20, abs=3)  # loose: a shared CI host; RESULTS.md has the figure
    assert stage.stream.gap_ms.p50 == pytest.approx(5, abs=2)
    assert stage.stream.chunks_per_request == 10
    assert result.summary.thresholds[0].passed
    rec = load_results(tmp_path).segments[0].records  # the stream columns survive the results folder
    assert rec.stream is not None and int(rec.stream.chunks[rec.ok_mask()].min()) == 10
