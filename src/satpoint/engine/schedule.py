"""Load plans and their schedules: pure functions from stages to due times.

A stage ``(target_rps, ramp_s, hold_s)`` ramps linearly from the previous stage's target (0 for the
first stage) to its own target over ``ramp_s`` seconds, then holds it for ``hold_s`` seconds.  The
schedule integrates that rate curve: with cumulative expected count ``L(t)``, the constant pacer's
request ``n`` is due at ``L^-1(n)`` and the Poisson pacer's at ``L^-1(E_n)`` where ``E_n`` are the
arrival epochs of a unit-rate Poisson process (a time-change of a homogeneous process, which gives an
inhomogeneous Poisson process with the stage's rate).  Due times never move: there are no catch-up
bursts, so overload shows up as queueing on the client's clock.
"""

from __future__ import annotations

import math

import numpy as np

from satpoint.plan import Arrival, FloatArray, PlanError, RateCurve, Stage


def due_times(
    stages: list[Stage],
    arrival: Arrival = "constant",
    seed: int = 0,
    start_rps: float = 0.0,
    *,
    descending: bool = False,
) -> FloatArray:
    """All due times (seconds since the run's start) for a plan, sorted ascending (``descending``: falling
    targets allowed, see ``plan.validate_plan``)."""
    curve = RateCurve(stages, start_rps, descending=descending)
    if arrival == "constant":
        counts = np.arange(0.0, math.floor(curve.total) + 1.0) + 0.5
        counts = counts[counts < curve.total]
    elif arrival == "poisson":
        rng = np.random.default_rng(seed)
        expected = int(curve.total)
        chunks: list[FloatArray] = []
        last = 0.0
        while last < curve.total:
            gaps = rng.exponential(1.0, size=max(1024, expected // 4 + 64))
            epochs = last + np.cumsum(gaps)
            chunks.append(epochs)
            last = float(epochs[-1])
        counts = np.concatenate(chunks)
        counts = counts[counts < curve.total]
    else:
        raise PlanError(f"unknown arrival process {arrival!r}")
    return curve.inverse(counts)
