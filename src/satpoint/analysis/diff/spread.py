"""How far latency at a rate moves between two runs of an unchanged server, one run a side: the allowance a
change must exceed before the diff calls it (``--run-spread``)."""

from __future__ import annotations

import math

#: how far one run's figures move between two runs of one configuration on a shared machine: a figure that rests
#: on one run a side (one search, one stage) must change by more than this to be called a change.  Measured: the
#: embedded MLServer's saturation point moved -8.3 % and +9.1 % between two finds of one search (A/A pairs,
#: benchmarks/RESULTS.md), beyond each search's 4 % bracket; with ``find --repeats`` the searches' own spread is
#: used instead (``diff_saturation.saturation_allowance``)
DEFAULT_RUN_SPREAD = 0.10
#: how far the light-load answer time of an unchanged server moves between two runs, in log terms, per unit of
#: ``run_spread``, beside what the capacity's spread moves through the queueing (``latency_allowance``).  Measured
#: on the embedded MLServer (A/A pairs of find, one search a side, 2-core machine; benchmarks/RESULTS.md): p50 at
#: 100-400 rps moved with a standard deviation of 0.14 in log ratio (15 matched rates of 5 pairs; up to +27 % in
#: one pair), p90 with 0.18 (up to +54 %), while the capacity moved 4-16 %: the allowance sits at 2.5 standard
#: deviations of that, 0.35 and 0.45 at the default 10 % run spread, for the dozens of figures one diff judges
LIGHT_LOAD_JITTER = 3.5
#: the same for a tail (``ALL_TAIL_METRICS``)
TAIL_JITTER = 4.5


def latency_allowance(
    run_spread: float, queueing: float, tail: bool = False, shift: float = 0.0, jitter: bool = True
) -> float:
    """How far latency at a rate moves between two runs of an unchanged server: the capacity moving by
    ``run_spread`` (plus ``shift``, the machine's change of speed between the runs) moves it through the
    queueing (for an M/M/1 whose latency there is ``queueing`` times its idle latency, 1 / (1 − s·k)), and, when
    a side rests on one stage there (``jitter``), the light-load answer time moves on its own besides
    (``LIGHT_LOAD_JITTER`` × ``run_spread`` in log terms; ``TAIL_JITTER`` for a tail; not scaled by ``shift``):
    the two combined in quadrature on the log scale.  At most 0.95 (a doubling is always judged, whatever the
    queueing: the saturation point and the idle rates judge a server that slow); 0 when both are 0."""
    x = (run_spread + shift) * max(1.0, queueing)
    j = (TAIL_JITTER if tail else LIGHT_LOAD_JITTER) * run_spread if jitter else 0.0
    if x <= 0 and j <= 0:
        return 0.0
    if x >= 0.5:
        return 0.95
    return min(0.95, math.expm1(math.hypot(j, -math.log1p(-x))))
