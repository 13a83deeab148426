"""Where a capacity lies, and when two such ranges are a tie: the one rule behind ``find``'s
``saturation_bracket_rps``, a sweep point's ``bracket_rps`` and its ``best`` point, and the diff's saturation
ranges (``diff_saturation.saturation_side``, ``diff_verdict.judge``).

A search says the capacity lies between its answer (the highest rate it held) and the rate above it that it
found not stable; several searches (``find --repeats``, a sweep point's measurements) say it lies from their
lowest answer up to their highest unstable rate, open upwards (None) when any search never found one.  Two
ranges are tied when they share a rate (an open range reaches every rate above its low end); only ranges
apart tell two capacities apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

#: (answer, unstable rate or None) of one search
Searched = tuple[float, float | None]


def capacity_bracket(searches: Iterable[Searched]) -> tuple[float, float | None] | None:
    """``[lowest answer, highest unstable rate]`` (3 decimals), the top None when any search's range is open;
    None when there is no search."""
    got = list(searches)
    if not got:
        return None
    low = round(min(float(s) for s, _ in got), 3)
    if any(u is None for _, u in got):
        return low, None
    return low, round(max(float(u) for _, u in got if u is not None), 3)


def ranges_tie(low_a: float, high_a: float | None, low_b: float, high_b: float | None) -> bool:
    """Whether two ranges share a rate (a tie: they cannot be told apart); a None or infinite high end is
    open upwards."""
    top_a = math.inf if high_a is None else high_a
    top_b = math.inf if high_b is None else high_b
    return top_a >= low_b and top_b >= low_a
