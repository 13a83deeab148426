"""Triton's statistics (``/v2/models/M/stats``, recorded from Triton 2.51) as scrape samples, and what two
reads of them say of the time between: queue and compute ms per request, the batch size achieved."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from satpoint.analysis.server.server_side import interpret, source_of
from satpoint.metrics.observed import Scrape
from satpoint.observe.triton_stats import is_stats_url, stats_samples

STATS = json.loads((Path(__file__).parent.parent / "fixtures" / "triton" / "stats.json").read_text())
URL = "http://127.0.0.1:8000/v2/models/iris/stats"


def later(doc: dict[str, Any], requests: int, rows_per_request: int, batches: int, queue_ms: float) -> dict[str, Any]:
    """``doc`` after ``requests`` more requests of ``rows_per_request`` rows executed in ``batches`` model
    calls, each request queued ``queue_ms`` and computing 1 ms in the model."""
    out = copy.deepcopy(doc)
    m = out["model_stats"][0]
    m["inference_count"] += requests * rows_per_request
    m["execution_count"] += batches
    s = m["inference_stats"]
    for phase, ms in (("success", queue_ms + 1.0), ("queue", queue_ms), ("compute_infer", 1.0)):
        s[phase]["count"] += requests
        s[phase]["ns"] += int(requests * ms * 1e6)
    for phase in ("compute_input", "compute_output"):
        s[phase]["count"] += requests
    return out


def scrape(doc: dict[str, Any], t: float) -> Scrape:
    return Scrape(t, 1e9 + t, URL, "tick", tuple(stats_samples(doc)))


def test_stats_urls_are_recognised() -> None:
    assert is_stats_url(URL)
    assert is_stats_url("http://h:1/prefix/v2/models/m/versions/2/stats?token=x")
    assert not is_stats_url("http://h:8002/metrics")
    assert not is_stats_url("http://h:1/stats")


def test_recorded_answer_as_samples() -> None:
    samples = {n: v for n, labels, v in stats_samples(STATS) if labels == {"model": "iris", "version": "1"}}
    assert samples["triton_stats_inference_count"] == 4
    assert samples["triton_stats_execution_count"] == 2
    assert samples["triton_stats_queue_ns"] == 237686
    assert samples["triton_stats_compute_infer_count"] == 2
    with pytest.raises(ValueError, match="model_stats"):
        stats_samples({"error": "This API is restricted"})


def test_two_reads_give_batch_size_and_times_per_request() -> None:
    # 400 one-row requests executed in 50 batches (8 per batch), each queued 2.5 ms
    a, b = scrape(STATS, 10.0), scrape(later(STATS, 400, 1, 50, 2.5), 20.0)
    assert source_of(b) == "triton_stats"
    got = interpret(a, b, "iris")
    assert got["requests"] == 400 and got["rps"] == 40.0
    assert got["inferences"] == 400 and got["executions"] == 50
    assert got["batch_size"] == 8.0
    assert got["queue_ms"] == pytest.approx(2.5)
    assert got["compute_infer_ms"] == pytest.approx(1.0)
    assert got["compute_input_ms"] == 0.0 and got["compute_output_ms"] == 0.0
    assert got["compute_ms"] == pytest.approx(1.0)
    assert got["mean_latency_ms"] == pytest.approx(3.5)
    assert got["failures"] == 0


def test_batch_size_counts_rows_not_requests() -> None:
    # 100 requests of 4 rows each, 25 executions: 16 rows per model call
    got = interpret(scrape(STATS, 0.0), scrape(later(STATS, 100, 4, 25, 1.0), 5.0), "iris")
    assert got["batch_size"] == 16.0 and got["requests"] == 100


def test_another_models_statistics_are_left_out() -> None:
    got = interpret(scrape(STATS, 0.0), scrape(later(STATS, 10, 1, 10, 1.0), 5.0), "other-model")
    assert got["requests"] is None and got["batch_size"] is None


def test_a_restart_between_reads_gives_no_figures() -> None:
    restarted = copy.deepcopy(STATS)
    restarted["model_stats"][0]["inference_count"] = 0
    restarted["model_stats"][0]["execution_count"] = 0
    got = interpret(scrape(later(STATS, 10, 1, 10, 1.0), 0.0), scrape(restarted, 5.0), "iris")
    assert got["batch_size"] is None
