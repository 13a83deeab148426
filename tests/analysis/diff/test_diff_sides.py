"""``satpoint diff`` fails closed: it judges the saturation point ``find`` publishes (the lowest search), a side
that held no rate or lost its target is a regression, and only like stages of like loads are compared."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from satpoint.analysis.diff.compare import Folder, diff_folders, match_stages
from satpoint.analysis.diff.config import load_differences
from satpoint.analysis.diff.rows import StageRows, stage_rows
from satpoint.metrics.records import Outcome, Records


def find_doc(answers: list[tuple[float, float | None]], **extra: Any) -> dict[str, Any]:
    """A find's summary.json as ``find`` writes it: the answer is the lowest search."""
    reps = [{"repeat": i, "saturation_rps": s, "unstable_rps": u, "stages": 5, "finished": True}
            for i, (s, u) in enumerate(answers)]  # fmt: skip
    low = min(answers, key=lambda a: a[0]) if answers else (None, None)
    return {
        "kind": "find", "saturation_rps": low[0], "unstable_rps": low[1], "find_notes": [],
        "search": {"repeats": reps if len(answers) > 1 else [], "finished": True}, "stages": [], **extra,
    }  # fmt: skip


def diff(base: dict[str, Any], new: dict[str, Any], purposes: dict[int, str] | None = None) -> Any:
    return diff_folders(Folder("base", "find", base, {}), Folder("new", "find", new, {}, purposes or {}))


def saturation(doc: Any) -> Any:
    return next(m for m in doc.metrics if m.metric == "saturation_rps")


def test_the_lowest_search_is_judged_as_find_publishes_it() -> None:
    """find --repeats 3: 300/300/300 against 250/300/300.  find now publishes 250 rps (and scales its HPA target on
    it): a 17 % lower capacity.  The median of the searches did not move: it is reported, not judged."""
    base = find_doc([(300, 315), (300, 315), (300, 315)])
    new = find_doc([(250, 262.5), (300, 315), (300, 315)])
    doc = diff(base, new)
    m = saturation(doc)
    assert m.verdict == "regression" and doc.verdict == "regression"
    assert m.base.value == 300 and m.new.value == 250 and m.change == pytest.approx(-1 / 6, abs=1e-5)
    # the range of the lowest capacity: from the lowest answer up to the lowest rate any search found unstable
    assert (m.new.low, m.new.high) == (250, 262.5) and (m.base.low, m.base.high) == (300, 315)
    dumped = m.model_dump()
    assert dumped["base"]["median"] == 300 and dumped["new"]["median"] == 300  # beside it, in diff.json
    assert dumped["new"]["figure"] == "lowest"
    assert "the lowest answer 250.0 rps is find's (the gate's), the median 300.0 rps" in m.text
    # the same three answers again: no change
    assert saturation(diff(base, find_doc([(300, 315), (300, 315), (300, 315)]))).verdict == "no_change"


def test_a_side_that_held_no_rate_is_a_regression() -> None:
    """Every stage failed (HTTP 500s, an OOM at start): no saturation point.  Against a side with one, that is a
    regression (and the base side failing is an improvement); not when the generator was the limit."""
    failed = find_doc([], stages=[{"segment": 0, "target_rps": 50.0, "verdict": "failing"},
                                  {"segment": 1, "target_rps": 12.5, "verdict": "failing"}])  # fmt: skip
    base = find_doc([(300, 315)])
    doc = diff(base, failed)
    m = saturation(doc)
    assert m.verdict == "regression" and doc.verdict == "regression" and doc.regressed
    assert m.new.value is None and "no rate held: 50 rps failing, 12.5 rps failing" in m.text
    assert "a side has no figure" not in m.text
    assert saturation(diff(failed, base)).verdict == "improvement"
    assert saturation(diff(failed, failed)).verdict == "inconclusive"
    # the stages a search did not run (the hold at a baseline's target) do not count
    assert saturation(diff(base, failed, {0: "baseline_target", 1: "baseline_target"})).verdict == "inconclusive"
    # the generator fell behind at every rate: nothing said about the server
    limited = find_doc([], stages=[{"segment": 0, "target_rps": 50.0, "verdict": "generator_limited"}])
    assert saturation(diff(base, limited)).verdict == "inconclusive"


def test_a_target_lost_under_load_closes_the_range_where_it_was_lost() -> None:
    """The new server crashed at 400 rps where the base held 600: not a lower bound open upwards (the generator
    did not fail, the server did), so the range ends at 400 rps: a regression."""
    base = find_doc([(600, 630)])
    stages = [{"segment": 0, "target_rps": 200.0, "verdict": "stable"},
              {"segment": 1, "target_rps": 400.0, "verdict": "failing"}]  # fmt: skip
    lost = {"segment": 1, "stage": 2, "at_s": 3.0, "message": "the target stopped answering during stage 2 (400 rps)"}
    new = find_doc([(200, None)], stages=stages, target_lost=lost)
    m = saturation(diff(base, new))
    assert (m.new.low, m.new.high) == (200, 400)
    assert m.verdict == "regression" and "the range ends there" in m.text
    # lost before any stage held: no answer, and the lost target is the cause
    first = find_doc([], stages=stages[1:], target_lost={**lost, "stage": 1})
    m = saturation(diff(base, first))
    assert m.verdict == "regression" and "stopped answering" in m.text


def rows_at(rate: float, seconds: int = 6) -> StageRows:
    n = int(rate * seconds)
    rec = Records.empty(np.arange(n) / rate)
    rec.sent[:] = rec.intended
    rec.done[:] = rec.sent + 0.01
    rec.outcome[:] = Outcome.OK
    stage = {"target_rps": rate, "verdict": "stable", "throughput_rps": rate, "window_start_s": 0.0,
             "window_end_s": float(seconds)}  # fmt: skip
    return stage_rows(rec, stage)


def test_rates_match_within_a_tenth_of_a_percent() -> None:
    """1 % in rate is 20-25 % in latency near saturation: 100 and 100.5 rps are not the same offered load."""
    assert match_stages([rows_at(100.0)], [rows_at(100.5)], stable_only=False)[0] == []
    matched, _ = match_stages([rows_at(100.0)], [rows_at(100.05)], stable_only=False)
    assert [round(r, 2) for r, _, _ in matched] == [100.0]


def test_only_the_search_profile_and_run_stages_are_compared() -> None:
    """A flame graph's stage (py-spy attached) or a hysteresis step (right after an overload) at a rate the
    base profiled is not pooled with the base's clean stage; a note names what was left out."""
    stage = {"target_rps": 100.0, "verdict": "stable", "throughput_rps": 100.0, "window_start_s": 0.0,
             "window_end_s": 6.0}  # fmt: skip
    r = Records.empty(np.arange(600) / 100.0)
    r.sent[:] = r.intended
    r.done[:] = r.sent + 0.01
    r.outcome[:] = Outcome.OK
    records = {0: r, 1: r}
    doc = {"kind": "run", "stages": [{**stage, "segment": 0}, {**stage, "segment": 1}]}
    base = Folder("b", "run", {"kind": "run", "stages": [{**stage, "segment": 0}]}, records, {0: "run"})
    new = Folder("n", "run", doc, records, {0: "flamegraph", 1: "hysteresis"})
    assert new.stages() == [] and new.left_out() == {"flamegraph": 1, "hysteresis": 1}
    out = diff_folders(base, new)
    # the rate the base held is not judged on the new side: inconclusive (diff_lost), never a pass
    assert [m.metric for m in out.metrics] == ["stage_judged"] and out.verdict == "inconclusive"
    assert any("1 flamegraph, 1 hysteresis stage(s) are not compared" in n for n in out.notes)
    assert len(Folder("n", "run", doc, records, {0: "run", 1: "profile"}).stages()) == 2


HEADER = {
    "config": {"mode": "open_loop", "load": {"arrival": "constant", "max_inflight": None, "procs": 1}},
    "target": {"url": "http://a:8080", "model": "m", "protocol": "rest", "batch_size": 1, "stream": False},
}


def test_folders_that_measured_different_loads_are_refused_with_each_difference_named() -> None:
    new = {
        "config": {"mode": "open_loop", "load": {"arrival": "poisson", "max_inflight": 64, "procs": 1}},
        "target": {"url": "http://b:9000", "model": "m2", "protocol": "grpc", "batch_size": 8, "stream": False},
        "mix": {"models": ["a", "b"], "weights": [0.5, 0.5]},
    }
    assert load_differences(HEADER, dict(HEADER)) == []
    # an older header without the keys reads as their defaults; URL and model name are what a version changes
    assert load_differences({"target": {"url": "http://x"}}, HEADER) == []
    said = load_differences(HEADER, new)
    assert said == [
        "protocol rest (base) vs grpc (new)",
        "arrival constant (base) vs poisson (new)",
        "batch size 1 (base) vs 8 (new)",
        "model mix one model (base) vs a=0.5, b=0.5 (new)",
        "max in-flight automatic (base) vs 64 (new)",
        "gRPC connections - (base) vs automatic (new)",
    ]
    base_f = Folder("b", "find", find_doc([(300, 315)]), {}, {}, HEADER)
    with pytest.raises(ValueError, match=r"measured different loads.*protocol rest \(base\) vs grpc \(new\)"):
        diff_folders(base_f, Folder("n", "find", find_doc([(300, 315)]), {}, {}, new))
