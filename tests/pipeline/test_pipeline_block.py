"""The ``pipeline`` block of ``summary.json``: a pure function of the steps' and the pipeline's searches."""

from __future__ import annotations

import pytest

from satpoint.analysis.summary.model import FindSummary, LatencyAt, Percentiles
from satpoint.errors import ConfigError
from satpoint.pipeline.dag import PipelineDag, PipelineStep
from satpoint.pipeline.find import called_as, pipeline_block
from satpoint.pipeline.specs import parse_triton


def _found(sat: float | None, p50_ms: float, p99_ms: float, *, lower: bool = False) -> FindSummary:
    """A search's summary with only what the block reads: its answer and its lowest profiled rate."""
    light = LatencyAt.model_construct(offered_rps=10.0, latency_ms=Percentiles(p50=p50_ms, p99=p99_ms))
    heavy = LatencyAt.model_construct(offered_rps=80.0, latency_ms=Percentiles(p50=99.0, p99=999.0))
    return FindSummary.model_construct(saturation_rps=sat, lower_bound=lower, latency_at=[heavy, light])


DIAMOND = PipelineDag(
    name="d",
    steps=(
        PipelineStep("pre"),
        PipelineStep("left", inputs=("pre",)),
        PipelineStep("right", inputs=("pre",)),
        PipelineStep("post", inputs=("left", "right")),
    ),
    outputs=("post",),
    kind="seldon",
)


def test_the_block_predicts_names_the_bottleneck_and_prices_the_machinery() -> None:
    steps = {
        "pre": _found(400.0, 2.0, 4.0),
        "left": _found(90.0, 10.0, 20.0),
        "right": _found(200.0, 30.0, 40.0),
        "post": _found(300.0, 3.0, 5.0),
    }
    block = pipeline_block(DIAMOND, "d.pipeline", steps, _found(85.0, 40.0, 60.0), target_rps=170.0)
    assert (block["predicted_saturation_rps"], block["bottleneck"]) == (90.0, "left")
    assert block["saturation_rps"] == 85.0 and block["measured_over_predicted"] == pytest.approx(85 / 90, abs=1e-4)
    # latency: right's branch is the longer one, although left limits the rate
    assert block["critical_path"] == {"steps": ["pre", "right", "post"], "latency_ms": {"p50": 35.0, "p99": 49.0}}
    assert block["overhead_ms"] == {"p50": 5.0, "p99": 11.0}
    assert {s["step"]: s["replicas"] for s in block["sizing"]["steps"]} == {
        "pre": 1,
        "left": 3,  # 170 / (90 x 0.85) = 2.2
        "right": 1,
        "post": 1,
    }
    assert [s["folder"] for s in block["steps"]] == ["steps/pre", "steps/left", "steps/right", "steps/post"]


def test_a_model_two_steps_call_shares_its_capacity_between_them() -> None:
    dag = parse_triton(
        {
            "name": "twice",
            "ensemble_scheduling": {
                "step": [
                    {"model_name": "m", "input_map": {"X": "IN"}, "output_map": {"Y": "mid"}},
                    {"model_name": "m", "input_map": {"X": "mid"}, "output_map": {"Y": "OUT"}},
                ]
            },
        }
    )
    block = pipeline_block(dag, "twice", {"m": _found(300.0, 1.0, 2.0)}, None)
    assert block["predicted_saturation_rps"] == 150.0 and block["saturation_rps"] is None
    assert block["overhead_ms"] is None


def test_no_prediction_without_every_steps_answer() -> None:
    block = pipeline_block(DIAMOND, "d.pipeline", {"pre": _found(400.0, 1.0, 2.0)}, _found(85.0, 40.0, 60.0))
    assert block["predicted_saturation_rps"] is None and block["sizing"] is None and block["critical_path"] is None
    none = pipeline_block(DIAMOND, "d.pipeline", {s: _found(None, 1.0, 2.0) for s in DIAMOND.names}, None)
    assert none["bottleneck"] is None


def test_a_lower_bound_bottleneck_is_said() -> None:
    steps = {s: _found(100.0 if s == "left" else 400.0, 1.0, 2.0, lower=s == "left") for s in DIAMOND.names}
    block = pipeline_block(DIAMOND, "d.pipeline", steps, None)
    assert block["prediction"]["lower_bound"] and block["sizing"]["saturation_rps"] is None


def test_what_the_whole_pipeline_is_called() -> None:
    assert called_as(DIAMOND) == "d.pipeline"
    assert called_as(parse_triton({"name": "e", "ensemble_scheduling": {"step": [{"model_name": "a"}]}})) == "e"
    assert called_as(PipelineDag.chain("c", ["a"]), "served-as") == "served-as"
    with pytest.raises(ConfigError, match="--pipeline-model"):
        called_as(PipelineDag.chain("c", ["a"]))
