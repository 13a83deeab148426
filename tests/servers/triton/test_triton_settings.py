"""The embedded Triton's pure parts: its settings' validation, the child's environment (the interpreter's
libpython first), and the Triton knobs of a sweep."""

from __future__ import annotations

import pytest

from satpoint.analysis.sweep.space import check_triton_point, grid, parse_set
from satpoint.servers.triton.server import TritonSettings, triton_env


def test_libdir_goes_first_on_the_library_path_once() -> None:
    env = triton_env({"LD_LIBRARY_PATH": "/usr/lib:/opt/py/lib", "HOME": "/root"}, "/opt/py/lib")
    assert env["LD_LIBRARY_PATH"] == "/opt/py/lib:/usr/lib"
    assert env["HOME"] == "/root" and env["PYTHONUNBUFFERED"] == "1"
    assert triton_env({}, "/opt/py/lib")["LD_LIBRARY_PATH"] == "/opt/py/lib"
    assert "LD_LIBRARY_PATH" not in triton_env({}, None)


def test_settings_defaults_and_knobs() -> None:
    s = TritonSettings()
    assert s.served_model_name == "iris"
    assert s.knobs() == {"max_batch_size": 32, "max_queue_delay_us": 0, "instances": 1, "preferred_batch_size": None}
    assert TritonSettings(demo_model="digits-mlp", model_name="m").served_model_name == "m"


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"demo_model": "resnet"}, "unknown demo model"),
        ({"max_batch_size": 0}, "max_batch_size must be >= 1"),
        ({"max_queue_delay_us": -1}, "max_queue_delay_us must be >= 0"),
        ({"instances": 0}, "instances must be >= 1"),
        ({"max_batch_size": 4, "preferred_batch_size": 8}, "preferred_batch_size must be within 1..max_batch_size"),
        ({"input_datatype": "INT8"}, "FP32 or FP64"),
    ],
)
def test_settings_refuse_what_cannot_work(kw: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TritonSettings(**kw)  # type: ignore[arg-type]


def test_triton_knobs_parse_into_a_grid() -> None:
    points = grid(parse_set(["max_queue_delay_us=0,2000", "max_batch_size=1,16"], "triton"))
    assert [p.values for p in points] == [
        {"max_queue_delay_us": 0, "max_batch_size": 1},
        {"max_queue_delay_us": 0, "max_batch_size": 16},
        {"max_queue_delay_us": 2000, "max_batch_size": 1},
        {"max_queue_delay_us": 2000, "max_batch_size": 16},
    ]


@pytest.mark.parametrize(
    ("item", "match"),
    [
        ("max_queue_delay_us=-5", "must be >= 0"),
        ("instances=0", "must be >= 1"),
        ("max_batch_size=1.5", "whole numbers"),
        ("workers=2", "unknown knob 'workers' for the triton server; valid knobs: max_batch_size"),
    ],
)
def test_bad_triton_knobs_are_refused(item: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_set([item], "triton")


def test_knobs_that_contradict_each_other_are_refused() -> None:
    check_triton_point({"max_batch_size": 16, "preferred_batch_size": 8, "batch": 4}, None)
    with pytest.raises(ValueError, match="preferred_batch_size=32 exceeds max_batch_size=16"):
        check_triton_point({"max_batch_size": 16, "preferred_batch_size": 32}, None)
    with pytest.raises(ValueError, match="batch=8 exceeds max_batch_size=4"):
        check_triton_point({"batch": 8}, 4)


def test_a_remote_server_takes_the_triton_knobs_too() -> None:
    (dim,) = parse_set(["max_queue_delay_us=0,500"], "remote")
    assert dim.values == (0, 500)
