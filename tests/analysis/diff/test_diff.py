"""``satpoint diff``'s verdicts: the rule on two ranges, the saturation brackets, the block bootstrap, sweeps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from satpoint.analysis.diff.calibration import calibrated
from satpoint.analysis.diff.compare import (
    Answer,
    Folder,
    diff_folders,
    find_answers,
    saturation_diff,
    saturation_side,
    sweep_points_diff,
)
from satpoint.analysis.diff.rows import StageRows, load_diffs, stage_rows
from satpoint.analysis.diff.target import TARGET_HOLD_PURPOSE, baseline_target
from satpoint.analysis.diff.tolerances import DEFAULT_TAIL_TOLERANCE, TAIL_METRICS
from satpoint.analysis.diff.verdict import Side, judge, make_doc
from satpoint.metrics.records import Outcome, Records


def side(value: float, low: float, high: float | None, n: int = 3) -> Side:
    return Side(value=value, low=low, high=high, n=n)


@pytest.mark.parametrize(
    ("base", "new", "better", "strict", "verdict"),
    [
        # capacity (search brackets, strict=False): higher is better
        (side(300, 295, 310), side(255, 250, 262), "higher", False, "regression"),
        (side(300, 295, 310), side(330, 326, 340), "higher", False, "improvement"),
        (side(300, 295, 310), side(302, 296, 311), "higher", False, "no_change"),
        # overlapping ranges with a change beyond the tolerance: never no_change
        (side(300, 200, 400), side(240, 150, 350), "higher", False, "inconclusive"),
        # apart, but by less than the tolerance, and a small change: not a regression
        (side(300, 298, 302), side(291, 289, 293), "higher", False, "no_change"),
        # brackets apart, however little, with a change beyond the tolerance: the change is real and it matters
        (side(300, 290, 330), side(270, 250, 288), "higher", False, "regression"),
        (side(301.9, 295.4, 308.4), side(329.2, 322.1, 336.4), "higher", False, "improvement"),
        # ranges of sampled figures (strict, a sweep at --at-rps): apart at all, with a change beyond the
        # tolerance, is a change (not apart by more than the tolerance: that took tolerance + both half-widths)
        (side(300, 290, 330), side(270, 250, 288), "higher", True, "regression"),
        (side(12.8, 11.9, 13.7), side(13.9, 13.9, 15.7), "lower", True, "regression"),
        # and no_change only when every change the ranges allow is within the tolerance (review H3: +70 % allowed)
        (side(20, 16, 26), side(21, 15, 34), "lower", True, "inconclusive"),
        (side(20, 19.8, 20.2), side(20.2, 20.0, 20.4), "lower", True, "no_change"),
        # the medians moved beyond the tolerance, but the ranges overlap: more measurements would decide
        (side(300, 290, 330), side(270, 250, 295), "higher", False, "inconclusive"),
        # latency: lower is better
        (side(10, 9.8, 10.2), side(12, 11.8, 12.2), "lower", True, "regression"),
        (side(12, 11.8, 12.2), side(10, 9.8, 10.2), "lower", True, "improvement"),
        # a lower bound (open upwards) overlapping: nothing ruled out
        (side(300, 295, None), side(298, 290, 310), "higher", False, "inconclusive"),
        # a new lower bound far above the base's range is an improvement all the same
        (side(300, 295, 310), side(400, 390, None), "higher", False, "improvement"),
    ],
)
def test_judge_rule(base: Side, new: Side, better: Any, strict: bool, verdict: str) -> None:
    assert judge(base, new, 0.05, better, strict=strict).verdict == verdict


def test_judge_absolute_error_rate() -> None:
    base = side(0.0, 0.0, 0.001)
    assert judge(base, side(0.05, 0.04, 0.06), 0.005, "lower", absolute=True).verdict == "regression"
    assert judge(base, side(0.002, 0.0, 0.004), 0.005, "lower", absolute=True).verdict == "no_change"


def find_summary(answers: list[tuple[float, float | None]], notes: tuple[str, ...] = ()) -> dict[str, Any]:
    reps = [{"repeat": i, "saturation_rps": s, "unstable_rps": u, "stages": 5, "finished": True}
            for i, (s, u) in enumerate(answers)]  # fmt: skip
    sats = [s for s, _ in answers]
    return {
        "kind": "find",
        "saturation_rps": min(sats),
        "unstable_rps": answers[sats.index(min(sats))][1],
        "find_notes": list(notes),
        "search": {"repeats": reps if len(answers) > 1 else [], "finished": True},
        "stages": [],
    }


def sat_verdict(base: dict[str, Any], new: dict[str, Any]) -> Any:
    return saturation_diff(saturation_side(find_answers(base)), saturation_side(find_answers(new)), "search", 0.05)


def test_saturation_300_vs_255_with_repeats_is_a_regression() -> None:
    base = find_summary([(300, 306), (297, 303), (303, 309)])
    new = find_summary([(255, 260), (252, 258), (257, 263)])
    m = sat_verdict(base, new)
    assert m.verdict == "regression"
    assert m.base.n == m.new.n == 3
    # the range: lowest answer to highest unstable rate; the value: the median of the brackets' middles
    assert m.base.low == 297 and m.base.high == 309 and m.base.value == 303
    assert m.new.value == 257.5 and m.change == pytest.approx(257.5 / 303 - 1)
    assert "3 searches" in m.text and "tolerance 5 %" in m.text
    assert "one measurement each" not in m.text
    assert sat_verdict(base, find_summary([(330, 336), (327, 333), (333, 339)])).verdict == "improvement"
    assert sat_verdict(base, find_summary([(300, 306), (300, 306), (297, 303)])).verdict == "no_change"
    assert sat_verdict(base, find_summary([(291, 297), (291, 297), (288, 294)])).verdict != "regression"


def test_one_search_each_says_so() -> None:
    m = sat_verdict(find_summary([(300, 315)]), find_summary([(240, 252)]))
    assert m.verdict == "regression"
    assert m.single and "rests on one measurement each" in m.text


def test_a_lower_bound_is_open_upwards() -> None:
    base = find_summary([(300, 315)])
    new = find_summary([(298, None)], notes=("generator-limited: the generator fell behind",))
    assert find_answers(new) == [Answer(298, None)]
    m = saturation_diff(saturation_side(find_answers(base)), saturation_side(find_answers(new)), "search", 0.05,
                        ["generator_limited"])  # fmt: skip
    assert m.verdict == "inconclusive" and m.new.high is None
    assert "lower bound" in m.text


def sweep_doc(points: list[tuple[str, dict[str, Any], list[tuple[float, float | None]]]]) -> dict[str, Any]:
    rows = []
    for pid, knobs, answers in points:
        sats = [s for s, _ in answers]
        highs = [u for _, u in answers]
        rows.append({
            "id": pid, "label": ",".join(f"{k}={v}" for k, v in knobs.items()), "knobs": knobs,
            "measurements": len(answers),
            "repeats": [{"saturation_rps": s, "unstable_rps": u} for s, u in answers],
            "saturation_rps": {"median": float(np.median(sats)), "min": min(sats), "max": max(sats), "n": len(sats)},
            "bracket_rps": [min(sats), None if None in highs else max(h for h in highs if h is not None)],
            "lower_bound": None in highs, "lower_bound_reasons": ["budget"] if None in highs else [],
            "at_rps": None,
        })  # fmt: skip
    return {"config": {"repeats": 3}, "points": rows}


def test_sweeps_matched_by_knobs() -> None:
    base = sweep_doc([
        ("p01", {"workers": 1}, [(100, 105), (101, 106), (99, 104)]),
        ("p02", {"workers": 2}, [(200, 210), (198, 208), (202, 212)]),
        ("p03", {"workers": 4}, [(300, 315)]),
    ])  # fmt: skip
    new = sweep_doc([
        ("p01", {"workers": 2}, [(160, 168), (158, 166), (161, 169)]),
        ("p02", {"workers": 1}, [(100, 105), (102, 107), (99, 104)]),
        ("p03", {"workers": 8}, [(300, 315)]),
    ])  # fmt: skip
    doc = diff_folders(Folder("a", "sweep", base, {}), Folder("b", "sweep", new, {}))
    by_point = {m.point: m.verdict for m in doc.metrics}
    assert by_point == {"workers=1": "no_change", "workers=2": "regression"}
    assert doc.verdict == "regression" and doc.regressed
    assert any("workers=4: only in the base" in n for n in doc.notes)
    assert any("workers=8: only in the new" in n for n in doc.notes)


def test_two_points_of_one_sweep() -> None:
    doc_in = sweep_doc([
        ("p01", {"model_dir": "v1"}, [(100, 105), (101, 106), (99, 104)]),
        ("p02", {"model_dir": "v2"}, [(130, 136), (131, 137), (129, 135)]),
    ])  # fmt: skip
    doc = sweep_points_diff(doc_in, "s", "p01", "model_dir=v2", 0.05)
    assert [m.verdict for m in doc.metrics] == ["improvement"]
    assert doc.base["point"] == "p01" and doc.new["point"] == "p02"
    assert any("interleaved" in n for n in doc.notes)
    with pytest.raises(ValueError, match="no point 'p09'"):
        sweep_points_diff(doc_in, "s", "p01", "p09", 0.05)


def test_folders_of_different_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="different kinds"):
        diff_folders(Folder("a", "run", {}, {}), Folder("b", "find", {}, {}))


def test_a_generator_limited_find_is_bracketed_where_the_server_itself_failed() -> None:
    """find calls its answer a lower bound when the generator fell behind in any stage; a rate the server
    itself could not hold still closes the range (its capacity is below it whatever the generator did)."""
    notes = ("generator-limited: the generator fell behind before the server saturated",)
    summary = find_summary([(248.4, 259.4), (248.4, 259.4)], notes=notes)
    assert find_answers(summary) == [Answer(248.4, None), Answer(248.4, None)]
    summary["stages"] = [
        {"target_rps": 259.4, "verdict": "saturated"},
        {"target_rps": 211.1, "verdict": "generator_limited"},
    ]
    assert find_answers(summary) == [Answer(248.4, 259.4), Answer(248.4, 259.4)]
    # the unstable rate was the generator's own limit: nothing closes the range
    summary["stages"] = [{"target_rps": 259.4, "verdict": "generator_limited"}]
    assert find_answers(summary) == [Answer(248.4, None), Answer(248.4, None)]
    # a search that lost its target (the server failing, not the generator) stays closed where the server
    # itself could not hold the rate
    summary["stages"] = [{"target_rps": 259.4, "verdict": "saturated"}]
    summary["target_lost"] = {"message": "gone"}
    assert find_answers(summary) == [Answer(248.4, 259.4), Answer(248.4, 259.4)]


def test_a_sweep_written_before_repeats_were_recorded_compares_by_its_spread() -> None:
    doc_in = sweep_doc([("p01", {"workers": 1}, [(100, 105)]), ("p02", {"workers": 2}, [(200, 210)])])
    for row in doc_in["points"]:
        del row["repeats"]
        row["saturation_rps"] = {**row["saturation_rps"], "n": 2}
    doc = sweep_points_diff(doc_in, "s", "p01", "p02", 0.05)
    (m,) = doc.metrics
    assert m.verdict == "improvement" and m.base.n == 2 and m.base.low == 100 and m.base.high == 105


def stage_of(latency_ms: float, seed: int, rate: float = 100.0, seconds: int = 8) -> StageRows:
    rng = np.random.default_rng(seed)
    n = int(rate * seconds)
    rec = Records.empty(np.arange(n) / rate)
    rec.sent[:] = rec.intended
    rec.done[:] = rec.sent + latency_ms / 1000 * (1 + 0.01 * rng.standard_normal(n))
    rec.outcome[:] = Outcome.OK
    stage = {"target_rps": rate, "verdict": "stable", "throughput_rps": rate, "window_start_s": 0.0,
             "window_end_s": float(seconds)}  # fmt: skip
    return stage_rows(rec, stage)


def test_several_stages_per_side_span_the_noise_between_them() -> None:
    """Each stage's interval is the noise within it; stages at the same rate that disagree (a busier machine
    in one of them) widen the side's range, so the disagreement is not taken for a change."""
    base = [stage_of(10.0, 1), stage_of(11.0, 2)]
    new = [stage_of(10.0, 3), stage_of(11.4, 4)]
    p50 = next(m for m in load_diffs(base, new, "100 rps", 0.05, 0.005) if m.metric == "latency_p50_ms")
    assert p50.base.low is not None and p50.base.high is not None
    assert p50.base.low <= 10.0 * 1.002 and p50.base.high >= 11.0 * 0.998
    # the data allow a change beyond the tolerance either way: neither a regression nor a no_change
    assert p50.verdict == "inconclusive" and p50.change_low is not None and p50.change_low < -0.05
    # one stage each: the interval is the noise within a run only, and a 10 % gap is a change
    one = next(m for m in load_diffs(base[:1], new[1:], "100 rps", 0.05, 0.005) if m.metric == "latency_p50_ms")
    assert one.verdict == "regression" and one.single


def test_tail_latency_has_its_own_tolerance() -> None:
    """A/A pairs on a shared machine move p90/p99 by 15-20 % while p50 holds within 5 %: the tails are judged
    with ``tail_tolerance`` (default 20 %), the rest with ``tolerance``."""
    base = [stage_of(10.0, 1, seconds=12)]  # 1 200 rows: enough for a p99 (10 / (1 - 0.99))
    new = [stage_of(11.0, 2, seconds=12)]  # every request 10 % slower: p50 and p99 alike
    by = {m.metric: m for m in load_diffs(base, new, "100 rps", 0.05, 0.005)}
    assert DEFAULT_TAIL_TOLERANCE == 0.20
    assert by["latency_p50_ms"].verdict == "regression" and by["latency_p50_ms"].tolerance == 0.05
    assert by["service_p50_ms"].verdict == "regression"
    for metric in TAIL_METRICS:
        assert by[metric].verdict == "no_change", by[metric].text
        assert by[metric].tolerance == 0.20 and "tolerance 20 %" in by[metric].text
    assert by["throughput_rps"].tolerance == 0.05 and by["error_rate"].tolerance == 0.005
    # a tail tolerance as tight as the rest calls the tails a regression too
    tight = {m.metric: m.verdict for m in load_diffs(base, new, "100 rps", 0.05, 0.005, tail_tolerance=0.05)}
    assert all(tight[m] == "regression" for m in TAIL_METRICS)


def test_diff_json_records_both_tolerances_and_calibration_reports_each_group() -> None:
    base, new = [stage_of(10.0, 1, seconds=12)], [stage_of(11.0, 2, seconds=12)]
    metrics = load_diffs(base, new, "100 rps", 0.05, 0.005, tail_tolerance=0.3)
    doc = make_doc("run", {"dir": "a"}, {"dir": "b"}, 0.05, 0.005, metrics, [], "0", tail_tolerance=0.3)
    assert doc.tolerance == 0.05 and doc.tail_tolerance == 0.3
    assert doc.model_dump()["tail_tolerance"] == 0.3
    cal = calibrated(doc).calibration
    assert cal is not None
    by = {m.metric: m for m in metrics}
    # each group's quiet tolerance: its largest change whose interval lies beyond no change (Holm-adjusted)
    central = max(abs(by[m].change or 0) for m in ("latency_p50_ms", "service_p50_ms"))
    tail = max(abs(by[m].change or 0) for m in TAIL_METRICS)
    assert cal["quiet_tolerance_central"] == pytest.approx(central, abs=1e-4) and central > 0.05
    assert cal["quiet_tolerance_tail"] == pytest.approx(tail, abs=1e-4)
    assert cal["quiet_tolerance"] == pytest.approx(max(central, tail), abs=1e-4)
    assert any("--tail-tolerance above" in n for n in calibrated(doc).notes)


def test_a_sweeps_p99_at_rps_uses_the_tail_tolerance() -> None:
    doc_in = sweep_doc([("p01", {"v": 1}, [(100, 105)] * 3), ("p02", {"v": 2}, [(100, 105)] * 3)])
    for row, (p50, p99) in zip(doc_in["points"], ((10.0, 20.0), (12.0, 23.0)), strict=True):
        row["at_rps"] = {k: {"median": v, "min": v * 0.99, "max": v * 1.01, "n": 3}
                         for k, v in (("p50_ms", p50), ("p99_ms", p99))}  # fmt: skip
    # three measurements a side: their own ranges hold the spread between them, no run-spread allowance
    verdicts = {m.metric: m.verdict for m in sweep_points_diff(doc_in, "s", "p01", "p02", 0.05).metrics}
    assert verdicts == {"saturation_rps": "no_change", "latency_p50_ms": "regression", "latency_p99_ms": "no_change"}
    for row in doc_in["points"]:  # one measurement a side: +20 % at p50 lies within the light-load allowance
        row["at_rps"] = {k: {**v, "n": 1} for k, v in row["at_rps"].items()}
    one = {m.metric: m for m in sweep_points_diff(doc_in, "s", "p01", "p02", 0.05).metrics}
    assert one["latency_p50_ms"].verdict == "inconclusive" and (one["latency_p50_ms"].allowance or 0) > 0.4
    for row in doc_in["points"]:
        row["at_rps"] = {k: {**v, "n": 3} for k, v in row["at_rps"].items()}
    tight = sweep_points_diff(doc_in, "s", "p01", "p02", 0.05, tail_tolerance=0.05)
    assert {m.metric: m.verdict for m in tight.metrics}["latency_p99_ms"] == "regression"
    assert tight.tail_tolerance == 0.05


def hold_stage(segment: int, rate: float, verdict: str, p99: float = 12.0) -> dict[str, Any]:
    return {"segment": segment, "target_rps": rate, "verdict": verdict, "throughput_rps": rate,
            "error_rate": 0.0, "latency_ms": {"p50": 10.0, "p99": p99}}  # fmt: skip


def test_baseline_target_from_summary_json_and_older_layouts() -> None:
    rec = {"margin": 0.15, "saturation_rps": 300.0, "target_rps_per_replica": 255.0}
    assert baseline_target({"kind": "find", "recommendation": rec}) == (255.0, "")
    rate, why = baseline_target({"kind": "find", "saturation_rps": 300.0})  # written before the recommendation
    assert rate is None and "older layout" in why
    assert baseline_target({"kind": "find", "recommendation": None})[1].startswith("the baseline's search found no")
    assert "run folder" in baseline_target({"kind": "run", "stages": []})[1]


@pytest.mark.parametrize(
    ("verdict", "held", "overall", "answer"),
    [
        ("stable", True, "no_change", "yes, p99 12.00 ms"),
        ("slo_violated", False, "regression", "no (slo_violated), p99 12.00 ms"),
        ("saturated", False, "regression", "no (saturated)"),
        ("incomplete", None, "inconclusive", "not judged"),
    ],
)
def test_the_hold_at_the_baselines_target_is_its_own_verdict(verdict: str, held: Any, overall: str,
                                                             answer: str) -> None:  # fmt: skip
    rec = {"margin": 0.15, "saturation_rps": 300.0, "target_rps_per_replica": 255.0}
    base = {**find_summary([(300, 306), (300, 306)]), "recommendation": rec}
    new = {**find_summary([(300, 306), (300, 306)]), "slo": {"p99": "50ms"}}
    new["stages"] = [hold_stage(0, 150.0, "stable"), hold_stage(7, 255.0, verdict)]
    purposes = {0: "staircase", 7: TARGET_HOLD_PURPOSE}
    doc = diff_folders(Folder("b", "find", base, {}), Folder("n", "find", new, {}, purposes))
    hold = doc.target_hold
    assert hold is not None and hold.held is held and hold.rate_rps == 255.0 and hold.base_target_rps == 255.0
    assert f"holds the baseline's target of 255.0 rps: {answer}" in hold.text
    assert ("within the SLO p99<50ms" in hold.text) is (held is True)
    assert doc.verdict == overall and doc.regressed is (held is False) and doc.inconclusive is (held is None)
    assert [m.verdict for m in doc.metrics] == ["no_change"]  # the saturation point's verdict stands apart
    # no hold in the new folder (a find without --baseline): no verdict line
    assert diff_folders(Folder("b", "find", base, {}), Folder("n", "find", new, {})).target_hold is None
