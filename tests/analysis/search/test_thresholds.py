"""SLO thresholds: parsing, which stages they are judged on, and summary.json integration."""

from __future__ import annotations

import time
from typing import Any

import pytest

from satpoint.analysis.search.thresholds import (
    Threshold,
    ThresholdError,
    evaluate,
    failed,
    format_result,
    judged_stages,
    parse_threshold,
    parse_thresholds,
)
from satpoint.analysis.summary.build import build_summary
from satpoint.config import RunConfig
from satpoint.engine.schedule import due_times
from satpoint.metrics.results import Results, Segment, new_header
from satpoint.plan import Stage
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate


# parsing -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "metric", "op", "limit"),
    [
        ("p99<50ms", "p99", "<", 50.0),
        ("p99 < 50", "p99", "<", 50.0),  # ms by default
        ("P90<=0.2s", "p90", "<=", 200.0),
        ("p50<800us", "p50", "<", 0.8),
        ("p95<1e2ms", "p95", "<", 100.0),
        ("p99.9<1s", "p999", "<", 1000.0),
        ("p999<1s", "p999", "<", 1000.0),
        ("max<2s", "max", "<", 2000.0),
        ("service_p99<20ms", "service_p99", "<", 20.0),
        ("service_p99.9<20ms", "service_p999", "<", 20.0),
        ("service_max<=1s", "service_max", "<=", 1000.0),
        ("error_rate<1%", "error_rate", "<", 0.01),
        ("error_rate<=0.005", "error_rate", "<=", 0.005),
        ("throughput_rps>400", "throughput_rps", ">", 400.0),
        ("throughput_rps>=400rps", "throughput_rps", ">=", 400.0),
        ("throughput_rps > 400/s", "throughput_rps", ">", 400.0),
    ],
)
def test_parse(text: str, metric: str, op: str, limit: float) -> None:
    t = parse_threshold(text)
    assert (t.metric, t.op) == (metric, op)
    assert t.limit == pytest.approx(limit)
    assert t.expr == text.strip()


def test_find_only_metrics_parse_for_find_and_are_rejected_for_run() -> None:
    assert parse_threshold("saturation_rps>400", "find").limit == 400
    assert parse_threshold("max_throughput_rps>=1000", "find").metric == "max_throughput_rps"
    with pytest.raises(ThresholdError, match="satpoint find"):
        parse_threshold("saturation_rps>400", "run")


@pytest.mark.parametrize(
    "text",
    ["", "p99", "p99<", "<50ms", "p99=50ms", "p99<<50", "p98<50ms", "latency<5", "p99<50min", "p99<fast",
     "error_rate<5ms", "error_rate<150%", "throughput_rps>400ms", "p99<50ms extra"],
)  # fmt: skip
def test_bad_syntax_is_a_clear_error(text: str) -> None:
    with pytest.raises(ThresholdError, match="--threshold"):
        parse_threshold(text)


def test_threshold_error_is_a_value_error() -> None:
    # cli.common.guarded turns ValueError into exit code 2
    assert issubclass(ThresholdError, ValueError)
    with pytest.raises(ValueError):
        parse_thresholds(["p99<50ms", "nonsense"])


# evaluation on a run ----------------------------------------------------------------------------------------------
def stage(target: float, p99: float | None, err: float = 0.0, tp: float | None = None, **kw: Any) -> dict[str, Any]:
    lat = {"p50": 1.0, "p90": 2.0, "p95": 3.0, "p99": p99, "p999": None if p99 is None else p99 * 2, "max": 100.0}
    return {
        "target_rps": target,
        "latency_ms": lat,
        "service_ms": {k: (v / 2 if v is not None else None) for k, v in lat.items()},
        "error_rate": err,
        "throughput_rps": target if tp is None else tp,
        "verdict": kw.pop("verdict", "stable"),
        "segment": kw.pop("segment", 0),
        **kw,
    }


RUN = {"kind": "run", "stages": [stage(100, 5.0, 0.0), stage(200, 40.0, 0.02), stage(300, 20.0, 0.001)]}


def test_run_latency_and_errors_use_the_worst_stage() -> None:
    res = evaluate(parse_thresholds(["p99<50ms", "p99<30ms", "error_rate<1%", "service_p99<25ms"]), RUN)
    assert [r.passed for r in res] == [True, False, False, True]
    assert res[0].actual == 40.0 and res[0].stage == 2  # worst p99 is stage 2
    assert res[2].actual == pytest.approx(0.02) and res[2].stage == 2
    assert res[3].actual == 20.0
    assert res[0].to_dict().keys() >= {"expr", "metric", "op", "limit", "actual", "passed"}


def test_a_lower_limit_takes_the_lowest_stage_and_throughput_the_highest() -> None:
    res = evaluate(parse_thresholds(["p99>10ms", "throughput_rps>250", "throughput_rps>350"]), RUN)
    assert (res[0].actual, res[0].stage, res[0].passed) == (5.0, 1, False)
    assert (res[1].actual, res[1].stage, res[1].passed) == (300.0, 3, True)
    assert res[2].passed is False


def test_missing_values_fail_with_a_note() -> None:
    empty = evaluate(parse_thresholds(["p99<50ms", "throughput_rps>1"]), {"kind": "run", "stages": []})
    assert [r.passed for r in empty] == [False, False]
    assert all(r.actual is None and r.note for r in empty)
    nothing = evaluate(parse_thresholds(["p999<50ms"]), {"kind": "run", "stages": [stage(100, None)]})
    assert nothing[0].passed is False and "no value" in format_result(nothing[0])


def test_boundaries_follow_the_operator() -> None:
    s = {"kind": "run", "stages": [stage(100, 50.0)]}
    assert [r.passed for r in evaluate(parse_thresholds(["p99<50", "p99<=50", "p99>=50", "p99>50"]), s)] == [
        False,
        True,
        True,
        False,
    ]


def test_failed_and_format() -> None:
    res = evaluate(parse_thresholds(["p99<50ms", "error_rate<1%"]), RUN)
    assert failed(res) is True
    assert failed([r.to_dict() for r in res]) is True
    assert failed(res[:1]) is False and failed([]) is False
    ok, bad = (format_result(r) for r in res)
    assert ok.startswith("✓ p99<50ms") and "40 ms" in ok and "stage 2" in ok
    assert bad.startswith("✗ error_rate<1%") and "2%" in bad


# evaluation on a find ---------------------------------------------------------------------------------------------
def find_summary(profile: bool = True) -> dict[str, Any]:
    stages = [
        stage(100, 5.0, segment=0),  # staircase
        stage(200, 8.0, segment=0),
        stage(400, 900.0, segment=0, verdict="saturated", tp=320.0),
        stage(300, 30.0, segment=1),  # refine, stable: the saturation point
    ]
    if profile:  # profile stages at 50/80/90/100 % of saturation (300 rps); margin 15 % -> target 255 rps
        stages += [
            stage(150, 6.0, segment=2),
            stage(240, 12.0, segment=2),
            stage(270, 25.0, segment=2),
            stage(300, 60.0, segment=2),
        ]
    return {
        "kind": "find",
        "stages": stages,
        "saturation_rps": 300.0,
        "max_throughput_rps": 320.0,
        "recommendation": {"margin": 0.15, "saturation_rps": 300.0, "target_rps_per_replica": 255.0},
    }


PURPOSES = {0: "staircase", 1: "refine", 2: "profile"}


def test_find_judges_profile_stages_up_to_the_per_replica_target() -> None:
    s = find_summary()
    chosen, rule = judged_stages(s, PURPOSES)
    assert chosen == [4, 5] and "profile" in rule  # 150 and 240 rps; 270 and 300 are above 255
    res = evaluate(parse_thresholds(["p99<20ms", "p99<10ms", "saturation_rps>250", "max_throughput_rps>400"], "find"),
                   s, PURPOSES)  # fmt: skip
    assert [r.passed for r in res] == [True, False, True, False]
    assert res[0].actual == 12.0 and res[0].stage == 6
    assert res[2].actual == 300.0 and res[3].actual == 320.0


def test_find_falls_back_to_stable_search_stages() -> None:
    s = find_summary(profile=False)
    chosen, rule = judged_stages(s, PURPOSES)
    assert chosen == [0, 1] and "search" in rule  # stable, at or below 255 rps
    # no stable stage below the target at all: every stable search stage
    s["stages"] = [stage(300, 30.0, segment=1), stage(400, 900.0, segment=1, verdict="saturated")]
    s["recommendation"]["target_rps_per_replica"] = 255.0
    assert judged_stages(s, PURPOSES)[0] == [0]


def test_find_without_saturation_point_fails_saturation_threshold() -> None:
    s: dict[str, Any] = {
        "kind": "find",
        "stages": [],
        "saturation_rps": None,
        "max_throughput_rps": None,
        "recommendation": None,
    }
    res = evaluate(parse_thresholds(["saturation_rps>10", "p99<1s"], "find"), s, {})
    assert [r.passed for r in res] == [False, False]
    assert res[0].note and "not measured" in res[0].note


def test_threshold_dataclass_units() -> None:
    assert Threshold("x", "p99", "<", 1.0).unit == "ms"
    assert Threshold("x", "error_rate", "<", 0.1).unit == "fraction"
    assert Threshold("x", "throughput_rps", ">", 1.0).unit == "rps"


# summary.json ----------------------------------------------------------------------------------------------------
def results_with(thresholds: list[str]) -> Results:
    stages = [Stage(100, 1, 8), Stage(300, 1, 8)]
    cfg = SimConfig(slots=4, service_ms=10)  # capacity 400 rps: no queueing, latency = 10 ms
    rec = simulate(due_times(stages), cfg)
    header = new_header(RunConfig(thresholds=tuple(thresholds)), {"url": "x"}, time.time())
    seg = Segment(0, "run", stages, "constant", 0, time.time(), rec)
    return Results(header, [seg])


def test_summary_holds_threshold_results() -> None:
    s = build_summary(results_with(["p99<11ms", "p99<9ms", "throughput_rps>250", "error_rate<0.1%"]))
    got = {t["expr"]: t for t in s["thresholds"]}
    assert [t["passed"] for t in s["thresholds"]] == [True, False, True, True]
    assert got["p99<11ms"]["actual"] == pytest.approx(10.0, abs=0.01)
    assert got["throughput_rps>250"]["actual"] == pytest.approx(300, rel=0.02)
    assert build_summary(results_with([]))["thresholds"] == []
