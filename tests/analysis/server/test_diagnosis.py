"""The diagnosis explains only a saturation that happened: a search that never drove the server to it (the
generator, its connection cap, the budget or max_rps was the limit) says so and nothing more; batching is
called idle only on a server that batches."""

from __future__ import annotations

from pathlib import Path

from satpoint.analysis.server.diagnosis import diagnose
from satpoint.config import FindOptions
from tests.analysis.server.test_server_side import URL, _stage, find_summary
from tests.analysis.sweep.test_sweep_bounds import QUICK, offline_find


def test_a_generator_limited_search_is_not_explained_as_a_saturation() -> None:
    # stable at the answer, generator-limited above it: the server was never pushed to its limit
    summary = find_summary(
        [_stage(0, 500, "stable", 0.3), _stage(1, 1000, "generator_limited", 0.35)],
        find_notes=["generator-limited: the generator fell behind before the server saturated"],
    )
    lines = diagnose(summary, {})
    assert [d["kind"] for d in lines] == ["not_saturated"]
    assert "was not driven to saturation" in lines[0]["text"] and "generator" in lines[0]["text"]
    assert "concurrency limit" not in lines[0]["text"]
    capped = find_summary([_stage(0, 500, "stable", 0.3), _stage(1, 1000, "client_limited", 0.3)])
    (line,) = diagnose(capped, {})
    assert line["kind"] == "not_saturated" and "--max-inflight" in line["text"]


def test_a_search_cut_by_its_budget_or_max_rps_says_so(tmp_path: Path) -> None:
    """Real summaries of searches on the offline simulator (800 rps) that never overloaded it."""
    budget = offline_find(tmp_path / "budget", 8, FindOptions(budget_s=17, precision=0.1, **QUICK))  # type: ignore[arg-type]
    assert budget["unstable_rps"] is None and not budget["search"]["finished"]
    (line,) = diagnose(budget, {})
    assert line["kind"] == "not_saturated" and "budget" in line["text"]
    capped = offline_find(tmp_path / "max", 8, FindOptions(budget_s=1e9, precision=0.1, max_rps=300, **QUICK))  # type: ignore[arg-type]
    (line,) = diagnose(capped, {})
    assert line["kind"] == "not_saturated" and "max_rps" in line["text"]


def test_only_saturated_stages_count_as_at_saturation() -> None:
    # the stable stage at the answer used 0.95 cores; the saturated one above it 0.5: the saturated one speaks
    lines = diagnose(find_summary([_stage(0, 500, "stable", 0.95), _stage(1, 600, "saturated", 0.5)]), {})
    assert lines[0]["kind"] == "not_cpu_bound" and lines[0]["evidence"]["cpu_cores"] == 0.5
    # under an SLO the stages that broke it are the limit
    slo = find_summary([_stage(0, 500, "stable", 0.5), _stage(1, 600, "slo_violated", 0.96)], slo={"p99": "50ms"})
    assert diagnose(slo, {})[0]["kind"] == "cpu_bound"


def test_batching_idle_only_on_a_server_that_batches() -> None:
    idle = {"url": URL, "source": "triton", "batch_size": 1.0}  # nv_inference_*: one request per execution
    stages = [_stage(1, 600, "saturated", 0.5, metrics=[idle])]
    no_batcher = {"model_config": {"max_batch_size": 8, "max_queue_delay_us": None}}  # batch dims, no batcher
    for triton in (None, no_batcher, {"model_config": {"max_batch_size": 0, "max_queue_delay_us": None}}):
        kinds = [d["kind"] for d in diagnose(find_summary(stages, triton=triton), {})]
        assert "batching_idle" not in kinds, triton
    batcher = {"model_config": {"max_batch_size": 8, "max_queue_delay_us": 100}}
    (line,) = [d for d in diagnose(find_summary(stages, triton=batcher), {}) if d["kind"] == "batching_idle"]
    assert line["evidence"]["max_batch_size"] == 8
    # the embedded Triton (its dynamic batcher is always on) says so in its settings
    embedded = find_summary(stages, server={"settings": {"max_batch_size": 32, "max_queue_delay_us": 0}})
    assert "batching_idle" in [d["kind"] for d in diagnose(embedded, {})]
