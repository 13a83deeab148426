"""The prediction from the steps: the pipeline's capacity and bottleneck, the critical path, the sizing."""

from __future__ import annotations

import pytest

from satpoint.pipeline.dag import PipelineDag, PipelineStep
from satpoint.pipeline.predict import critical_path, predict_capacity, size_pipeline

CHAIN = PipelineDag.chain("chain", ["a", "b", "c"])
#: pre fans out to two branches, post joins them
DIAMOND = PipelineDag(
    name="diamond",
    steps=(
        PipelineStep("pre"),
        PipelineStep("left", inputs=("pre",)),
        PipelineStep("right", inputs=("pre",)),
        PipelineStep("post", inputs=("left", "right")),
    ),
    outputs=("post",),
)


def test_a_chain_carries_the_least_of_its_steps() -> None:
    p = predict_capacity(CHAIN, {"a": 100.0, "b": 40.0, "c": 80.0})
    assert p.saturation_rps == 40.0 and p.bottleneck == "b" and not p.lower_bound
    assert p.to_dict()["steps"] == [
        {"step": "a", "saturation_rps": 100.0, "share": 2.5},
        {"step": "b", "saturation_rps": 40.0, "share": 1.0},
        {"step": "c", "saturation_rps": 80.0, "share": 2.0},
    ]


def test_every_branch_of_a_fan_out_carries_the_full_rate() -> None:
    """Each request visits both branches: the slower branch limits the pipeline, not their sum."""
    p = predict_capacity(DIAMOND, {"pre": 200.0, "left": 50.0, "right": 120.0, "post": 90.0})
    assert (p.saturation_rps, p.bottleneck) == (50.0, "left")


def test_a_step_off_the_answer_path_still_has_to_keep_up() -> None:
    """A side step the answer does not wait for (a drift detector) still takes every request: slower than the
    rest, its backlog grows without end, so it is the bottleneck of the sustained rate."""
    dag = PipelineDag(
        name="side", steps=(PipelineStep("model"), PipelineStep("drift", inputs=("model",))), outputs=("model",)
    )
    assert predict_capacity(dag, {"model": 300.0, "drift": 120.0}).bottleneck == "drift"


def test_a_conditional_step_is_counted_as_if_every_request_took_it() -> None:
    dag = PipelineDag(
        name="cond",
        steps=(PipelineStep("choice"), PipelineStep("rare", inputs=("choice",), triggers=("choice",))),
        outputs=("rare",),
    )
    p = predict_capacity(dag, {"choice": 100.0, "rare": 30.0})
    assert (p.saturation_rps, p.bottleneck, p.conditional) == (30.0, "rare", ("rare",))
    assert "rare" in p.to_dict()["assumes"]


def test_a_lower_bound_bottleneck_makes_the_prediction_a_lower_bound() -> None:
    caps = {"a": 100.0, "b": 40.0, "c": 80.0}
    assert predict_capacity(CHAIN, caps, lower_bounds={"b"}).lower_bound
    assert not predict_capacity(CHAIN, caps, lower_bounds={"c"}).lower_bound  # c can only be faster


def test_every_step_needs_a_capacity() -> None:
    with pytest.raises(ValueError, match="no capacity for step c"):
        predict_capacity(CHAIN, {"a": 100.0, "b": 40.0})


def test_the_critical_path_is_the_slowest_path_to_the_answer() -> None:
    """The capacity bottleneck (left) is not on the latency critical path (right is slower to answer)."""
    latency = {"pre": 0.005, "left": 0.010, "right": 0.030, "post": 0.004}
    path = critical_path(DIAMOND, latency)
    assert path.steps == ("pre", "right", "post")
    assert path.latency_s == pytest.approx(0.039)
    assert path.overhead_s(0.050) == pytest.approx(0.011)
    assert path.to_dict() == {"steps": ["pre", "right", "post"], "latency_s": pytest.approx(0.039)}


def test_the_critical_path_ignores_steps_the_answer_does_not_wait_for() -> None:
    dag = PipelineDag(
        name="side", steps=(PipelineStep("model"), PipelineStep("drift", inputs=("model",))), outputs=("model",)
    )
    assert critical_path(dag, {"model": 0.01, "drift": 1.0}).steps == ("model",)


def test_sizing_gives_each_step_the_replicas_for_the_target_with_the_margin() -> None:
    s = size_pipeline(CHAIN, {"a": 100.0, "b": 40.0, "c": 80.0}, target_rps=150.0, margin=0.15)
    # replicas = ceil(150 / (capacity x 0.85)): a 150/85, b 150/34, c 150/68
    assert [(x.step, x.replicas, x.target_rps_per_replica) for x in s.steps] == [
        ("a", 2, 85.0),
        ("b", 5, 34.0),
        ("c", 3, 68.0),
    ]
    assert s.saturation_rps == 200.0 and s.bottleneck == "a"  # 2 x 100 = 5 x 40 < 3 x 80
    assert s.saturation_rps * (1 - s.margin) >= s.target_rps


def test_sizing_without_a_target_balances_every_step_to_the_fastest() -> None:
    s = size_pipeline(DIAMOND, {"pre": 200.0, "left": 50.0, "right": 120.0, "post": 90.0}, margin=0.15)
    assert s.target_rps == 170.0  # pre's own per-replica target
    assert {x.step: x.replicas for x in s.steps} == {"pre": 1, "left": 4, "right": 2, "post": 3}


def test_no_replicas_from_a_lower_bound() -> None:
    s = size_pipeline(CHAIN, {"a": 100.0, "b": 40.0, "c": 80.0}, target_rps=150.0, lower_bounds={"b"})
    assert [x.replicas for x in s.steps] == [2, None, 3]
    assert s.saturation_rps is None and s.to_dict()["steps"][1]["withheld"]
