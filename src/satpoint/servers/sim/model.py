"""The simulated server's queueing model, free of I/O: configuration, pauses, slots and service draws.

Everything here works in *virtual time*: plain floats in seconds on the ``time.perf_counter`` clock.
Nothing sleeps and nothing reads the clock, so the rules in ``satpoint.servers.sim.server`` can be tested
exactly, without a network or a timer.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

import numpy as np

from satpoint.errors import ConfigError
from satpoint.servers.sim.autoscale import spec as _scale_spec
from satpoint.servers.sim.autoscale.spec import AutoscaleSpec, parse_autoscale
from satpoint.servers.sim.rates import MetastableFigures, metastable_fields, metastable_figures

Dist = Literal["const", "exp", "lognormal"]
DISTS: tuple[str, ...] = get_args(Dist)

Fault = Literal[
    "reset-mid-response",
    "close-after",
    "connection-close",
    "idle-timeout",
    "malformed",
    "truncated",
    "slow-headers",
    "stall",
    "error-body",
]
FAULTS: tuple[str, ...] = get_args(Fault)
#: how ``error-body`` delimits its body: ``length`` (Content-Length, keep-alive) or ``eof`` (no
#: Content-Length, ``connection: close``, the body ends when the connection does: HTTP/1.0 style)
ErrorFraming = Literal["length", "eof"]
ERROR_FRAMINGS: tuple[str, ...] = get_args(ErrorFraming)
#: faults that hit single inference requests (a fraction ``fault_rate`` of them, after ``fault_after``);
#: the others (``close-after``, ``idle-timeout``) act on connections.
REQUEST_FAULTS: frozenset[str] = frozenset(FAULTS) - {"close-after", "idle-timeout"}
#: defaults of the faults' parameters
DEFAULT_SLOW_HEADERS_MS = 1000.0
DEFAULT_ERROR_STATUS = 503

#: sigma of the underlying normal of the ``lognormal`` service-time distribution.
LOGNORMAL_SIGMA = 0.5

_DRAW_BATCH = 4096
#: ``--autoscale``'s help, defaults and parser (``satpoint.servers.sim.autoscale.spec``), for the command line
scale_defaults = _scale_spec


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
    #: the names served (a model mix on one server: every name answers with the same slots, and
    #: ``POST /v2/repository/index`` lists them READY); empty: ``model`` only
    models: tuple[str, ...] = ()
    #: each served model its own ``slots`` and queue (as Triton's instances per model), instead of one queue
    #: for all (as one MLServer worker); REST unary inference only
    model_queues: bool = False
    seed: int = 0
    fault: Fault | None = None
    fault_rate: float = 1.0
    fault_after: int = 0
    close_after: int | None = None
    idle_timeout_s: float | None = None
    slow_headers_ms: float | None = None
    error_status: int | None = None
    error_framing: ErrorFraming | None = None
    #: metastable mode (see ``MetastableScheduler``): degraded once more than ``metastable_high`` requests
    #: wait for a slot, until fewer than ``metastable_low`` do; services started degraded take
    #: ``metastable_factor`` x their draw. None: off.
    metastable_high: int | None = None
    metastable_low: int = 0
    metastable_factor: float = 1.0
    #: streamed answers (``infer_stream``, ``ModelStreamInfer``; see ``stream_chunk_offsets``): the first chunk
    #: ``stream_first_ms`` after service starts, then one every ``stream_gap_ms``, ``stream_chunks`` in all; the
    #: stream holds its slot until its last chunk.  ``stream``: the command line asked for streams (``--stream``)
    stream: bool = False
    stream_first_ms: float = 20.0
    stream_gap_ms: float = 5.0
    stream_chunks: int = 10
    #: ``--autoscale``: replicas of ``slots`` each behind an HPA-like rule (``satpoint.servers.sim.autoscale``)
    autoscale: AutoscaleSpec | None = None

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
        bad = [m for m in self.models if not m or "/" in m or "," in m or m != m.strip()]
        if bad or len(set(self.models)) != len(self.models):
            raise ConfigError(f"sim: models must be distinct names without '/', ',' or spaces, got {self.models!r}")
        self._check_fault()
        self._check_metastable()
        if not (math.isfinite(self.stream_first_ms) and self.stream_first_ms >= 0):
            raise ConfigError(f"sim: stream_first_ms must be >= 0, got {self.stream_first_ms}")
        if not (math.isfinite(self.stream_gap_ms) and self.stream_gap_ms >= 0):
            raise ConfigError(f"sim: stream_gap_ms must be >= 0, got {self.stream_gap_ms}")
        if self.stream_chunks < 1:
            raise ConfigError(f"sim: stream_chunks must be >= 1, got {self.stream_chunks}")
        if self.stream and self.metastable_high is not None:
            raise ConfigError("sim: streams (--stream) and the metastable mode do not mix")
        if self.autoscale is not None and (self.metastable_high is not None or self.model_queues):
            raise ConfigError("sim: --autoscale scales one queue: not with --metastable or --model-queues")

    def _check_metastable(self) -> None:
        high, low, factor = self.metastable_high, self.metastable_low, self.metastable_factor
        if high is None:
            if low != 0 or factor != 1.0:
                raise ConfigError("sim: metastable_low and metastable_factor need metastable_high")
            return
        for name, value in (("metastable_high", high), ("metastable_low", low)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"sim: {name} must be an integer, got {value!r}")
        if not high > low >= 0:
            raise ConfigError(f"sim: metastable needs HIGH > LOW >= 0 (requests waiting), got HIGH={high}, LOW={low}")
        if (
            isinstance(factor, bool)
            or not isinstance(factor, (int, float))
            or not (math.isfinite(factor) and factor > 1)
        ):
            raise ConfigError(f"sim: metastable FACTOR must be a number > 1, got {factor!r}")

    def _check_fault(self) -> None:
        fault = self.fault
        if fault is not None and fault not in FAULTS:
            raise ConfigError(f"sim: fault must be one of {', '.join(FAULTS)}, got {fault!r}")
        if not (math.isfinite(self.fault_rate) and 0.0 <= self.fault_rate <= 1.0):
            raise ConfigError(f"sim: fault_rate must be in [0, 1], got {self.fault_rate}")
        if isinstance(self.fault_after, bool) or not isinstance(self.fault_after, int) or self.fault_after < 0:
            raise ConfigError(f"sim: fault_after must be an integer >= 0, got {self.fault_after!r}")
        if fault not in REQUEST_FAULTS and (self.fault_rate != 1.0 or self.fault_after != 0):
            raise ConfigError(
                "sim: fault_rate and fault_after pick inference requests: they need a per-request fault "
                f"({', '.join(f for f in FAULTS if f in REQUEST_FAULTS)})"
            )
        if (fault == "close-after") != (self.close_after is not None):
            raise ConfigError("sim: fault close-after and close_after (N responses per connection) go together")
        if self.close_after is not None and (
            isinstance(self.close_after, bool) or not isinstance(self.close_after, int) or self.close_after < 1
        ):
            raise ConfigError(f"sim: close_after must be an integer >= 1, got {self.close_after!r}")
        if (fault == "idle-timeout") != (self.idle_timeout_s is not None):
            raise ConfigError("sim: fault idle-timeout and idle_timeout_s (seconds) go together")
        if self.idle_timeout_s is not None and not (math.isfinite(self.idle_timeout_s) and self.idle_timeout_s > 0):
            raise ConfigError(f"sim: idle_timeout_s must be > 0, got {self.idle_timeout_s}")
        if self.slow_headers_ms is not None:
            if fault != "slow-headers":
                raise ConfigError("sim: slow_headers_ms needs fault slow-headers")
            if not (math.isfinite(self.slow_headers_ms) and self.slow_headers_ms > 0):
                raise ConfigError(f"sim: slow_headers_ms must be > 0, got {self.slow_headers_ms}")
        if self.error_status is not None:
            if fault != "error-body":
                raise ConfigError("sim: error_status needs fault error-body")
            if isinstance(self.error_status, bool) or not isinstance(self.error_status, int):
                raise ConfigError(f"sim: error_status must be an integer, got {self.error_status!r}")
            if not 400 <= self.error_status <= 599:
                raise ConfigError(f"sim: error_status must be an HTTP error status (400..599), got {self.error_status}")
        if self.error_framing is not None:
            if fault != "error-body":
                raise ConfigError("sim: error_framing needs fault error-body")
            if self.error_framing not in ERROR_FRAMINGS:
                raise ConfigError(
                    f"sim: error_framing must be one of {', '.join(ERROR_FRAMINGS)}, got {self.error_framing!r}"
                )

    @property
    def request_fault(self) -> str | None:
        """The fault if it hits single inference requests (see ``REQUEST_FAULTS``), else None."""
        return self.fault if self.fault in REQUEST_FAULTS else None

    @property
    def slow_headers_s(self) -> float:
        """How long ``slow-headers`` holds the rest of a response after its status line."""
        return (self.slow_headers_ms if self.slow_headers_ms is not None else DEFAULT_SLOW_HEADERS_MS) / 1000.0

    @property
    def fault_status(self) -> int:
        """The status ``error-body`` answers with."""
        return self.error_status if self.error_status is not None else DEFAULT_ERROR_STATUS

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
            models=model_names(getattr(args, "models", None), args.model),
            model_queues=bool(getattr(args, "model_queues", False)),
            seed=args.seed,
            # faults: the REST sim's command line has them, the gRPC sim's has not
            fault=getattr(args, "fault", None),
            fault_rate=getattr(args, "fault_rate", 1.0),
            fault_after=getattr(args, "fault_after", 0),
            close_after=getattr(args, "close_after", None),
            idle_timeout_s=getattr(args, "idle_timeout", None),
            slow_headers_ms=getattr(args, "slow_headers_ms", None),
            error_status=getattr(args, "error_status", None),
            error_framing=getattr(args, "error_framing", None),
            **metastable_fields(getattr(args, "metastable", None)),
            stream=bool(getattr(args, "stream", False)),
            stream_first_ms=getattr(args, "stream_first_ms", 20.0),
            stream_gap_ms=getattr(args, "stream_gap_ms", 5.0),
            stream_chunks=getattr(args, "stream_chunks", 10),
            autoscale=autoscale_from_args(args),
        )

    @property
    def served_models(self) -> tuple[str, ...]:
        """Every model name the sim answers for (``models``, else ``model``)."""
        return self.models or (self.model,)

    @property
    def service_s(self) -> float:
        """Mean service time in seconds."""
        return self.service_ms / 1000.0

    @property
    def capacity_rps(self) -> float:
        """Long-run completion rate when overloaded and never paused: ``slots / service_s``."""
        return self.slots / self.service_s

    @property
    def stream_offsets_s(self) -> tuple[float, ...]:
        """When each chunk of a streamed answer leaves, seconds after its service starts."""
        return stream_chunk_offsets(self.stream_first_ms, self.stream_gap_ms, self.stream_chunks)

    @property
    def stream_capacity_rps(self) -> float:
        """Long-run rate of streamed requests when overloaded: ``slots`` / the time a stream holds its slot."""
        return self.slots / max(self.stream_offsets_s[-1], 1e-9)

    @property
    def metastable(self) -> bool:
        """Whether the metastable mode is on."""
        return self.metastable_high is not None

    def metastable_figures(self) -> MetastableFigures | None:
        """The metastable mode's known rates (``metastable_figures``), None when the mode is off."""
        if self.metastable_high is None:
            return None
        return metastable_figures(self.slots, self.service_ms, self.metastable_factor, self.metastable_low)


def autoscale_from_args(args: Any) -> AutoscaleSpec | None:
    """``--autoscale MIN:MAX`` and its ``--scale-*`` options from a parsed command line (None without it)."""
    return parse_autoscale(
        getattr(args, "autoscale", None),
        delay_s=args.scale_delay_s, target=args.scale_target, sync_s=args.scale_sync_s,
        down_window_s=args.scale_down_window_s,
    ) if getattr(args, "autoscale", None) is not None else None  # fmt: skip


def metastable_line(config: SimConfig) -> str | None:
    """The line the sim prints at start in metastable mode (None when it is off)."""
    figures = config.metastable_figures()
    if figures is None:
        return None
    return (
        f"satpoint sim metastable: degraded once more than {config.metastable_high} requests wait for a slot, "
        f"until fewer than {config.metastable_low} do; services started degraded take "
        f"{config.metastable_factor:g}x; collapse_rps={figures.collapse_rps:.10g} "
        f"degraded_capacity_rps={figures.degraded_capacity_rps:.10g} recovery_rps={figures.recovery_rps:.10g}"
    )


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


class FaultDraws:
    """Which inference requests a per-request fault hits, in arrival order: none of the first ``after``,
    then each with probability ``rate`` (seeded draws of their own, so the service-time and error draws
    are the same with and without a fault)."""

    def __init__(self, rate: float, after: int, rng: np.random.Generator) -> None:
        self._draws = ErrorDraws(rate, rng)
        self._skip = after

    @classmethod
    def from_config(cls, config: SimConfig) -> FaultDraws | None:
        """The draws of ``config``'s per-request fault, or None without one."""
        if config.request_fault is None:
            return None
        fault_seed = np.random.SeedSequence(config.seed).spawn(3)[2]
        return cls(config.fault_rate, config.fault_after, np.random.default_rng(fault_seed))

    def next(self) -> bool:
        if self._skip > 0:
            self._skip -= 1
            return False
        return self._draws.next()


def stream_chunk_offsets(first_ms: float, every_ms: float, chunks: int) -> tuple[float, ...]:
    """The sim's streamed answer, shared by its REST and gRPC sides: when each of ``chunks`` chunks leaves,
    in seconds after the request starts service (the first after ``first_ms``, then one every ``every_ms``).
    The stream holds its slot until the last one, so its service time is the last offset."""
    return tuple((first_ms + i * every_ms) / 1000.0 for i in range(chunks))


def _draws_and_pauses(config: SimConfig, origin_s: float) -> tuple[ServiceDraws, ErrorDraws, PauseCalendar | None]:
    """``config``'s seeded service-time and error draws, and its pauses counted from ``origin_s``."""
    service_seed, error_seed = np.random.SeedSequence(config.seed).spawn(2)
    pauses = None
    if config.pause_every_s is not None and config.pause_s > 0:
        pauses = PauseCalendar(origin_s, config.pause_every_s, config.pause_s)
    service = ServiceDraws(config.dist, config.service_s, np.random.default_rng(service_seed))
    return service, ErrorDraws(config.error_rate, np.random.default_rng(error_seed)), pauses


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
        service, errors, pauses = _draws_and_pauses(config, origin_s)
        return cls(slots=config.slots, service=service, errors=errors, pauses=pauses, origin_s=origin_s)

    def admit(self, arrival_s: float, service_s: float | None = None) -> Admission:
        """Admit a request arriving at ``arrival_s``; ``service_s`` fixes its service time (a streamed answer's
        last chunk offset) instead of a draw."""
        free_at = self._free_at_s
        start_s = free_at[0] if free_at[0] > arrival_s else arrival_s
        pauses = self._pauses
        took = self._service.next() if service_s is None else service_s
        if pauses is not None:
            start_s = pauses.defer(start_s)
            finish_s = pauses.defer(start_s + took)
        else:
            finish_s = start_s + took
        heapq.heapreplace(free_at, finish_s)
        self.admitted += 1
        return Admission(start_s, finish_s, self._errors.next())

    def free_at_s(self) -> list[float]:
        """The slots' free times, sorted (for tests and diagnostics)."""
        return sorted(self._free_at_s)


def model_names(spec: str | None, base: str = "sim") -> tuple[str, ...]:
    """``--models``: a count N (names ``BASE-1`` .. ``BASE-N``) or a comma-separated list of names."""
    if spec is None or not str(spec).strip():
        return ()
    text = str(spec).strip()
    if text.isdigit():
        n = int(text)
        if n < 1:
            raise ConfigError(f"sim: --models N needs N >= 1, got {text}")
        return tuple(f"{base}-{i}" for i in range(1, n + 1))
    return tuple(m.strip() for m in text.split(","))
