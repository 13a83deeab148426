"""The sweep's pure parts: knobs and grid, the figures of one measurement, medians, ties, the front."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from satpoint.analysis.sweep.conclusions import (
    PointInput,
    add_scaling,
    aggregate,
    best,
    measurement_figures,
    pareto_front,
    rank,
    recommendation_lines,
    remeasure_plan,
)
from satpoint.analysis.sweep.space import grid, parse_set, placeholders
from satpoint.experiments.reconfigure import render_command

# -- knobs and grid -------------------------------------------------------------------------------------


def test_grid_is_every_combination_first_knob_slowest() -> None:
    dims = parse_set(["workers=0,1,2", "protocol=rest,grpc"], "mlserver")
    points = grid(dims)
    assert [p.values for p in points[:3]] == [
        {"workers": 0, "protocol": "rest"},
        {"workers": 0, "protocol": "grpc"},
        {"workers": 1, "protocol": "rest"},
    ]
    assert len(points) == 6
    assert [p.id for p in points] == ["p01", "p02", "p03", "p04", "p05", "p06"]
    assert points[5].label == "workers=2 protocol=grpc"
    assert points[5].dirname == "p06-workers=2_protocol=grpc"


def test_values_are_typed_and_checked() -> None:
    (d,) = parse_set(["max_batch_time=0,0.01"], "mlserver")
    assert d.values == (0.0, 0.01)
    (e,) = parse_set(["env.OMP_NUM_THREADS=1,2"], "mlserver")
    assert e.values == ("1", "2")
    for bad, words in [
        ("workers=-1", "must be >= 0"),
        ("workers=two", "whole numbers"),
        ("protocol=http", "takes rest, grpc"),
        ("max_batch_size=0", "must be >= 1"),
        ("workers=1,1", "listed twice"),
        ("workers", "KNOB=V1,V2"),
        ("env.1BAD=1", "not an environment variable name"),
        ("model_dir=/nonexistent", "not an MLServer model folder"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_set([bad], "mlserver")
    with pytest.raises(ValueError, match="set twice"):
        parse_set(["workers=1", "workers=2"], "mlserver")
    with pytest.raises(ValueError, match="at least one"):
        parse_set([], "mlserver")


def test_unknown_knob_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError) as e:
        parse_set(["wokers=1,2"], "mlserver")
    text = str(e.value)
    assert "unknown knob 'wokers'" in text
    for name in ("workers", "max_batch_size", "max_batch_time", "protocol", "batch", "env.NAME", "server_cpus"):
        assert name in text
    with pytest.raises(ValueError, match="valid knobs: workers, service_ms"):
        parse_set(["max_batch_size=2"], "sim")


def test_remote_knobs_are_the_reconfigure_placeholders() -> None:
    cmd = 'kubectl patch model m --type merge -p \'{{"spec":{{"replicas":{replicas}}}}}\' && echo {workers}'
    assert placeholders(cmd) == ["replicas", "workers"]
    dims = parse_set(["workers=1,2", "replicas=1", "protocol=rest"], "remote", cmd)
    assert [d.knob.name for d in dims] == ["workers", "replicas", "protocol"]
    with pytest.raises(ValueError, match="no --set gives it values"):
        parse_set(["workers=1,2"], "remote", cmd)
    with pytest.raises(ValueError, match="unknown knob 'cpus'"):
        parse_set(["workers=1", "replicas=1", "cpus=2"], "remote", cmd)
    assert len(grid(parse_set(["protocol=rest,grpc", "batch=1,8"], "remote"))) == 4  # client side only
    with pytest.raises(ValueError, match=r"\{placeholder\} of --reconfigure"):
        parse_set(["workers=1"], "remote")  # a server knob without a command to apply it


def test_reconfigure_values_are_shell_quoted() -> None:
    """Unquoted, in double and in single quotes, a value is one literal word part (the shell runs the
    rendered command: tests/analysis/sweep/test_sweep_reconfigure.py)."""
    value = "x y $(rm -rf /) `id` \"q\" 'r'"
    for template in ("echo {a}", 'echo "n={a}!"', "echo 'n={a}!'"):
        rendered = render_command(template, {"a": value})
        words = shlex.split(rendered)
        assert words[1] == (value if template == "echo {a}" else f"n={value}!"), rendered


# -- one measurement ------------------------------------------------------------------------------------


def _stage(rate: float, verdict: str, p50: float, p99: float) -> dict[str, Any]:
    return {
        "target_rps": rate,
        "offered_rps": rate,
        "verdict": verdict,
        "latency_ms": {"p50": p50, "p90": p99, "p99": p99, "max": p99},
    }


def test_measurement_figures_read_low_load_and_the_confirmation_hold() -> None:
    summary = {
        "stages": [
            _stage(20.0, "stable", 5.0, 7.0),
            _stage(40.0, "stable", 5.0, 8.0),
            _stage(80.0, "saturated", 50.0, 300.0),
            _stage(60.0, "stable", 6.0, 9.0),
            _stage(51.0, "stable", 5.5, 8.5),
        ],
        "saturation_rps": 60.0,
        "unstable_rps": 80.0,
        "max_throughput_rps": 70.0,
        "search": {"confirmation": {"rate_rps": 51.0, "verdict": "stable", "attempts": 1}},
        "latency_at": [],
        "find_notes": [],
    }
    f = measurement_figures(summary)
    assert f["low_load"] == {"rps": 20.0, "p50_ms": 5.0, "p99_ms": 7.0, "verdict": "stable"}
    assert f["at_operating_point"] == {"rps": 51.0, "p50_ms": 5.5, "p99_ms": 8.5, "verdict": "stable"}
    assert f["saturation_rps"] == 60.0 and not f["lower_bound"]
    # a search seeded near its answer has no low-load stage
    seeded = dict(summary, stages=summary["stages"][2:])
    assert measurement_figures(seeded)["low_load"] is None
    summary["find_notes"] = ["generator-limited: the generator fell behind"]
    assert measurement_figures(summary)["lower_bound"]


def test_latency_at_a_chosen_rate_comes_from_the_profile_at_that_rate() -> None:
    summary = {
        "stages": [],
        "saturation_rps": 100.0,
        "latency_at": [
            {"fraction": 0.4, "offered_rps": 40.0, "latency_ms": {"p50": 1, "p99": 2}, "verdict": "stable"},
            {"fraction": 0.8, "offered_rps": 80.2, "latency_ms": {"p50": 3, "p99": 4}, "verdict": "stable"},
        ],
    }
    assert measurement_figures(summary, at_rps=80.0)["at_rps"]["p99_ms"] == 4
    assert measurement_figures(summary, at_rps=60.0)["at_rps"]["p99_ms"] is None


# -- aggregation, ties, the front ----------------------------------------------------------------------


def _m(sat: float | None, unstable: float | None = None, p99_op: float | None = None) -> dict[str, Any]:
    return {
        "saturation_rps": sat,
        "unstable_rps": unstable,
        "max_throughput_rps": None,
        "low_load": None,
        "at_operating_point": {"rps": None, "p50_ms": None, "p99_ms": p99_op},
        "at_rps": None,
    }


def _row(pid: str, knobs: dict[str, Any], ms: list[dict[str, Any]], cores: int = 1, batch: int = 1) -> dict[str, Any]:
    return aggregate(PointInput(pid, " ".join(f"{k}={v}" for k, v in knobs.items()), knobs, cores, batch, ms))


def test_aggregate_gives_median_and_range_per_core_and_inferences() -> None:
    r = _row("p01", {"batch": 4}, [_m(100, 110), _m(120, 130), _m(90, 99)], cores=2, batch=4)
    assert r["saturation_rps"] == {"median": 100.0, "min": 90.0, "max": 120.0, "n": 3}
    assert r["bracket_rps"] == [90.0, 130.0]
    assert r["rps_per_core"]["median"] == 50.0
    assert r["inferences_per_s"]["median"] == 400.0
    assert _row("p02", {}, [_m(None)])["feasible"] is False


def test_overlapping_ranges_are_a_tie_and_separated_ones_a_winner() -> None:
    a = _row("p01", {"workers": 1}, [_m(100, 108), _m(104, 112)])
    b = _row("p02", {"workers": 2}, [_m(106, 115), _m(110, 118)])  # reaches into a's range: tied
    c = _row("p03", {"workers": 4}, [_m(150, 160), _m(160, 170)])
    tied = best([a, b], "saturation")
    assert tied is not None and tied["point"] == "p02" and tied["tied_with"] == ["p01"]
    assert not tied["separated"] and "no clear winner" in tied["text"]
    win = best([a, b, c], "saturation")
    assert win is not None and win["point"] == "p03" and win["separated"] and win["tied_with"] == []
    assert "beyond the noise" in win["text"] and win["runner_up"] == "p02"
    assert rank([a, b, c], "saturation") == ["p03", "p02", "p01"]


def test_a_single_measurement_each_is_flagged() -> None:
    a = _row("p01", {}, [_m(100, 108)])
    c = _row("p02", {}, [_m(200, 210)])
    w = best([a, c], "saturation")
    assert w is not None and w["separated"] and not w["repeated"] and "repeat to be sure" in w["text"]


def test_p99_objective_prefers_lower_latency() -> None:
    a = _row("p01", {}, [_m(100)])
    b = _row("p02", {}, [_m(100)])
    a["at_rps"] = {"p99_ms": {"median": 5.0, "min": 4.0, "max": 6.0, "n": 2}, "stable": True}
    b["at_rps"] = {"p99_ms": {"median": 9.0, "min": 8.0, "max": 10.0, "n": 2}, "stable": True}
    w = best([a, b], "p99")
    assert w is not None and w["point"] == "p01" and w["separated"] and w["value"] == 5.0
    b["at_rps"]["stable"] = False  # an unstable point has no latency at that rate
    w = best([a, b], "p99")
    assert w is not None and w["runner_up"] is None


def test_pareto_front_keeps_the_non_dominated_points() -> None:
    rows = [
        _row("p01", {}, [_m(100, p99_op=5)]),
        _row("p02", {}, [_m(200, p99_op=9)]),
        _row("p03", {}, [_m(150, p99_op=12)]),  # dominated by p02 (less saturation, more latency)
        _row("p04", {}, [_m(90, p99_op=4)]),
    ]
    assert pareto_front(rows) == ["p01", "p02", "p04"]


def test_leaders_are_re_measured_until_they_have_two_measurements() -> None:
    rows = [
        _row("p01", {}, [_m(100)]),
        _row("p02", {}, [_m(300), _m(310)]),
        _row("p03", {}, [_m(200)]),
        _row("p04", {}, [_m(150)]),
        _row("p05", {}, [_m(None)]),
    ]
    assert remeasure_plan(rows, "saturation", 3) == ["p03", "p04"]
    assert remeasure_plan(rows, "saturation", 0) == []


def test_scaling_against_one_worker_times_cores() -> None:
    rows = [
        _row("p01", {"workers": 1}, [_m(100)], cores=2),
        _row("p02", {"workers": 2}, [_m(180)], cores=2),
        _row("p03", {"workers": 4}, [_m(190)], cores=2),
        _row("p04", {"workers": 0}, [_m(120)], cores=2),
    ]
    add_scaling(rows)
    assert rows[1]["scaling"] == {
        "vs_one_worker": 1.8,
        "ideal": 2.0,
        "efficiency": 0.9,
        "one_worker_x_cores_rps": 200.0,
        "rule": "min(workers, cores)",
    }
    assert rows[2]["scaling"]["ideal"] == 2.0  # 4 workers on 2 cores
    assert rows[3]["scaling"]["ideal"] is None  # inference in the main process: nothing to scale
    assert rows[3]["scaling"]["vs_one_worker"] == 1.2 and rows[3]["scaling"]["efficiency"] is None
    add_scaling(rows, workers_use_cores=False)
    assert rows[2]["scaling"]["ideal"] == 4.0
    doc = {"objective": "saturation", "points": rows, "best": {"saturation": best(rows, "saturation")}}
    text = "\n".join(recommendation_lines(doc))
    assert "ranges overlap" in text and "workers=2: 1.80x one worker's saturation" in text
