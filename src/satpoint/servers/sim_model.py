"""The simulated server's queueing model, free of I/O: configuration, pauses, slots and service draws.

Everything here works in *virtual time*: plain floats in seconds on the ``time.perf_counter`` clock.
Nothing sleeps and nothing reads the clock, so the rules in ``satpoint.servers.sim`` can be tested
exactly, without a network or a timer.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

import numpy as np

from satpoint.errors import ConfigError

Dist = Literal["const", "exp", "lognormal"]
DISTS: tuple[str, ...] = get_args(Dist)

#: sigma of the underlying normal of the ``lognormal`` service-time distribution.
LOGNORMAL_SIGMA = 0.5

_DRAW_BATCH = 4096


@dataclass(frozen=True)
class SimConfig:
    """What the synthetic server is: ``slots`` parallel servers, each taking ``service_ms`` on average.

    Capacity is exactly ``slots / (service_ms / 1000)`` requests per second (see ``capacity_rps``),
    less whatever the optional pauses take away.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    slots: int = 1
    service_ms: float = 10.0
    dist: Dist = "const"
    pause_every_s: float | None = None
    pause_s: float = 0.0
    error_rate: float = 0.0
    model: str = "sim"
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"sim: port must be in 0..65535, got {self.port}")
        if self.slots < 1:
            raise ConfigError(f"sim: slots must be >= 1, got {self.slots}")
        if not (math.isfinite(self.service_ms) and self.service_ms > 0):
            raise ConfigError(f"sim: service_ms must be a positive number, got {self.service_ms}")
        if self.dist not in DISTS:
            raise ConfigError(f"sim: dist must be one of {', '.join(DISTS)}, got {self.dist!r}")
        if self.pause_every_s is not None:
            if not (math.isfinite(self.pause_every_s) and self.pause_every_s > 0):
                raise ConfigError(f"sim: pause_every_s must be > 0, got {self.pause_every_s}")
            if not 0 <= self.pause_s < self.pause_every_s:
                raise ConfigError(
                    f"sim: pause_s must be in [0, pause_every_s={self.pause_every_s}), got {self.pause_s}"
                )
        elif self.pause_s != 0:
            raise ConfigError("sim: pause_s needs pause_every_s")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ConfigError(f"sim: error_rate must be in [0, 1], got {self.error_rate}")
        if not self.model or "/" in self.model:
            raise ConfigError(f"sim: model must be a non-empty name without '/', got {self.model!r}")

    @classmethod
    def from_args(cls, args: Any) -> SimConfig:
        """From the sim command line's parsed arguments (shared by the REST and gRPC sims)."""
        return cls(
            host=args.host,
            port=args.port,
            slots=args.slots,
            service_ms=args.service_ms,
            dist=args.dist,
            pause_every_s=args.pause_every,
            pause_s=args.pause_s,
            error_rate=args.error_rate,
            model=args.model,
            seed=args.seed,
        )

    @property
    def service_s(self) -> float:
        """Mean service time in seconds."""
        return self.service_ms / 1000.0

    @property
    def capacity_rps(self) -> float:
        """Long-run completion rate when overloaded and never paused: ``slots / service_s``."""
        return self.slots / self.service_s


@dataclass(frozen=True)
class PauseCalendar:
    """Pauses of ``pause_s`` at the end of every ``every_s`` period counted from ``origin_s``.

    Pause k covers ``[origin_s + k*every_s + (every_s - pause_s), origin_s + (k+1)*every_s)``.
    """

    origin_s: float
    every_s: float
    pause_s: float

    def defer(self, t_s: float) -> float:
        """``t_s`` if it lies outside every pause, else the end of the pause containing it."""
        x_s = t_s - self.origin_s
        if x_s < 0 or self.pause_s <= 0:
            return t_s
        k = math.floor(x_s / self.every_s)
        if x_s - k * self.every_s >= self.every_s - self.pause_s:
            return self.origin_s + (k + 1) * self.every_s
        return t_s


class ServiceDraws:
    """Service times (seconds) from a seeded numpy Generator, drawn in batches."""

    def __init__(self, dist: Dist, mean_s: float, rng: np.random.Generator) -> None:
        self._dist = dist
        self._mean_s = mean_s
        self._rng = rng
        self._batch: list[float] = []
        self._i = 0

    def next(self) -> float:
        if self._dist == "const":
            return self._mean_s
        if self._i >= len(self._batch):
            self._batch = self._draw(_DRAW_BATCH)
            self._i = 0
        value = self._batch[self._i]
        self._i += 1
        return value

    def _draw(self, n: int) -> list[float]:
        if self._dist == "exp":
            values = self._rng.exponential(self._mean_s, n)
        else:  # lognormal whose mean is mean_s: E = exp(mu + sigma^2 / 2)
            mu = math.log(self._mean_s) - LOGNORMAL_SIGMA**2 / 2
            values = self._rng.lognormal(mu, LOGNORMAL_SIGMA, n)
        result: list[float] = values.tolist()
        return result


class ErrorDraws:
    """Bernoulli(error_rate) decisions from a seeded numpy Generator, drawn in batches."""

    def __init__(self, error_rate: float, rng: np.random.Generator) -> None:
        self._rate = error_rate
        self._rng = rng
        self._batch: list[bool] = []
        self._i = 0

    def next(self) -> bool:
        if self._rate <= 0.0:
            return False
        if self._rate >= 1.0:
            return True
        if self._i >= len(self._batch):
            self._batch = (self._rng.random(_DRAW_BATCH) < self._rate).tolist()
            self._i = 0
        value = self._batch[self._i]
        self._i += 1
        return value


class Admission(NamedTuple):
    """When an admitted request starts and finishes service (virtual seconds), and if it fails."""

    start_s: float
    finish_s: float
    error: bool


class SlotScheduler:
    """``slots`` servers fed by one FIFO queue, in virtual time.

    Requests must be admitted in arrival order (non-decreasing ``arrival_s``). Each takes the slot that
    frees earliest; ``start = max(arrival, free_at)`` (deferred past a pause), ``finish = start +
    draw`` (deferred past a pause), and the slot's ``free_at`` becomes that ideal ``finish`` - never
    the time a timer really fired - so timer jitter cannot lower capacity.
    """

    def __init__(
        self,
        *,
        slots: int,
        service: ServiceDraws,
        errors: ErrorDraws,
        pauses: PauseCalendar | None = None,
        origin_s: float = 0.0,
    ) -> None:
        self._free_at_s: list[float] = [origin_s] * slots  # a min-heap
        self._service = service
        self._errors = errors
        self._pauses = pauses
        self.admitted = 0

    @classmethod
    def from_config(cls, config: SimConfig, origin_s: float) -> SlotScheduler:
        """The scheduler ``config`` describes, its pauses counted from ``origin_s`` (server start)."""
        service_seed, error_seed = np.random.SeedSequence(config.seed).spawn(2)
        pauses = None
        if config.pause_every_s is not None and config.pause_s > 0:
            pauses = PauseCalendar(origin_s, config.pause_every_s, config.pause_s)
        return cls(
            slots=config.slots,
            service=ServiceDraws(config.dist, config.service_s, np.random.default_rng(service_seed)),
            errors=ErrorDraws(config.error_rate, np.random.default_rng(error_seed)),
            pauses=pauses,
            origin_s=origin_s,
        )

    def admit(self, arrival_s: float) -> Admission:
        free_at = self._free_at_s
        start_s = free_at[0] if free_at[0] > arrival_s else arrival_s
        pauses = self._pauses
        if pauses is not None:
            start_s = pauses.defer(start_s)
            finish_s = pauses.defer(start_s + self._service.next())
        else:
            finish_s = start_s + self._service.next()
        heapq.heapreplace(free_at, finish_s)
        self.admitted += 1
        return Admission(start_s, finish_s, self._errors.next())

    def free_at_s(self) -> list[float]:
        """The slots' free times, sorted (for tests and diagnostics)."""
        return sorted(self._free_at_s)
