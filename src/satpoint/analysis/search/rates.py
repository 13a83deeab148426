"""When two offered rates are the same rate: the one rule the search, the diff and the saturation ranges use.

A planned rate is a float computed from the stage targets (a bracket's midpoint, a confirmation at a
fraction of the answer): the same plan gives the same float up to rounding in its last digits, hence a
relative tolerance of ``RATE_REL`` (1e-6: far below any two rates a search plans apart, whose ratio is at
least its precision).  Summaries write their rates rounded to 3 decimals (``unstable_rps``) while stages
keep theirs whole, so rates within ``RATE_ABS`` (half that last digit) are the same too.  ``within`` widens
the relative part for the diff's question, two runs' plans at the same offered load (``same_load``:
``LOAD_MATCH``, 0.1 %, as docs/guides/ci-regression-gate.md documents): the same rule, a wider tolerance.
"""

from __future__ import annotations

#: two planned rates of one plan are the same within this fraction ...
RATE_REL = 1e-6
#: ... or within this many rps (half the last digit of the 3-decimal rates a summary writes)
RATE_ABS = 5e-4
#: two runs' stages are at the same offered load when their target rates are within 0.1 % (1 % in rate is
#: 20-25 % in latency near saturation: an M/M/1 at ρ 0.95 against 0.96)
LOAD_MATCH = 0.001


def same_rate(a: float, b: float, within: float = RATE_REL) -> bool:
    """Whether ``a`` and ``b`` (rps) are the same rate: within ``within`` of the larger, or ``RATE_ABS``."""
    return abs(a - b) <= max(within * max(abs(a), abs(b)), RATE_ABS)


def same_load(a: float, b: float) -> bool:
    """Whether two runs' stages at ``a`` and ``b`` rps ran at the same offered load (``LOAD_MATCH``)."""
    return same_rate(a, b, LOAD_MATCH)
