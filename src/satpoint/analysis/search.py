"""The saturation search as a pure function of the stages measured so far.

``next_step(history, params)`` says which rate to hold next, or ``None`` when the answer is known to
the stated precision.  Two phases a person can follow:

1. **Staircase**: from the start rate, multiply by ``growth`` each stage (one monotonic sequence, each
   stage ramping from the previous target) until the first stage that is not stable.
2. **Refinement**: bisect geometrically between the highest stable rate ``L`` and the lowest
   unstable rate ``U`` until ``U / L - 1 <= precision``.  A midpoint above the last rate continues
   the current sequence upwards; a midpoint below it starts a new sequence after a cool-down (the
   server's queue drains, the ramp starts from zero), because targets within a sequence only rise.

A stage whose generator fell behind says nothing about the server: it is measured once more (a
passing hiccup such as a descheduled process), and if the generator falls behind again at that rate
the search ends there, its answer a lower bound.  ``satpoint analyze`` replays this function on recorded stages and must
reproduce every decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from satpoint.analysis.verdicts import Verdict


@dataclass(frozen=True)
class SearchParams:
    start_rps: float = 10.0
    growth: float = 2.0
    precision: float = 0.05
    max_rps: float = 50_000.0
    min_rps: float = 0.5


@dataclass(frozen=True)
class Measured:
    """What the search needs to know of a measured stage."""

    rate_rps: float
    verdict: str


@dataclass(frozen=True)
class Step:
    rate_rps: float
    phase: str  # "staircase" | "refine"
    fresh: bool  # start a new monotonic sequence (cool down, ramp from zero)


@dataclass(frozen=True)
class Bracket:
    stable_rps: float | None  # highest stable rate below every unstable one
    unstable_rps: float | None  # lowest non-stable rate

    @property
    def ratio(self) -> float | None:
        if self.stable_rps is None or self.unstable_rps is None:
            return None
        return self.unstable_rps / self.stable_rps - 1.0


def bracket(history: list[Measured]) -> Bracket:
    """Highest stable and lowest unstable rate; generator-limited stages tell nothing either way."""
    bad = [m.rate_rps for m in history if m.verdict not in (Verdict.STABLE, Verdict.GENERATOR_LIMITED)]
    unstable = min(bad) if bad else None
    good = [m.rate_rps for m in history if m.verdict == Verdict.STABLE and (unstable is None or m.rate_rps < unstable)]
    return Bracket(max(good) if good else None, unstable)


def next_step(history: list[Measured], params: SearchParams) -> Step | None:
    if not history:
        return Step(_clip(params.start_rps, params), "staircase", fresh=True)
    last = history[-1].rate_rps
    if history[-1].verdict == Verdict.GENERATOR_LIMITED:
        tries = sum(1 for m in history if m.verdict == Verdict.GENERATOR_LIMITED and m.rate_rps == last)
        return Step(last, _phase(history), fresh=False) if tries < 2 else None
    b = bracket(history)
    if b.unstable_rps is None:  # still climbing
        nxt = last * params.growth
        if last >= params.max_rps:
            return None
        return Step(min(nxt, params.max_rps), "staircase", fresh=False)
    if b.stable_rps is None:  # even the lowest rate tried was too much: go down
        nxt = b.unstable_rps / (params.growth * 2)
        if nxt < params.min_rps:
            return None
        return Step(nxt, "staircase", fresh=True)
    ratio = b.ratio
    assert ratio is not None
    if ratio <= params.precision:
        return None
    mid = math.sqrt(b.stable_rps * b.unstable_rps)
    return Step(mid, "refine", fresh=mid < last or history[-1].verdict != Verdict.STABLE)


def _phase(history: list[Measured]) -> str:
    return (
        "refine" if any(m.verdict not in (Verdict.STABLE, Verdict.GENERATOR_LIMITED) for m in history) else "staircase"
    )


def _clip(rate: float, params: SearchParams) -> float:
    return min(max(rate, params.min_rps), params.max_rps)


def replay(history: list[Measured], params: SearchParams) -> list[Step | None]:
    """The decision taken after each prefix of ``history`` (for offline verification)."""
    return [next_step(history[:k], params) for k in range(len(history) + 1)]


def hold_for(rate_rps: float, min_requests: int = 2000, min_s: float = 6.0, max_s: float = 15.0) -> float:
    """A hold long enough for a meaningful p99 (``min_requests`` in the steady window), within bounds."""
    return min(max(min_requests / max(rate_rps, 1e-9) * 1.25, min_s), max_s)
