"""One bracket and tie rule (``analysis.search.brackets``) behind ``find``'s bracket, a sweep point's bracket and best
point, and the diff's saturation ranges: changing it changes every one of them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from satpoint.analysis.diff import saturation as diff_saturation
from satpoint.analysis.diff import verdict as diff_verdict
from satpoint.analysis.diff.saturation import Answer, saturation_side
from satpoint.analysis.diff.verdict import Side, judge
from satpoint.analysis.search import brackets
from satpoint.analysis.search import summary as search_summary
from satpoint.analysis.sweep import conclusions as sweep
from satpoint.analysis.sweep.conclusions import PointInput, aggregate, best


def _m(sat: float, unstable: float | None) -> dict[str, Any]:
    return {"saturation_rps": sat, "unstable_rps": unstable, "max_throughput_rps": None, "low_load": None,
            "at_operating_point": {"rps": None, "p50_ms": None, "p99_ms": None}, "at_rps": None}  # fmt: skip


def _row(pid: str, ms: list[dict[str, Any]]) -> dict[str, Any]:
    return aggregate(PointInput(pid, pid, {}, 1, 1, ms))


def test_the_bracket_and_the_tie() -> None:
    assert brackets.capacity_bracket([(100.0, 110.0), (90.0004, 99.0), (120.0, 130.0)]) == (90.0, 130.0)
    assert brackets.capacity_bracket([(100.0, 110.0), (90.0, None)]) == (90.0, None)
    assert brackets.capacity_bracket([]) is None
    assert brackets.ranges_tie(100, 110, 110, 120) and not brackets.ranges_tie(100, 109.9, 110, 120)
    assert brackets.ranges_tie(100, None, 500, 510) and brackets.ranges_tie(500, 510, 100, None)


def test_every_caller_takes_its_bracket_from_the_one_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(brackets, "capacity_bracket", lambda searches: (1.0, 2.0))
    assert _row("p01", [_m(100, 110)])["bracket_rps"] == [1.0, 2.0]
    side = saturation_side([Answer(100.0, 110.0)])
    assert (side.low, side.high) == (1.0, 2.0)
    found = SimpleNamespace(answer=100.0, bracket=SimpleNamespace(unstable_rps=110.0))
    assert search_summary._capacity_bracket([found]) == [1.0, 2.0]  # type: ignore[list-item]
    assert diff_saturation.brackets is sweep.brackets is search_summary.brackets is brackets


def test_every_caller_ties_by_the_one_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    a, c = _row("p01", [_m(100, 108), _m(104, 112)]), _row("p03", [_m(150, 160), _m(160, 170)])
    base, new = Side(value=104, low=100, high=112, n=2), Side(value=155, low=150, high=170, n=2)
    won, moved = best([a, c], "saturation"), judge(base, new, 0.05, "higher", strict=False)
    assert won is not None and won["separated"] and moved.verdict == "improvement"
    monkeypatch.setattr(brackets, "ranges_tie", lambda *ranges: True)
    tied, same = best([a, c], "saturation"), judge(base, new, 0.05, "higher", strict=False)
    assert tied is not None and not tied["separated"] and tied["tied_with"] == ["p01"]
    assert same.verdict != "improvement" and same.gap == 0.0
    assert diff_verdict.brackets is brackets
