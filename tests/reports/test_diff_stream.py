"""``satpoint diff`` of streamed folders (``--stream``): time to first chunk and gaps compared as latency is,
and a plain note when only one side streamed.  Folders of the offline ``sim --stream`` twin (no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from satpoint.analysis.diff.compare import diff_folders
from satpoint.analysis.diff.tolerances import DEFAULT_TAIL_TOLERANCE
from satpoint.config import RunConfig
from satpoint.engine.schedule import due_times
from satpoint.metrics.results import Results, Segment, append_segment, load_results, new_header
from satpoint.plan import Stage
from satpoint.reports.files.diff import load_folder
from satpoint.reports.files.results import write_all
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate
from satpoint.servers.sim.offline_stream import simulate_stream

STAGES = [Stage(20, 1, 6)]


def make_run(out: Path, first_ms: float | None) -> dict[str, Any]:
    """A one-stage run at 20 rps on 4 slots: streamed (first chunk after ``first_ms``, then 9 more every 5 ms)
    or, with None, answered whole after 65 ms (the streamed answer's length)."""
    streamed = first_ms is not None
    target = {"url": "http://sim.invalid", "model": "sim", "protocol": "rest", "stream": streamed}
    results = Results(new_header(RunConfig(), target, 0.0))
    due = due_times(STAGES)
    if first_ms is not None:
        cfg = SimConfig(slots=4, stream=True, stream_first_ms=first_ms, stream_gap_ms=5, stream_chunks=10)
        rows = simulate_stream(due, cfg)
    else:
        rows = simulate(due, SimConfig(slots=4, service_ms=65.0, dist="const"))
    append_segment(out, results, Segment(0, "run", STAGES, "constant", 0, 0.0, rows))
    return write_all(out, load_results(out), html=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff-stream")
    out = {}
    for name, first in (("base", 20.0), ("slower_start", 30.0), ("plain", None)):
        out[name] = root / name
        make_run(out[name], first)
    return out


def test_two_streamed_runs_compare_ttfc_and_gaps(runs: dict[str, Path]) -> None:
    """The first chunk 10 ms later, the gaps the same: TTFC regressed (p99 judged with the tail tolerance),
    gaps did not change, and each side's figure is the one summary.json reports for the stage."""
    doc = diff_folders(load_folder(runs["base"]), load_folder(runs["slower_start"]))
    by = {m.metric: m for m in doc.metrics}
    assert by["ttfc_p50_ms"].verdict == "regression"
    # a p99 needs 10 / (1 - 0.99) = 1 000 rows a side: these stages have fewer
    assert by["ttfc_p99_ms"].verdict == "inconclusive" and "fewer than the 1000" in by["ttfc_p99_ms"].text
    assert by["ttfc_p50_ms"].tolerance == 0.05 and by["ttfc_p99_ms"].tolerance == DEFAULT_TAIL_TOLERANCE
    assert by["gap_p50_ms"].verdict == "no_change"
    assert by["gap_p99_ms"].verdict == "inconclusive"  # 864 gaps a side, fewer than a p99 needs
    assert by["ttfc_p50_ms"].better == "lower" and by["ttfc_p50_ms"].point == "20 rps"
    stage = load_folder(runs["base"]).doc["stages"][0]["stream"]
    assert by["ttfc_p50_ms"].base.value == pytest.approx(stage["ttfc_ms"]["p50"], abs=1e-3)
    assert by["gap_p99_ms"].base.value == pytest.approx(stage["gap_ms"]["p99"], abs=1e-3)
    assert "gaps" in by["gap_p50_ms"].base.detail  # the gap figures count gaps, not requests
    assert doc.stream == {"base": True, "new": True, "compared": True}
    assert doc.verdict == "regression"


def test_only_one_side_streamed_is_refused(runs: dict[str, Path]) -> None:
    """Latency to the last chunk on one side, to the whole answer on the other: not the same load."""
    with pytest.raises(ValueError, match=r"measured different loads.*stream True \(base\) vs False \(new\)"):
        diff_folders(load_folder(runs["base"]), load_folder(runs["plain"]))
