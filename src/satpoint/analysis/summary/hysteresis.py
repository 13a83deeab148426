"""``summary.json``'s ``hysteresis`` block (``find --hysteresis``), typed: the overload step and the steps down."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

_CONFIG = ConfigDict(frozen=True, extra="allow")


class HysteresisStep(BaseModel):
    """One step of ``find --hysteresis``: the overload step, then the steps down."""

    model_config = _CONFIG
    index: int
    role: str  # "overload" or "step_down"
    fraction: float  # of the saturation point
    rate_rps: float
    hold_s: float
    offered_rps: float
    throughput_rps: float  # answered successfully per second over the step
    throughput_last_half_rps: float
    latency_p50_ms: float | None = None  # of the requests due in the step's last half, from intended time
    reference_p50_ms: float | None = None  # a stable stage's at the nearest rate
    queue_slope_rps: float  # outstanding requests: > 0 growing, < 0 draining
    cpu_us_per_request: float | None = None
    reference_cpu_us_per_request: float | None = None
    state: str  # overloaded, draining, recovered
    why: str


class Hysteresis(BaseModel):
    """``find --hysteresis``: the server tipped over at ``collapse_rps``, then the load stepped down."""

    model_config = _CONFIG
    segment: int
    saturation_rps: float
    complete: bool
    overloaded: bool  # the overload step did build a queue (else nothing was learnt)
    collapse_rps: float | None = None
    overload_throughput_rps: float | None = None
    goodput_share: float | None = None
    recovery_rps: float | None = None
    recovery_share: float | None = None
    recovered_rps: float | None = None
    lowest_step_rps: float | None = None
    overload_cpu_us_per_request: float | None = None
    reference_cpu_us_per_request: float | None = None
    metastable: bool | None = None
    steps: list[HysteresisStep]
    explanation: str
