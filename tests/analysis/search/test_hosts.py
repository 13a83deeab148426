"""Generator hosts over a run's segments: summary.generator.ray, and its terminal lines."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from satpoint.analysis.search.hosts import hosts_summary
from satpoint.analysis.summary.model import RayGenerators
from satpoint.reports.terminal.console import hosts_lines


def _host(i: int, requests: int, cpu: float, lags: list[float | None], lost: str | None = None) -> dict[str, Any]:
    clock = {"offset_s": 0.001 * i, "uncertainty_s": 0.0002 * (i + 1)}
    return {"index": i, "host": f"gen-{i}", "node_id": f"n{i}", "requests": requests, "cpu_s": cpu} | {
        "clock": clock,
        "stage_lag_p99_ms": lags,
        "lost": lost,
    }


def test_the_hosts_are_summed_over_segments_with_their_worst_lag_and_losses() -> None:
    blocks = [
        {"address": "auto", "procs_per_host": 2, "start_skew_s": 2e-5, "start_skew_bound_s": 7e-4, "lost_hosts": 0,
         "hosts": [_host(0, 1000, 0.05, [0.2, 0.4]), _host(1, 1000, 0.07, [0.3, None])]},
        {"address": "auto", "procs_per_host": 2, "start_skew_s": 4e-5, "start_skew_bound_s": 9e-4, "lost_hosts": 1,
         "hosts": [_host(0, 500, 0.02, [1.5]), _host(1, 0, 0.0, [], lost="while running: its actor died")]},
    ]  # fmt: skip
    results = SimpleNamespace(segments=[SimpleNamespace(index=i, generator={"ray": b}) for i, b in enumerate(blocks)])
    got = hosts_summary(results)  # type: ignore[arg-type]
    assert got is not None
    model = RayGenerators.model_validate(got)  # the typed mirror reads it
    assert model.segments == 2 and model.lost_hosts == 1
    assert model.start_skew_max_s == 4e-5 and model.start_skew_bound_max_s == 9e-4
    h0, h1 = model.hosts
    assert (h0.requests, h0.cpu_us_per_request, h0.lag_p99_max_ms) == (1500, 46.67, 1.5)
    assert h1.lost_segments[0].segment == 1 and "actor died" in (h1.lost_segments[0].why or "")
    assert h1.clock_uncertainty_max_s == 0.0004
    lines = hosts_lines(got)
    assert lines[0].startswith("generator hosts: 2 on Ray (auto), 2 process(es) each; start skew 40 µs (measured)")
    assert "LOST in segment(s) [1]" in lines[2]
    assert hosts_summary(SimpleNamespace(segments=[SimpleNamespace(index=0, generator={})])) is None  # type: ignore[arg-type]
