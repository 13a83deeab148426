"""The pipeline model: a DAG of steps from a Seldon Core 2 Pipeline, a Triton ensemble or a plain chain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satpoint.errors import ConfigError
from satpoint.pipeline.dag import PipelineDag, PipelineStep
from satpoint.pipeline.specs import load_spec, parse_seldon, parse_triton

SELDON_DAG = """\
apiVersion: mlops.seldon.io/v1alpha1
kind: Pipeline
metadata:
  name: tfsimples-join
spec:
  steps:
    - name: tfsimple1
    - name: tfsimple2
      inputs:
      - tfsimples-join.inputs
    - name: tfsimple3
      inputs:
      - tfsimple1.outputs.OUTPUT0
      - tfsimple2.outputs.OUTPUT1
      inputsJoinType: inner
      tensorMap:
        tfsimple1.outputs.OUTPUT0: INPUT0
        tfsimple2.outputs.OUTPUT1: INPUT1
  output:
    steps:
    - tfsimple3
"""


def test_a_seldon_pipeline_with_a_join_is_a_dag_of_its_steps() -> None:
    dag = parse_seldon(SELDON_DAG)
    assert dag.name == "tfsimples-join" and dag.kind == "seldon"
    assert [s.name for s in dag.steps] == ["tfsimple1", "tfsimple2", "tfsimple3"]
    assert dag.step("tfsimple1").inputs == () and dag.step("tfsimple2").inputs == ()  # the pipeline's input
    assert dag.step("tfsimple3").inputs == ("tfsimple1", "tfsimple2")
    assert dag.outputs == ("tfsimple3",)
    assert dag.order() == ("tfsimple1", "tfsimple2", "tfsimple3")
    assert dag.paths() == (("tfsimple1", "tfsimple3"), ("tfsimple2", "tfsimple3"))


def test_seldon_references_outputs_inputs_and_triggers() -> None:
    text = """\
apiVersion: mlops.seldon.io/v1alpha1
kind: Pipeline
metadata: {name: cond}
spec:
  steps:
  - name: choice
  - name: add10
    inputs: [cond.inputs.INPUT]
    triggers: [choice.outputs.choice]
  - name: mul10
    inputs: [choice.inputs]
    triggers: [choice.outputs.choice]
    inputsJoinType: any
  output:
    steps: [add10.outputs, mul10]
    stepsJoin: any
"""
    dag = parse_seldon(text)
    assert dag.step("add10").inputs == () and dag.step("add10").triggers == ("choice",)
    # ``choice.inputs``: the data step choice read (the pipeline's input), not choice's answer
    assert dag.step("mul10").inputs == () and dag.step("mul10").join == "any"
    assert dag.step("mul10").conditional and not dag.step("choice").conditional
    assert dag.upstream("mul10") == ("choice",)
    assert dag.outputs == ("add10", "mul10")


def test_a_multi_document_file_keeps_its_pipeline(tmp_path: Path) -> None:
    model = "apiVersion: mlops.seldon.io/v1alpha1\nkind: Model\nmetadata: {name: tfsimple1}\nspec: {}\n"
    path = tmp_path / "all.yaml"
    path.write_text(model + "---\n" + SELDON_DAG)
    assert load_spec(path).name == "tfsimples-join"


ENSEMBLE = {
    "name": "ens",
    "platform": "ensemble",
    "input": [{"name": "RAW", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "LABEL", "data_type": "TYPE_INT64", "dims": [1]}],
    "ensemble_scheduling": {
        "step": [
            {"model_name": "pre", "model_version": -1, "input_map": {"IN": "RAW"}, "output_map": {"OUT": "feat"}},
            {"model_name": "left", "model_version": -1, "input_map": {"X": "feat"}, "output_map": {"Y": "a"}},
            {"model_name": "right", "model_version": -1, "input_map": {"X": "feat"}, "output_map": {"Y": "b"}},
            {
                "model_name": "post",
                "model_version": -1,
                "input_map": {"A": "a", "B": "b"},
                "output_map": {"OUT": "LABEL"},
            },
        ]
    },
}

ENSEMBLE_PBTXT = """\
name: "ens"  # a diamond
platform: "ensemble"
input [ { name: "RAW" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "LABEL" data_type: TYPE_INT64 dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "pre" model_version: -1 input_map { key: "IN" value: "RAW" }
      output_map { key: "OUT" value: "feat" } },
    { model_name: "left" model_version: -1 input_map { key: "X" value: "feat" } output_map { key: "Y" value: "a" } },
    { model_name: "right" model_version: -1 input_map { key: "X" value: "feat" } output_map { key: "Y" value: "b" } },
    {
      model_name: "post"
      model_version: -1
      input_map { key: "A" value: "a" }
      input_map { key: "B" value: "b" }
      output_map { key: "OUT" value: "LABEL" }
    }
  ]
}
"""


@pytest.mark.parametrize("form", ["json", "pbtxt"])
def test_a_triton_ensemble_depends_on_the_steps_producing_its_tensors(form: str, tmp_path: Path) -> None:
    path = tmp_path / ("config.json" if form == "json" else "config.pbtxt")
    path.write_text(json.dumps(ENSEMBLE) if form == "json" else ENSEMBLE_PBTXT)
    dag = load_spec(path)
    assert dag.kind == "triton" and dag.name == "ens"
    assert {s.name: s.inputs for s in dag.steps} == {
        "pre": (),
        "left": ("pre",),
        "right": ("pre",),
        "post": ("left", "right"),
    }
    assert dag.outputs == ("post",)
    assert dag.paths() == (("pre", "left", "post"), ("pre", "right", "post"))


def test_a_model_used_twice_in_an_ensemble_is_two_steps() -> None:
    config = {
        "name": "twice",
        "ensemble_scheduling": {
            "step": [
                {"model_name": "m", "input_map": {"X": "IN"}, "output_map": {"Y": "mid"}},
                {"model_name": "m", "input_map": {"X": "mid"}, "output_map": {"Y": "OUT"}},
            ]
        },
    }
    dag = parse_triton(config)
    assert [(s.name, s.model, s.inputs) for s in dag.steps] == [("m", "m", ()), ("m#2", "m", ("m",))]
    assert dag.outputs == ("m#2",)  # no ``output`` list: the steps nothing reads


def test_a_plain_chain() -> None:
    dag = PipelineDag.chain("p", ["a", "b", "c"])
    assert dag.kind == "chain" and dag.outputs == ("c",)
    assert [s.inputs for s in dag.steps] == [(), ("a",), ("b",)]
    assert dag.to_dict()["steps"][1] == {"name": "b", "model": "b", "inputs": ["a"]}


# -- bad input: one clear line each -------------------------------------------------------------------


def _one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and text
    return text


def test_a_cycle_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as exc:
        PipelineDag(
            name="p",
            steps=(
                PipelineStep("a", inputs=("c",)),
                PipelineStep("b", inputs=("a",)),
                PipelineStep("c", inputs=("b",)),
            ),
            outputs=("c",),
        )
    assert "cycle: a -> b -> c -> a" in _one_line(exc)


def test_a_seldon_cycle_is_refused_even_when_allowed() -> None:
    text = SELDON_DAG.replace("    - name: tfsimple1\n", "    - name: tfsimple1\n      inputs: [tfsimple3]\n")
    with pytest.raises(ConfigError) as exc:
        parse_seldon(text)
    assert "tfsimple1 -> tfsimple3 -> tfsimple1" in _one_line(exc)


def test_an_unknown_input_step_is_refused() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_seldon(SELDON_DAG.replace("tfsimple2.outputs.OUTPUT1", "tfsimple9.outputs.OUTPUT1"))
    assert _one_line(exc) == (
        "pipeline tfsimples-join: step tfsimple3 reads 'tfsimple9.outputs.OUTPUT1', which names no step "
        "(steps: tfsimple1, tfsimple2, tfsimple3)"
    )


def test_an_unknown_output_step_is_refused() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_seldon(SELDON_DAG.replace("    - tfsimple3\n", "    - nope\n"))
    assert "output 'nope'" in _one_line(exc)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("kind: Pipeline\nspec: [unclosed\n", "not YAML"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "no Pipeline"),
        ("apiVersion: mlops.seldon.io/v1alpha1\nkind: Pipeline\nmetadata: {name: x}\nspec: {}\n", "spec.steps"),
        (SELDON_DAG.replace("  output:\n    steps:\n    - tfsimple3\n", ""), "spec.output.steps"),
        (SELDON_DAG.replace("- name: tfsimple2\n", "- name: tfsimple1\n"), "twice"),
        (SELDON_DAG.replace("tfsimple1.outputs.OUTPUT0", "tfsimple1.foo"), "tfsimple1.foo"),
    ],
)
def test_a_seldon_spec_that_does_not_parse_says_why_in_one_line(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_seldon(text)
    assert said in _one_line(exc)


def test_an_ensemble_reading_a_tensor_nothing_produces_is_refused() -> None:
    bad = json.loads(json.dumps(ENSEMBLE))
    bad["ensemble_scheduling"]["step"][3]["input_map"]["B"] = "c"
    with pytest.raises(ConfigError) as exc:
        parse_triton(bad)
    assert "step post reads tensor 'c', which no step produces and is not an input of the ensemble" in _one_line(exc)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('name: "e"\nensemble_scheduling { step [ { model_name: "a" }\n', "config.pbtxt"),
        ('name: "e"\nplatform: "onnxruntime_onnx"\n', "not an ensemble"),
    ],
)
def test_a_triton_config_that_does_not_parse(text: str, said: str, tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_spec(path)
    assert said in _one_line(exc)


def test_a_missing_spec_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_spec(tmp_path / "nope.yaml")
    assert "nope.yaml" in _one_line(exc)


def test_the_command_line_gives_a_spec_or_a_chain(tmp_path: Path) -> None:
    from satpoint.pipeline.specs import dag_from_options

    assert dag_from_options(None, ["a", "b"], "p").outputs == ("b",)
    path = tmp_path / "p.yaml"
    path.write_text(SELDON_DAG)
    assert dag_from_options(path, []).kind == "seldon"
    for spec, steps in ((None, []), (path, ["a"])):
        with pytest.raises(ConfigError, match="one of the two"):
            dag_from_options(spec, steps)
