"""``scale.html``: the timeline of a scale test on one time axis, its seconds over the objective shaded."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from satpoint.analysis.scale import ReplicaPoint, ScalePhases, scale_block
from satpoint.reports.html.scale import timeline_figure, write_scale_html


def _block() -> dict[str, object]:
    intended = np.arange(200, dtype=np.float64) / 10
    lat = np.where((intended >= 5) & (intended < 8), 2.0, 0.01)
    lat[120] = np.inf  # one failure at 12 s
    points = [ReplicaPoint(t + 0.5, 3.0 if t >= 8 else 1.0, 3.0 if t >= 5 else 1.0) for t in range(20)]
    return scale_block(intended, lat, ScalePhases(5.0, 15.0, 20.0, 10.0, 50.0, 0.0), "p99", 500.0, points,
                       source="test")  # fmt: skip


def test_the_page_draws_load_latency_and_replicas_with_the_seconds_over_shaded(tmp_path: Path) -> None:
    block = _block()
    fig = timeline_figure(block)
    names = [tr.name for tr in fig.data]
    assert names == ["offered", "answered OK", "failed", "p50", "p99", "replicas ready", "replicas desired"]
    shaded = [s for s in fig.layout.shapes if s.type == "rect"]
    assert block["seconds_over_slo"] == 4
    assert {s.x0 for s in shaded} == {5, 6, 7, 12}  # each second over, shaded across the three rows
    page = write_scale_html(block, tmp_path / "scale.html").read_text()
    assert 'id="scale-timeline"' in page and "time to recover" in page
