"""find --trace's search over the speed factor X (the rate search reused, each step a whole replay)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from satpoint.analysis.search.steps import Measured, Step
from satpoint.analysis.traffic.headroom import (
    headroom_block,
    latency_at,
    replay_verdict,
    replicas_for_peak,
    search_params,
    search_speed,
    trace_peaks,
)
from satpoint.reports.terminal.headroom import print_headroom


def server(capacity_x: float) -> tuple[list[Step], object]:
    """A fake replay: stable up to ``capacity_x`` times the trace's speed."""
    steps: list[Step] = []

    def measure(step: Step) -> Measured:
        steps.append(step)
        return Measured(step.rate_rps, "saturated" if step.rate_rps > capacity_x else "stable", step.phase)

    return steps, measure


@pytest.mark.parametrize("capacity", [0.3, 1.0, 4.0, 7.3, 40.0])
def test_the_search_finds_the_highest_sustained_speed_to_its_precision(capacity: float) -> None:
    params = search_params(precision=0.05, start_speed=1.0)
    steps, measure = server(capacity)
    out = search_speed(measure, params)  # type: ignore[arg-type]
    lo, hi = out.bracket
    assert out.ended == "converged" and out.speed == lo and out.confirmed and not out.lower_bound
    assert lo is not None and hi is not None
    assert lo <= capacity < hi and hi / lo - 1 <= 0.05
    # confirmed as find confirms: the answer replayed once more, from idle, as the last step
    assert steps[-1].phase == "confirm" and steps[-1].rate_rps == lo and steps[-1].fresh
    assert all(s.fresh or s.rate_rps > steps[i].rate_rps for i, s in enumerate(steps[1:]))  # rises within a sequence


def test_a_confirmation_that_fails_lowers_the_answer() -> None:
    params = search_params(precision=0.05, start_speed=1.0)
    # first find where the answer lands without the failure, then make its confirmation fail (and its retest)
    _, clean = server(4.0)
    answer = search_speed(clean, params).speed  # type: ignore[arg-type]
    assert answer is not None

    steps: list[Step] = []

    def measure(step: Step) -> Measured:
        steps.append(step)
        bad = step.rate_rps > 4.0 or (step.phase in ("confirm", "retest") and step.rate_rps == answer)
        return Measured(step.rate_rps, "saturated" if bad else "stable", step.phase)

    out = search_speed(measure, params)
    assert out.speed is not None and out.speed < answer
    assert out.bracket[1] == answer  # the contradicted answer became the lowest unstable speed
    assert steps[-1].phase == "confirm" and steps[-1].rate_rps == out.speed


def test_the_budget_and_a_stop_end_the_search_with_the_bracket_so_far() -> None:
    params = search_params(precision=0.05, start_speed=1.0)
    steps, measure = server(4.0)
    out = search_speed(measure, params, fits=lambda s: len(steps) < 3)  # type: ignore[arg-type]
    assert out.ended == "budget" and len(steps) == 3 and out.bracket == (4.0, None) and out.speed == 4.0
    out = search_speed(lambda s: None, params)
    assert out.ended == "stopped" and out.speed is None and out.history == []


def test_limited_replays_are_measured_again_and_say_nothing_of_the_server() -> None:
    params = search_params(start_speed=2.0)
    calls: list[float] = []

    def measure(step: Step) -> Measured:
        calls.append(step.rate_rps)
        return Measured(step.rate_rps, "generator_limited", step.phase)

    out = search_speed(measure, params)
    assert calls == [2.0, 2.0] and out.speed is None and out.bracket == (None, None)
    assert out.ended == "limit" and not out.confirmed


def test_a_search_that_ends_limited_or_at_the_top_speed_is_a_lower_bound_never_confirmed() -> None:
    # stable at 2 and 4, then limited twice at 8: X = 4 is a lower bound, no confirmation ran
    def limited_at_8(step: Step) -> Measured:
        return Measured(step.rate_rps, "generator_limited" if step.rate_rps >= 8 else "stable", step.phase)

    out = search_speed(limited_at_8, search_params(start_speed=2.0))
    assert out.speed == 4.0 and out.ended == "limit" and out.lower_bound and not out.confirmed
    block = headroom_block(out, search_params(), 10.0, 20.0, 0.15, [], [])
    assert block["ended"] == "limit" and block["lower_bound"] is True and block["confirmed"] is False
    assert block["replicas_for_peak"] is None and block["target_rps_per_replica"] is None
    assert block["capacity_rps"] is None
    # stable at every speed up to the highest allowed
    _, measure = server(1e9)
    top = search_speed(measure, search_params(start_speed=1.0, max_speed=16.0))  # type: ignore[arg-type]
    assert top.speed == 16.0 and top.ended == "max_speed" and top.lower_bound and not top.confirmed
    # not stable even at the lowest speed
    _, measure = server(0.0)
    low = search_speed(measure, search_params(start_speed=1.0))  # type: ignore[arg-type]
    assert low.speed is None and low.ended == "min_speed" and not low.confirmed and not low.lower_bound


def test_search_params_are_checked() -> None:
    with pytest.raises(ValueError, match="precision"):
        search_params(precision=0)
    with pytest.raises(ValueError, match="growth"):
        search_params(growth=1.0)
    with pytest.raises(ValueError, match="start-speed"):
        search_params(start_speed=0)
    assert search_params(confirm=False).confirm_margin is None


def test_a_replay_is_stable_only_when_every_stage_is() -> None:
    assert replay_verdict(["stable", "stable"]) == "stable"
    assert replay_verdict(["stable", "saturated", "failing"]) == "saturated"
    assert replay_verdict(["client_limited", "stable"]) == "client_limited"  # says nothing of the server
    # a stage the server failed wins over a limited one: the replay failed, whatever came after
    assert replay_verdict(["saturated", "client_limited"]) == "saturated"
    assert replay_verdict(["generator_limited", "failing"]) == "failing"
    assert replay_verdict([]) == "incomplete"


def test_the_trace_peaks_per_minute_and_per_second() -> None:
    rng = np.random.default_rng(0)
    calm = np.sort(rng.uniform(0, 180, 180 * 10))  # 10 rps for 3 minutes
    burst = np.linspace(100.0, 100.999, 50)  # 50 more in one second
    peak_min, peak_s = trace_peaks(np.sort(np.concatenate([calm, burst])))
    assert peak_s >= 50
    assert 10 < peak_min < 10 + 50 / 60 + 3  # the busiest minute holds the burst
    flat_min, flat_s = trace_peaks(np.arange(2000) / 100.0)  # 20 s at 100 rps: shorter than a minute
    assert flat_min == pytest.approx(100.0, rel=0.01) and flat_s == 100
    assert trace_peaks(np.array([])) == (0.0, 0.0)


def test_replicas_for_the_trace_peak_at_the_margin() -> None:
    assert replicas_for_peak(4.0, 0.15) == 1
    assert replicas_for_peak(0.5, 0.0) == 2  # a fleet's trace: one replica takes half of it
    assert replicas_for_peak(0.25, 0.2) == 5  # 1 / (0.25 x 0.8)
    with pytest.raises(ValueError):
        replicas_for_peak(0.0, 0.1)


def _stage(i: int, verdict: str, p99: float) -> dict[str, object]:
    return {"index": i, "verdict": verdict, "offered_rps": 100.0 * (i + 1),
            "latency_ms": {"p50": p99 / 2, "p99": p99, "p999": p99 * 2}}  # fmt: skip


def test_latency_at_a_fraction_is_the_worst_stage_of_its_replay() -> None:
    row = latency_at(0.8, 3.2, [_stage(0, "stable", 5.0), _stage(1, "stable", 9.0), _stage(2, "stable", 7.0)])
    assert row["worst_stage"] == 1 and row["p99_ms"] == 9.0 and row["p50_ms"] == 4.5 and row["offered_rps"] == 200.0
    assert row["verdict"] == "stable" and row["fraction"] == 0.8 and row["speed"] == 3.2


def test_the_headroom_block_and_its_terminal_lines() -> None:
    params = search_params(precision=0.05)
    _, measure = server(4.0)
    out = search_speed(measure, params)  # type: ignore[arg-type]
    lat = [latency_at(1.0, out.speed or 0, [_stage(0, "stable", 12.0)])]
    replays = [{"speed": m.rate_rps, "phase": m.phase, "verdict": m.verdict, "stages": 1,
                "unstable_stages": int(m.verdict != "stable"), "p99_ms_worst_stage": 3.0, "seconds": 5.0}
               for m in out.history]  # fmt: skip
    block = headroom_block(out, params, 100.0, 180.0, 0.15, replays, lat)
    assert block["speed"] == pytest.approx(out.speed, abs=1e-4) and block["confirmed"]
    assert block["capacity_rps"] == pytest.approx(100.0 * block["speed"], rel=1e-3)
    assert block["target_rps_per_replica"] == pytest.approx(block["capacity_rps"] * 0.85, rel=1e-3)
    assert block["replicas_for_peak"] == 1 and block["trace_peak_rps_per_second"] == 180.0
    buf = io.StringIO()
    print_headroom(Console(file=buf, width=200), block)
    text = buf.getvalue()
    assert f"headroom: X = {block['speed']:.3f}" in text and "confirmed" in text
    assert "100.0 rps in its busiest minute, 180 in its busiest second" in text
    assert "needs 1 replica(s)" in text and "12.00" in text


def test_a_profile_replay_failing_below_the_per_replica_target_sizes_nothing() -> None:
    """X = 4 was bracketed and confirmed, but the replay at 80 % of it (below the 85 % a replica is given)
    saturated: the block still gave a capacity, a per-replica target and a replica count (and --emit-k8s
    wrote manifests) for traffic a replica did not sustain."""
    params = search_params(precision=0.05)
    _, measure = server(4.0)
    out = search_speed(measure, params)  # type: ignore[arg-type]
    x = out.speed or 0
    lat = [
        latency_at(0.5, x * 0.5, [_stage(0, "stable", 5.0)]),
        latency_at(0.8, x * 0.8, [_stage(0, "saturated", 90.0)]),
        latency_at(1.0, x, [_stage(0, "stable", 12.0)]),
    ]
    block = headroom_block(out, params, 100.0, 180.0, 0.15, [], lat)
    assert block["speed"] == pytest.approx(x, abs=1e-4) and not block["lower_bound"]
    assert block["capacity_rps"] is None and block["target_rps_per_replica"] is None
    assert block["replicas_for_peak"] is None and "80% of X" in block["sizing_withheld"]
    buf = io.StringIO()
    print_headroom(Console(file=buf, width=200), block)
    assert "no replica count or per-replica target" in buf.getvalue()
    # failing above the per-replica target (margin 0.15: the replay at 80 % is below it; margin 0.25 is not)
    assert headroom_block(out, params, 100.0, 180.0, 0.25, [], lat)["replicas_for_peak"] == 1
    assert headroom_block(out, params, 100.0, 180.0, 0.15, [], [lat[0], lat[2]])["sizing_withheld"] is None
