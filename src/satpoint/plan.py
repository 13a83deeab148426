"""Load plans: stages, where they sit on the run's clock, and the rate curve they draw.

The ground floor of the package: every layer speaks of plans, none of this imports another module of
satpoint.  A stage ``(target_rps, ramp_s, hold_s)`` ramps linearly from the previous stage's target
(0 for the first stage) to its own target over ``ramp_s`` seconds, then holds it for ``hold_s``
seconds; targets rise monotonically (``descending=True`` lifts that rule for a sequence satpoint plans
itself: ``find --hysteresis`` steps the load down, ``ramp_s`` 0, inside one segment).  ``RateCurve``
integrates that piecewise-linear rate so the schedules in ``engine.schedule`` can invert it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

#: an arrival process, as written: ``constant``, ``poisson``, ``gamma:CV`` or ``onoff:ON_S,OFF_S,PEAK``
#: (``parse_arrival``); a segment replayed from a recorded trace says ``trace``
Arrival = str
FloatArray = npt.NDArray[np.float64]
#: the arrival of a segment whose due times came from a recorded trace (``satpoint.traffic``)
TRACE_ARRIVAL = "trace"


class PlanError(ValueError):
    """A load plan that cannot be run (non-monotonic targets, negative durations...)."""


ARRIVAL_HELP = (
    "constant, poisson, gamma:CV (renewal, gamma gaps with coefficient of variation CV; 1 is poisson) or "
    "onoff:ON_S,OFF_S,PEAK (Markov-modulated Poisson: ON and OFF periods of mean ON_S and OFF_S seconds, "
    "PEAK x the mean rate while ON, the mean rate kept over the cycle)"
)


@dataclass(frozen=True, slots=True)
class ArrivalSpec:
    """A parsed arrival process.  ``gamma``: gaps ~ Gamma(shape 1/cv^2) with mean 1/rate.  ``onoff``:
    exponential ON and OFF periods (means ``on_s``, ``off_s``, in seconds of the run), rate ``peak`` x the
    plan's rate while ON and ``off_factor`` x while OFF, so the mean over the cycle is the plan's rate."""

    kind: Literal["constant", "poisson", "gamma", "onoff"]
    cv: float = 1.0
    on_s: float = 0.0
    off_s: float = 0.0
    peak: float = 1.0

    @property
    def off_factor(self) -> float:
        return (self.on_s + self.off_s - self.on_s * self.peak) / self.off_s if self.kind == "onoff" else 1.0

    @property
    def text(self) -> str:
        """The canonical spelling (``gamma:2``, ``onoff:1,9,5``)."""
        if self.kind == "gamma":
            return f"gamma:{self.cv:g}"
        if self.kind == "onoff":
            return f"onoff:{self.on_s:g},{self.off_s:g},{self.peak:g}"
        return self.kind


def parse_arrival(text: str) -> ArrivalSpec:
    """``constant``, ``poisson``, ``gamma:CV`` or ``onoff:ON_S,OFF_S,PEAK``; a ``PlanError`` saying why not."""
    kind, _, args = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind in ("constant", "poisson") and not args:
        return ArrivalSpec(kind)  # type: ignore[arg-type]
    try:
        nums = [float(a) for a in args.split(",")] if args else []
    except ValueError:
        nums = []
    if kind == "gamma" and len(nums) == 1:
        cv = nums[0]
        if not (math.isfinite(cv) and 0.0 < cv <= 100.0):
            raise PlanError(f"arrival {text!r}: the coefficient of variation must be in (0, 100]")
        return ArrivalSpec("gamma", cv=cv)
    if kind == "onoff" and len(nums) == 3:
        on_s, off_s, peak = nums
        if not all(math.isfinite(v) and v > 0 for v in nums):
            raise PlanError(f"arrival {text!r}: ON_S, OFF_S and PEAK must be numbers > 0")
        most = (on_s + off_s) / on_s
        if not 1.0 <= peak <= most + 1e-9:
            raise PlanError(
                f"arrival {text!r}: PEAK must be in [1, {most:g}]: above (ON_S + OFF_S) / ON_S the OFF periods "
                "would need a negative rate to keep the mean"
            )
        return ArrivalSpec("onoff", on_s=on_s, off_s=off_s, peak=min(peak, most))
    raise PlanError(f"unknown arrival process {text!r}: expected {ARRIVAL_HELP}")


@dataclass(frozen=True, slots=True)
class Stage:
    target_rps: float
    ramp_s: float
    hold_s: float

    @classmethod
    def parse(cls, text: str) -> Stage:
        """Parse ``RPS:RAMP_S:HOLD_S`` (``RPS:HOLD_S`` means no ramp)."""
        parts = text.split(":")
        try:
            nums = [float(p) for p in parts]
        except ValueError:
            raise PlanError(f"stage {text!r}: expected RPS:RAMP_S:HOLD_S with numbers") from None
        if len(nums) == 2:
            nums = [nums[0], 0.0, nums[1]]
        if len(nums) != 3:
            raise PlanError(f"stage {text!r}: expected RPS:RAMP_S:HOLD_S")
        return cls(nums[0], nums[1], nums[2])

    @property
    def duration_s(self) -> float:
        return self.ramp_s + self.hold_s


@dataclass(frozen=True, slots=True)
class StageSpan:
    """Where a stage sits on the run's clock (seconds since the run's start)."""

    index: int
    stage: Stage
    start_s: float  # ramp start
    hold_start_s: float
    end_s: float


def validate_plan(stages: list[Stage], *, descending: bool = False) -> None:
    """Refuse a plan that cannot be run.  Targets must rise monotonically (a user's plan); ``descending``
    allows falling targets, for the sequences satpoint plans itself (``find --hysteresis``)."""
    if not stages:
        raise PlanError("a plan needs at least one stage")
    prev = 0.0
    for i, st in enumerate(stages, start=1):
        for name, value in (("target rps", st.target_rps), ("ramp", st.ramp_s), ("hold", st.hold_s)):
            if not math.isfinite(value) or value < 0:
                raise PlanError(f"stage {i}: {name} must be a finite number >= 0, got {value}")
        if st.target_rps <= 0:
            raise PlanError(f"stage {i}: target rps must be > 0")
        if st.hold_s <= 0:
            raise PlanError(f"stage {i}: hold must be > 0 s (verdicts are made on the hold)")
        if st.target_rps < prev and not descending:
            raise PlanError(
                f"stage {i}: target {st.target_rps:g} rps is below the previous stage's {prev:g} rps; "
                "targets must rise monotonically (start a new run to go down)"
            )
        prev = st.target_rps


def spans(stages: list[Stage], start_rps: float = 0.0, *, descending: bool = False) -> list[StageSpan]:
    validate_plan(stages, descending=descending)
    out: list[StageSpan] = []
    t = 0.0
    for i, st in enumerate(stages):
        out.append(StageSpan(i, st, t, t + st.ramp_s, t + st.ramp_s + st.hold_s))
        t += st.duration_s
    return out


@dataclass(frozen=True, slots=True)
class _Piece:
    t0: float
    dur: float
    r0: float
    r1: float
    n0: float  # expected count at t0

    @property
    def n1(self) -> float:
        return self.n0 + 0.5 * (self.r0 + self.r1) * self.dur


class RateCurve:
    """Piecewise-linear rate curve r(t) with its integral L(t) and inverse.  A falling target
    (``descending``) with ``ramp_s`` 0 is a step down: the count keeps its pace up to the step, then
    grows at the lower rate (due times never move back, nothing is caught up)."""

    def __init__(self, stages: list[Stage], start_rps: float = 0.0, *, descending: bool = False) -> None:
        validate_plan(stages, descending=descending)
        pieces: list[_Piece] = []
        t, n, prev = 0.0, 0.0, start_rps
        for st in stages:
            for dur, r0, r1 in ((st.ramp_s, prev, st.target_rps), (st.hold_s, st.target_rps, st.target_rps)):
                if dur > 0:
                    p = _Piece(t, dur, r0, r1, n)
                    pieces.append(p)
                    t, n = t + dur, p.n1
            prev = st.target_rps
        self.pieces = pieces
        self.duration_s = t
        self.total = n

    def rate(self, t: float) -> float:
        for p in self.pieces:
            if t < p.t0 + p.dur:
                return p.r0 + (p.r1 - p.r0) * max(0.0, t - p.t0) / p.dur
        return self.pieces[-1].r1

    def count_at(self, times: FloatArray) -> FloatArray:
        """The expected count L(t) at each of ``times`` (clipped to the curve's span)."""
        t = np.clip(np.asarray(times, dtype=np.float64), 0.0, self.duration_s)
        starts = np.array([p.t0 for p in self.pieces])
        which = np.clip(np.searchsorted(starts, t, side="right") - 1, 0, len(self.pieces) - 1)
        out = np.empty_like(t)
        for k, p in enumerate(self.pieces):
            sel = which == k
            if sel.any():
                x = t[sel] - p.t0
                out[sel] = p.n0 + p.r0 * x + 0.5 * (p.r1 - p.r0) / p.dur * x * x
        return out

    def inverse(self, counts: FloatArray) -> FloatArray:
        """Times at which the expected count reaches each of ``counts`` (sorted, < total)."""
        out = np.empty_like(counts)
        starts = np.array([p.n0 for p in self.pieces])
        which = np.searchsorted(starts, counts, side="right") - 1
        which = np.clip(which, 0, len(self.pieces) - 1)
        for k, p in enumerate(self.pieces):
            sel = which == k
            if not sel.any():
                continue
            m = counts[sel] - p.n0
            a = 0.5 * (p.r1 - p.r0) / p.dur  # L = r0 x + a x^2
            if abs(a) < 1e-12:
                x = m / p.r0
            else:
                # numerically stable root of a x^2 + r0 x - m = 0
                x = 2.0 * m / (p.r0 + np.sqrt(p.r0 * p.r0 + 4.0 * a * m))
            out[sel] = p.t0 + x
        return out
