"""``satpoint diff`` never passes in silence what it did not judge: a new target lost under a load the base
survived, a rate the base run held that the new run never judged, a new side that answered nothing, stages
judged by looser rules, and fewer searches than the base's against its lowest answer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from satpoint.analysis.diff.compare import Folder, diff_folders
from satpoint.metrics.records import Outcome, Records
from tests.analysis.diff.test_diff_sides import find_doc, saturation


def rows(rate: float, seed: int, outcome: Outcome = Outcome.OK, seconds: int = 20) -> Records:
    """A stage's rows due at ``rate``: 10 ms each, within 1 %, all with ``outcome``."""
    n = int(rate * seconds)
    r = Records.empty(np.arange(n) / rate)
    r.sent[:] = r.intended
    r.done[:] = r.sent + 0.01 * (1 + 0.01 * np.random.default_rng(seed).standard_normal(n))
    r.outcome[:] = outcome
    return r


def stage(segment: int, rate: float, verdict: str = "stable", throughput: float | None = None) -> dict[str, Any]:
    return {"segment": segment, "target_rps": rate, "verdict": verdict, "window_start_s": 0.0, "window_end_s": 20.0,
            "throughput_rps": rate if throughput is None else throughput}  # fmt: skip


RATES = (100.0, 200.0, 300.0)


def base_run() -> Folder:
    doc = {"kind": "run", "stages": [stage(i, r) for i, r in enumerate(RATES)]}
    return Folder("b", "run", doc, {i: rows(r, i) for i, r in enumerate(RATES)}, dict.fromkeys(range(3), "run"))


def by_metric(doc: Any, metric: str) -> list[Any]:
    return [m for m in doc.metrics if m.metric == metric]


def test_a_run_whose_target_died_in_its_second_stage_is_a_regression() -> None:
    """The new server crashed 3 s into the 200 rps stage (the stage is incomplete, 300 rps never ran): only
    100 rps was judged on both sides, and it was no_change, so the diff said no_change (exit 0)."""
    lost = {"segment": 1, "stage": 2, "at_s": 3.0, "message": "the target stopped answering during stage 2 (200 rps)"}
    doc = {"kind": "run", "stages": [stage(0, 100.0), stage(1, 200.0, "incomplete")], "target_lost": lost}
    new = Folder("n", "run", doc, {0: rows(100.0, 10), 1: rows(200.0, 11)}, {0: "run", 1: "run"})
    out = diff_folders(base_run(), new)
    assert out.verdict == "regression" and out.regressed
    (alive,) = by_metric(out, "target_answering")
    assert alive.verdict == "regression" and "a load the base ran without losing its own" in alive.text
    assert [(m.point, m.verdict) for m in by_metric(out, "stage_judged")] == [
        ("200 rps", "inconclusive"),
        ("300 rps", "inconclusive"),
    ]


def test_an_interrupted_run_is_not_a_pass_for_the_rates_it_never_ran() -> None:
    doc = {"kind": "run", "stages": [stage(0, 100.0)], "interrupted": True}
    out = diff_folders(base_run(), Folder("n", "run", doc, {0: rows(100.0, 10)}, {0: "run"}))
    assert out.verdict == "inconclusive" and not out.regressed
    assert [m.point for m in by_metric(out, "stage_judged")] == ["200 rps", "300 rps"]
    assert "the new run was interrupted" in by_metric(out, "stage_judged")[0].text


def test_a_run_that_answered_only_errors_is_a_regression() -> None:
    """Every request answered HTTP 500 (throughput 0): the throughput's log ratio raised a math domain error
    instead of a verdict."""
    doc = {"kind": "run", "stages": [stage(i, r, "failing", throughput=0.0) for i, r in enumerate(RATES)]}
    recs = {i: rows(r, 10 + i, Outcome.HTTP_ERROR) for i, r in enumerate(RATES)}
    out = diff_folders(base_run(), Folder("n", "run", doc, recs, dict.fromkeys(range(3), "run")))
    assert out.verdict == "regression"
    thr = by_metric(out, "throughput_rps")
    assert len(thr) == 3 and all(m.verdict == "regression" and m.change == -1.0 for m in thr)
    assert all(m.verdict == "regression" for m in by_metric(out, "error_rate"))


def test_a_find_that_lost_its_target_after_its_answer_is_a_regression() -> None:
    """The new server answered the same 300 rps, then died in its latency profile at 270 rps, a rate the
    base profiled and survived: the bracket is closed, so the saturation point said no_change."""
    stages = [stage(0, 300.0), stage(1, 315.0, "saturated"), stage(2, 270.0)]
    base = find_doc([(300, 315)], stages=stages)
    lost = {"segment": 2, "stage": 3, "at_s": 4.0, "message": "the target stopped answering during stage 3 (270 rps)"}
    new = find_doc([(300, 315)], stages=[*stages[:2], stage(2, 270.0, "failing")], target_lost=lost)
    purposes = {0: "staircase", 1: "staircase", 2: "profile"}
    out = diff_folders(Folder("b", "find", base, {}, purposes), Folder("n", "find", new, {}, purposes))
    assert saturation(out).verdict == "no_change"
    assert out.verdict == "regression" and by_metric(out, "target_answering")[0].verdict == "regression"
    # lost above every rate the base ran: nothing says the base would have lived
    high = find_doc([(300, 315)], stages=[*stages[:2], stage(2, 400.0, "failing")], target_lost=lost)
    out = diff_folders(Folder("b", "find", base, {}, purposes), Folder("n", "find", high, {}, purposes))
    assert by_metric(out, "target_answering")[0].verdict == "inconclusive" and out.verdict == "inconclusive"
    # the base lost its own too: not judged here
    assert by_metric(diff_folders(Folder("b", "find", new, {}), Folder("n", "find", new, {})), "target_answering") == []


def test_stages_judged_by_looser_rules_are_refused() -> None:
    """--max-error-rate 20 % makes a version failing 15 % of its requests hold its rates; --slo drops rates
    over the objective: two folders judged by different rules measured different things."""
    base = find_doc([(300, 315)], rules={"max_error_rate": 0.01, "slo_ms": {"p99": 50.0}})
    loose = find_doc([(400, 420)], rules={"max_error_rate": 0.2, "slo_ms": {}})
    said = r"max error rate 0\.01 \(base\) vs 0\.2 \(new\); SLO p99<50ms \(base\) vs none"
    with pytest.raises(ValueError, match=said):
        diff_folders(Folder("b", "find", base, {}), Folder("n", "find", loose, {}))
    same = find_doc([(300, 315)], rules={"max_error_rate": 0.01, "slo_ms": {"p99": 50}})
    assert diff_folders(Folder("b", "find", base, {}), Folder("n", "find", same, {})).verdict == "no_change"


def test_fewer_searches_cannot_clear_the_base_lowest_answer() -> None:
    """The base's lowest of three searches is 280 rps; one new search answers 360: the lowest of one search is
    higher by chance alone, so neither an improvement nor no_change; a lower answer is still a regression."""
    base = find_doc([(280, 294), (300, 315), (300, 315)])
    out = diff_folders(Folder("b", "find", base, {}), Folder("n", "find", find_doc([(360, 378)]), {}))
    m = saturation(out)
    assert m.verdict == "inconclusive" and "ran 1 search, the base 3" in m.text and out.verdict == "inconclusive"
    assert saturation(diff_folders(Folder("b", "find", base, {}), Folder("n", "find", find_doc([(285, 300)]), {}))
                      ).verdict == "inconclusive"  # fmt: skip
    low = saturation(diff_folders(Folder("b", "find", base, {}), Folder("n", "find", find_doc([(200, 210)]), {})))
    assert low.verdict == "regression"
    # more searches on the new side than the base's: judged as before
    many = find_doc([(300, 315), (300, 315), (300, 315)])
    assert saturation(diff_folders(Folder("b", "find", find_doc([(300, 315)]), {}), Folder("n", "find", many, {}))
                      ).verdict == "no_change"  # fmt: skip


def sweep(at_rps: float | None, sat: float | None, failed: str = "") -> Folder:
    row = {"id": "p01", "label": "workers=2", "knobs": {"workers": 2}, "measurements": 0 if sat is None else 1,
           "repeats": [] if sat is None else [{"saturation_rps": sat, "unstable_rps": sat * 1.05}],
           "saturation_rps": None if sat is None else {"median": sat, "min": sat, "max": sat, "n": 1},
           "bracket_rps": None if sat is None else [sat, sat * 1.05],
           "at_rps": {"p50_ms": {"median": 10.0, "min": 10.0, "max": 10.0, "n": 1}}}  # fmt: skip
    ms = [{"point": "p01", "repeat": 0, "status": "failed", "error": failed}] if failed else []
    doc = {"kind": "sweep", "config": {"at_rps": at_rps, "slo": [], "max_error_rate": 0.01}, "points": [row],
           "measurements": ms}  # fmt: skip
    return Folder("s", "sweep", doc, {})


def test_sweeps_judged_at_another_rate_are_refused_and_a_point_whose_server_died_is_a_regression() -> None:
    """Latency at --at-rps 100 against latency at --at-rps 200 is another offered load: it was compared.  A
    point whose every measurement failed (the server killed for its memory) had no figure: inconclusive."""
    with pytest.raises(ValueError, match=r"--at-rps 100\.0 \(base\) vs 200\.0 \(new\)"):
        diff_folders(sweep(100.0, 300.0), sweep(200.0, 300.0))
    assert diff_folders(sweep(100.0, 300.0), sweep(100.0, 300.0)).verdict == "no_change"
    out = diff_folders(sweep(100.0, 300.0), sweep(100.0, None, "the server was killed by the OOM killer"))
    m = saturation(out)
    assert m.verdict == "regression" and "OOM killer" in m.text and out.verdict == "regression"
    # no measurement failed (none ran): nothing said about the server
    assert saturation(diff_folders(sweep(100.0, 300.0), sweep(100.0, None))).verdict == "inconclusive"


def test_a_run_lost_far_below_where_the_base_lost_its_own_is_a_regression() -> None:
    """The base crashed in its third stage (300 rps) after holding 100 and 200; the new version crashed in its
    first (100 rps).  Both lost their target, so nothing judged it: the rates the base held were 'not judged'
    (inconclusive) and the diff exited 0."""
    lost3 = {"segment": 2, "stage": 3, "at_s": 3.0, "message": "the target stopped answering during stage 3"}
    base_doc = {"kind": "run", "stages": [stage(0, 100.0), stage(1, 200.0), stage(2, 300.0, "incomplete")],
                "target_lost": lost3}  # fmt: skip
    base = Folder("b", "run", base_doc, {i: rows(r, i) for i, r in enumerate(RATES)}, dict.fromkeys(range(3), "run"))
    lost1 = {"segment": 0, "stage": 1, "at_s": 3.0, "message": "the target stopped answering during stage 1"}
    new_doc = {"kind": "run", "stages": [stage(0, 100.0, "incomplete")], "target_lost": lost1}
    out = diff_folders(base, Folder("n", "run", new_doc, {0: rows(100.0, 10)}, {0: "run"}))
    (alive,) = by_metric(out, "target_answering")
    assert alive.verdict == "regression" and out.verdict == "regression" and out.regressed
    # lost at the rate the base was lost at (or within the tolerance of it): nothing to say
    same = {"kind": "run", "stages": [stage(0, 100.0), stage(1, 200.0), stage(2, 300.0, "incomplete")],
            "target_lost": lost3}  # fmt: skip
    new = Folder("n", "run", same, {i: rows(r, 20 + i) for i, r in enumerate(RATES)}, dict.fromkeys(range(3), "run"))
    assert by_metric(diff_folders(base, new), "target_answering") == []


def test_searches_find_did_not_count_do_not_make_the_lowest_of_one_clear_the_base() -> None:
    """The new find ran three searches; the budget cut two of them coarse (200-400 rps, not counted: find
    publishes the one precise search's 360).  Its figure is the lowest of one search, not of three: against
    the base's lowest of three (280) it is no improvement, nor no_change."""
    base = find_doc([(280, 294), (300, 315), (300, 315)])
    new = find_doc([(360, 378), (200, 400), (200, 400)], saturation_rps=360, unstable_rps=378)
    m = saturation(diff_folders(Folder("b", "find", base, {}), Folder("n", "find", new, {})))
    assert m.verdict == "inconclusive" and "ran 1 search, the base 3" in m.text
    # three searches counted on both sides: judged as before
    same = find_doc([(300, 315), (300, 315), (290, 304.5)])
    m = saturation(diff_folders(Folder("b", "find", base, {}), Folder("n", "find", same, {})))
    assert m.verdict != "inconclusive"
