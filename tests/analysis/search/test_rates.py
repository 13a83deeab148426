"""One rule for "the same rate" (``analysis.search.rates``): the search, the saturation ranges and the diff use it."""

from __future__ import annotations

from satpoint.analysis.diff.compare import Answer, find_answers
from satpoint.analysis.search.rates import LOAD_MATCH, same_load, same_rate


def test_planned_rates_are_the_same_up_to_their_last_digits() -> None:
    a = 300 * 1.05**7
    assert same_rate(a, a * (1 + 1e-12)) and same_rate(a, round(a, 3))
    assert not same_rate(100.0, 100.01)  # a search's rates are at least its precision apart
    assert same_load(100.0, 100.05) and not same_load(100.0, 100.0 + 2 * LOAD_MATCH * 100)


def test_a_server_failure_at_a_low_unstable_rate_closes_the_range() -> None:
    """The summary writes ``unstable_rps`` to 3 decimals and each stage's ``target_rps`` whole: at about 1
    rps that rounding is 4e-4 of the rate, and the saturated stage at the unstable rate must still be found
    (the client-limited search is then bracketed by the server's failure there, not open upwards)."""
    summary = {
        "kind": "find",
        "saturation_rps": 1.2,
        "unstable_rps": 1.235,
        "find_notes": ["client-limited: the generator's in-flight cap was the limit in one stage"],
        "search": {"repeats": [], "finished": True},
        "stages": [{"target_rps": 1.2, "verdict": "client_limited"}, {"target_rps": 1.23456, "verdict": "saturated"}],
    }
    assert find_answers(summary) == [Answer(1.2, 1.235)]
