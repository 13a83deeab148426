"""Load plans and their schedules: pure functions from stages to due times.

A stage ``(target_rps, ramp_s, hold_s)`` ramps linearly from the previous stage's target (0 for the
first stage) to its own target over ``ramp_s`` seconds, then holds it for ``hold_s`` seconds.  The
schedule integrates that rate curve: with cumulative expected count ``L(t)``, the constant pacer's
request ``n`` is due at ``L^-1(n)`` and the Poisson pacer's at ``L^-1(E_n)`` where ``E_n`` are the
arrival epochs of a unit-rate Poisson process (a time-change of a homogeneous process, which gives an
inhomogeneous Poisson process with the stage's rate).  Due times never move: there are no catch-up
bursts, so overload shows up as queueing on the client's clock.

Bursty processes use the same time change:

- ``gamma:CV``: ``E_n`` are the epochs of a unit-rate renewal process whose gaps are Gamma(k = 1/CV^2,
  scale CV^2) (mean 1, coefficient of variation CV; CV = 1 is Poisson).  Mapped through ``L^-1``, the
  gaps keep their CV and the rate follows the plan (on a hold exactly; on a ramp the gaps stretch with the
  rate, as the Poisson pacer's do).
- ``onoff:ON_S,OFF_S,PEAK``: a two-state Markov chain in real seconds (exponential ON and OFF periods of
  means ON_S and OFF_S, the first state drawn from its stationary share ON_S / (ON_S + OFF_S)) modulates
  the plan's rate by PEAK while ON and by ``off_factor`` while OFF (the cycle's mean is the plan's rate).
  The modulated cumulative count ``M(t) = \u222b m(s) dL(s)`` is inverted at unit-rate Poisson epochs:
  a Markov-modulated Poisson process.

Every process is a pure function of (plan, arrival, seed): shards, processes and hosts that regenerate
it get the same due times (``engine.runner`` deals them out, ``distributed.host`` regenerates them).
"""

from __future__ import annotations

import math

import numpy as np

from satpoint.plan import Arrival, ArrivalSpec, FloatArray, PlanError, RateCurve, Stage, parse_arrival


def _unit_epochs(rng: np.random.Generator, total: float, draw: str, shape: float = 1.0) -> FloatArray:
    """Epochs ``< total`` of a unit-rate renewal process: exponential gaps, or gamma gaps of ``shape``."""
    chunks: list[FloatArray] = []
    last = 0.0
    size = max(1024, int(total) // 4 + 64)
    while last < total:
        if draw == "exponential":
            gaps = rng.exponential(1.0, size=size)
        else:
            gaps = rng.gamma(shape, 1.0 / shape, size=size)
        epochs = last + np.cumsum(gaps)
        chunks.append(epochs)
        last = float(epochs[-1])
    out = np.concatenate(chunks) if chunks else np.empty(0)
    return out[out < total]


def onoff_switches(spec: ArrivalSpec, duration_s: float, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    """The modulating chain of ``spec`` over ``[0, duration_s]``: the start of each period (the first at 0)
    and its rate factor (``spec.peak`` while ON, ``spec.off_factor`` while OFF)."""
    on = bool(rng.random() < spec.on_s / (spec.on_s + spec.off_s))
    starts = [0.0]
    factors = [spec.peak if on else spec.off_factor]
    t = 0.0
    while True:
        t += float(rng.exponential(spec.on_s if on else spec.off_s))
        if t >= duration_s:
            break
        on = not on
        starts.append(t)
        factors.append(spec.peak if on else spec.off_factor)
    return np.array(starts), np.array(factors)


def _onoff_counts(spec: ArrivalSpec, curve: RateCurve, rng: np.random.Generator) -> FloatArray:
    """Expected-count values ``L(t_n)`` of a Markov-modulated Poisson process's arrivals ``t_n``."""
    starts, factors = onoff_switches(spec, curve.duration_s, rng)
    lo = curve.count_at(starts)
    hi = np.append(lo[1:], curve.total)
    width = factors * (hi - lo)  # each period's share of the modulated count M
    m0 = np.concatenate(([0.0], np.cumsum(width)[:-1]))
    epochs = _unit_epochs(rng, float(m0[-1] + width[-1]), "exponential")
    which = np.searchsorted(m0, epochs, side="right") - 1
    # a zero-width (rate 0) period is never chosen: the next period starts at the same M and wins the search
    f = factors[which]
    counts = lo[which] + (epochs - m0[which]) / np.where(f > 0, f, 1.0)
    out: FloatArray = np.minimum(counts, np.nextafter(curve.total, 0.0))
    return out


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
    spec = parse_arrival(arrival)
    if spec.kind == "constant":
        counts = np.arange(0.0, math.floor(curve.total) + 1.0) + 0.5
        counts = counts[counts < curve.total]
    elif spec.kind == "poisson":
        counts = _unit_epochs(np.random.default_rng(seed), curve.total, "exponential")
    elif spec.kind == "gamma":
        rng = np.random.default_rng(seed)
        counts = _unit_epochs(rng, curve.total, "gamma", 1.0 / (spec.cv * spec.cv))
    elif spec.kind == "onoff":
        counts = _onoff_counts(spec, curve, np.random.default_rng(seed))
    else:  # pragma: no cover - parse_arrival knows no other kind
        raise PlanError(f"unknown arrival process {arrival!r}")
    return curve.inverse(counts)
