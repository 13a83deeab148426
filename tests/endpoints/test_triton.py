"""endpoints.triton on answers recorded from Triton 2.51 (served by PyTriton): detection from ``/v2``,
inputs and batch limits from the model configuration, the knobs a sweep sets, and the binary body."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from satpoint.endpoints import triton
from satpoint.errors import ConfigError
from satpoint.payloads.binary import encode_binary_body
from satpoint.transports.rest import rest_control

FIXTURES = Path(__file__).parent.parent / "fixtures" / "triton"


def recorded(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def test_detects_triton_from_its_v2_answer() -> None:
    found = triton.detect(recorded("v2.json"))
    assert found is not None
    assert (found.name, found.version) == ("triton", "2.51.0")
    assert found.has_statistics and found.has_repository and found.has_binary_data


@pytest.mark.parametrize(
    "doc",
    [
        {"name": "mlserver", "version": "1.7.1", "extensions": []},  # MLServer's /v2
        {"detail": "Not Found"},
        ["triton"],
        None,
    ],
)
def test_other_servers_are_not_triton(doc: Any) -> None:
    assert triton.detect(doc) is None


def test_an_old_triton_without_statistics_says_so() -> None:
    found = triton.detect({"name": "triton", "version": "2.0", "extensions": ["model_repository"]})
    assert found is not None and not found.has_statistics


def test_inputs_from_the_model_configuration_get_the_batch_dimension() -> None:
    cfg = recorded("model_config.json")
    assert triton.config_inputs(cfg) == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}]
    unbatched = {**cfg, "max_batch_size": 0, "input": [{"name": "x", "data_type": "TYPE_INT64", "dims": [2, 3]}]}
    assert triton.config_inputs(unbatched) == [{"name": "x", "datatype": "INT64", "shape": [2, 3]}]
    strings = {**cfg, "input": [{"name": "s", "data_type": "TYPE_STRING", "dims": [1]}]}
    assert triton.config_inputs(strings)[0]["datatype"] == "BYTES"


def test_an_unknown_data_type_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="TYPE_WEIRD"):
        triton.config_inputs({"max_batch_size": 1, "input": [{"name": "x", "data_type": "TYPE_WEIRD", "dims": [1]}]})


def test_a_batch_above_max_batch_size_is_refused_before_the_run() -> None:
    cfg = recorded("model_config.json")  # max_batch_size 8
    assert triton.batch_problem(cfg, 8) is None
    problem = triton.batch_problem(cfg, 9)
    assert problem is not None and "max_batch_size 8" in problem
    assert triton.batch_problem({**cfg, "max_batch_size": 0}, 64) is None  # no batching: shapes are the user's


def test_knob_values_of_the_recorded_configuration() -> None:
    assert triton.knob_values(recorded("model_config.json")) == {
        "max_batch_size": 8,
        "max_queue_delay_us": 0,
        "preferred_batch_size": 8,
        "instances": 1,
    }


def test_config_with_knobs_changes_only_the_knobs_and_reads_back_as_them() -> None:
    cfg = recorded("model_config.json")
    knobs = {"max_batch_size": 16, "max_queue_delay_us": 2000, "preferred_batch_size": 4, "instances": 2}
    changed = triton.config_with_knobs(cfg, {**knobs, "protocol": "grpc"})
    assert triton.knob_values(changed) == knobs
    assert triton.config_differences(changed, knobs) == []
    assert changed["input"] == cfg["input"] and changed["backend"] == "python"
    assert cfg["max_batch_size"] == 8  # the original is untouched
    diffs = triton.config_differences(cfg, knobs)
    assert "max_queue_delay_us: wanted 2000, the server has 0" in diffs and len(diffs) == 4


def test_instances_on_a_configuration_without_an_instance_group() -> None:
    changed = triton.config_with_knobs({"max_batch_size": 4}, {"instances": 3})
    assert changed["instance_group"] == [{"kind": "KIND_CPU", "count": 3}]


def test_binary_body_is_a_json_header_then_the_raw_tensor() -> None:
    doc = {"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [2, 4], "data": [1.5] * 4 + [2.0] * 4}]}
    body, header_len = encode_binary_body(doc)
    head = json.loads(body[:header_len])
    assert "data" not in head["inputs"][0]
    assert head["inputs"][0]["parameters"] == {"binary_data_size": 32}
    values = np.frombuffer(body[header_len:], dtype="<f4")
    assert values.tolist() == [1.5] * 4 + [2.0] * 4
    with pytest.raises(ValueError, match="BYTES"):
        encode_binary_body({"inputs": [{"name": "s", "datatype": "BYTES", "shape": [1], "data": ["a"]}]})


def test_knobs_are_not_tried_on_a_triton_without_the_repository_api(monkeypatch: pytest.MonkeyPatch) -> None:
    v2 = recorded("v2.json")
    v2["extensions"] = [e for e in v2["extensions"] if not e.startswith("model_repository")]
    calls: list[str] = []

    def call_json(base_url: str, path: str, doc: object | None = None, *a: object, **kw: object) -> tuple[int, Any]:
        calls.append(path)
        return (200, v2) if path == "/v2" else (200, recorded("model_config.json"))

    monkeypatch.setattr(rest_control, "call_json", call_json)
    with pytest.raises(ConfigError, match="does not offer the model repository API"):
        triton.apply_knobs("http://triton:8000", "iris", {"max_batch_size": 4})
    assert not any("repository" in c for c in calls)  # nothing was loaded
