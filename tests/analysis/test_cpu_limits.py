"""CPU and memory limits in a sweep's grid, throttling per stage, and the ``cpu_throttled`` diagnosis."""

from __future__ import annotations

import numpy as np
import pytest

from satpoint.analysis.server.diagnosis import diagnose
from satpoint.analysis.server.server_side import stage_throttling
from satpoint.analysis.sweep.space import grid, parse_set


def test_limit_knobs_and_knobs_joined_by_plus_vary_together() -> None:
    dims = parse_set(["server_cpus+server_cpu_limit=1+none,2+0.5,2+1500m", "server_memory_limit=256M,none"], "mlserver")
    points = grid(dims)
    assert [p.label for p in points[:3]] == [
        "server_cpus=1 server_cpu_limit=none server_memory_limit=256M",
        "server_cpus=1 server_cpu_limit=none server_memory_limit=none",
        "server_cpus=2 server_cpu_limit=0.5 server_memory_limit=256M",
    ]
    assert len(points) == 6 and points[5].values["server_cpu_limit"] == "1.5"
    with pytest.raises(ValueError, match="2 values joined by"):
        parse_set(["server_cpus+server_cpu_limit=1"], "mlserver")
    with pytest.raises(ValueError, match="memory limit"):
        parse_set(["server_memory_limit=lots"], "mlserver")
    with pytest.raises(ValueError, match="unknown knob"):
        parse_set(["server_cpu_limit=1"], "sim")


def test_throttling_over_a_stage_window() -> None:
    s = {
        "cg_periods": np.array([100.0, 110.0, 120.0]),
        "cg_throttled_periods": np.array([5.0, 10.0, 14.0]),
        "cg_throttled_s": np.array([0.1, 0.4, 0.6]),
    }
    th = stage_throttling(s, np.array([0, 1, 2]), 2.0)
    assert th == {
        "periods": 20,
        "throttled_periods": 9,
        "throttled_share": 0.45,
        "throttled_s": 0.5,
        "throttled_ms_per_s": 250.0,
    }
    assert stage_throttling({k: np.full(3, np.nan) for k in s}, np.array([0, 2]), 2.0) is None


def _stage(i: int, rps: float, verdict: str, share: float, p50: float = 2.0, p99: float = 3.0) -> dict[str, object]:
    th = {"periods": 100, "throttled_periods": int(share * 100), "throttled_share": share, "throttled_s": 1.0}
    th["throttled_ms_per_s"] = 100.0
    return {
        "index": i,
        "segment": 0,
        "target_rps": rps,
        "offered_rps": rps,
        "verdict": verdict,
        "latency_ms": {"p50": p50, "p99": p99},
        "server": {"cpu_cores": {"mean": 0.5}, "allowed_cores": 0.5, "cpu_throttling": th},
    }


def test_diagnosis_names_throttling_at_saturation_and_in_the_tail() -> None:
    summary = {
        "kind": "find",
        "saturation_rps": 200.0,
        "server": {"settings": {"cpu_limit_cores": 0.5}},
        "stages": [_stage(0, 100, "stable", 0.05), _stage(1, 200, "stable", 0.1), _stage(2, 250, "saturated", 0.6)],
    }
    kinds = [d["kind"] for d in diagnose(summary, {})]
    line = next(d for d in diagnose(summary, {}) if d["kind"] == "cpu_throttled")
    assert kinds[0] == "cpu_throttled" and "at saturation" in line["text"] and "0.5 cores" in line["text"]
    assert line["evidence"]["throttled_share"] == 0.6
    summary["stages"] = [_stage(0, 100, "stable", 0.3, p50=2.0, p99=40.0), _stage(2, 250, "saturated", 0.05)]
    line = next(d for d in diagnose(summary, {}) if d["kind"] == "cpu_throttled")
    assert "below saturation" in line["text"]
    summary["stages"] = [_stage(0, 100, "stable", 0.3, p50=2.0, p99=3.0), _stage(2, 250, "saturated", 0.05)]
    assert "cpu_throttled" not in [d["kind"] for d in diagnose(summary, {})]


def test_a_sweep_with_a_limit_this_machine_cannot_apply_is_refused_before_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from satpoint.experiments.sweep_config import SweepConfig
    from satpoint.servers.limits import cgroups

    why = "cgroup v2 at /sys/fs/cgroup offers no cpu controller here (cgroup.controllers: hugetlb)"
    monkeypatch.setattr(cgroups, "process_dirs", lambda pid, controllers: ({}, dict.fromkeys(controllers, why)))
    cfg = SweepConfig(sets=("server_cpu_limit=0.5,1",))
    with pytest.raises(cgroups.CgroupUnavailable) as e:
        cfg.validate()
    assert str(e.value) == f"a CPU limit (0.5 cores) cannot be applied on this machine: {why}"
    SweepConfig(sets=("server_cpu_limit=none",)).validate()  # no limit: nothing to refuse
