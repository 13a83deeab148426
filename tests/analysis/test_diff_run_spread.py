"""``satpoint diff`` does not take the noise between two runs for a change: a figure resting on one run a side
(one search, one stage) must move by more than ``--run-spread`` (at a loaded rate, times its queueing); with
several searches on both sides, the base's own spread is that noise."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from satpoint.analysis.diff import Folder, diff_folders
from satpoint.analysis.diff_rows import queueing_factor
from satpoint.analysis.diff_verdict import DEFAULT_RUN_SPREAD
from satpoint.metrics.records import Outcome, Records
from tests.analysis.test_diff import stage_of
from tests.analysis.test_diff_sides import find_doc, saturation


def diff(base: dict[str, Any], new: dict[str, Any], **kw: Any) -> Any:
    return diff_folders(Folder("b", "find", base, {}), Folder("n", "find", new, {}), **kw)


@pytest.mark.parametrize(
    ("base", "new"),
    [((766.1, 798.0), (702.5, 733.6)), ((733.6, 766.1), (800.0, 835.0))],  # two A/A pairs of one search each
)
def test_one_search_a_side_within_the_run_spread_is_not_a_verdict(
    base: tuple[float, float], new: tuple[float, float]
) -> None:
    """The embedded MLServer's capacity moved -8.3 % and +9.1 % between two unchanged finds of one search,
    their brackets apart: no regression, no improvement, but inconclusive (a repeat would decide)."""
    m = saturation(diff(find_doc([base]), find_doc([new])))
    assert DEFAULT_RUN_SPREAD == 0.10
    assert m.verdict == "inconclusive" and m.allowance == 0.10
    assert "within the 10 % that one run a side moves" in m.text and "--repeats 3" in m.text
    # the rule off (--run-spread 0): the brackets apart and the change beyond 5 % were a verdict
    assert saturation(diff(find_doc([base]), find_doc([new]), run_spread=0.0)).verdict in ("regression", "improvement")


def test_a_change_beyond_the_run_spread_is_still_called() -> None:
    doc = diff(find_doc([(300.0, 315.0)]), find_doc([(255.0, 267.8)]))
    assert saturation(doc).verdict == "regression" and doc.run_spread == DEFAULT_RUN_SPREAD
    assert saturation(diff(find_doc([(300.0, 315.0)]), find_doc([(340.0, 357.0)]))).verdict == "improvement"
    # a wider --run-spread asks for more
    assert saturation(diff(find_doc([(300.0, 315.0)]), find_doc([(255.0, 267.8)]), run_spread=0.2)).verdict == (
        "inconclusive"
    )


def test_with_repeats_the_base_spread_is_the_noise() -> None:
    """Three searches a side: the base's own spread (700-766 rps: 9.4 %) is what an unchanged server does, so
    a lowest answer 5.7 % lower is undecided; a base whose searches agree lets the same drop be called."""
    spread_base = find_doc([(700.0, 733.0), (733.0, 766.0), (766.0, 800.0)])
    lower = find_doc([(660.0, 690.0), (700.0, 733.0), (733.0, 766.0)])
    m = saturation(diff(spread_base, lower))
    assert m.verdict == "inconclusive" and m.allowance == pytest.approx(66 / 700, abs=1e-6)
    tight_base = find_doc([(700.0, 733.0), (700.0, 733.0), (700.0, 733.0)])
    tight = saturation(diff(tight_base, lower))
    assert tight.verdict == "regression" and not tight.allowance
    # the new side's spread is not the noise: one search of three at 250 is the regression itself
    same = find_doc([(300.0, 315.0)] * 3)
    assert saturation(diff(same, find_doc([(250.0, 262.5), (300.0, 315.0), (300.0, 315.0)]))).verdict == "regression"


def rows_at(rate: float, latency_ms: float, seed: int, seconds: int = 12) -> Records:
    n = int(rate * seconds)
    r = Records.empty(np.arange(n) / rate)
    r.sent[:] = r.intended
    r.done[:] = r.sent + latency_ms / 1000 * (1 + 0.01 * np.random.default_rng(seed).standard_normal(n))
    r.outcome[:] = Outcome.OK
    return r


def run_folder(name: str, p50s: dict[float, float], seed: int) -> Folder:
    stages, recs = [], {}
    for i, (rate, ms) in enumerate(sorted(p50s.items())):
        stages.append({"segment": i, "target_rps": rate, "verdict": "stable", "throughput_rps": rate,
                       "window_start_s": 0.0, "window_end_s": 12.0})  # fmt: skip
        recs[i] = rows_at(rate, ms, seed + i)
    return Folder(name, "run", {"kind": "run", "stages": stages}, recs, dict.fromkeys(recs, "run"))


def p50_at(doc: Any, point: str) -> Any:
    return next(m for m in doc.metrics if m.metric == "latency_p50_ms" and m.point == point)


def test_latency_at_a_loaded_rate_is_judged_with_its_queueing() -> None:
    """Two runs of one server whose capacity moved between them: at 100 rps (no queueing) the latency is the
    same; at 560 rps it had 4x the idle latency and is 23 % lower: a 10 % capacity move does that to a queue,
    so it is undecided.  The same 23 % at the idle rate is called."""
    base = run_folder("b", {100.0: 10.0, 560.0: 40.0}, 1)
    new = run_folder("n", {100.0: 10.0, 560.0: 30.8}, 11)
    doc = diff_folders(base, new)
    loaded = p50_at(doc, "560 rps")
    assert loaded.verdict == "inconclusive" and loaded.allowance == pytest.approx(0.4, rel=0.02)
    assert p50_at(doc, "100 rps").verdict == "no_change"
    assert p50_at(diff_folders(base, new, run_spread=0.0), "560 rps").verdict == "improvement"
    idle = diff_folders(run_folder("b", {100.0: 10.0}, 1), run_folder("n", {100.0: 7.7}, 11))
    assert p50_at(idle, "100 rps").verdict == "improvement" and p50_at(idle, "100 rps").allowance == 0.1
    # and a slower version at a loaded rate, beyond its queueing's allowance, is a regression
    slow = diff_folders(base, run_folder("n", {100.0: 10.0, 560.0: 80.0}, 11))
    assert p50_at(slow, "560 rps").verdict == "regression"


def test_the_queueing_factor() -> None:
    idle, loaded = stage_of(10.0, 1), stage_of(40.0, 2, rate=560.0)
    assert queueing_factor([loaded], idle) == pytest.approx(4.0, rel=0.01)
    assert queueing_factor([idle], idle) == 1.0 and queueing_factor([loaded], None) == 1.0
    assert queueing_factor([stage_of(5.0, 3)], idle) == 1.0  # never below 1
