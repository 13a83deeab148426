"""Run configuration: frozen, validated data that every layer reads and the results header records.

``RunConfig`` is the one place that turns a run's settings into the ``config`` block of
``results.json`` (``to_header``) and back (``from_header``), so ``report`` and ``analyze`` judge an old
folder by the rules it was run with.  Like ``plan``, this module is on the ground floor: it imports
nothing else of satpoint but the plan types.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from satpoint.plan import Arrival, parse_arrival

Mode = Literal["open_loop", "closed_loop"]
#: the widest wake-up window (ms): the first request of a window leaves up to this late, and its send lag
#: counts against the generator-lag limit (``VerdictRules.generator_lag_p99_ms``, 10 ms): half of it
MAX_WAKE_WINDOW_MS = 5.0
Kind = Literal["run", "find"]


@dataclass(frozen=True)
class RayOptions:
    """Generator shards on Ray actors, one per host (``satpoint.distributed``; the ``ray`` extra).

    ``address``: ``None`` starts a local Ray instance for this run (and stops it after), ``"auto"`` attaches
    to the cluster this machine belongs to, anything else is a Ray address (``ray://host:10001``,
    ``host:6379``).  ``hosts``: actors, one per node (None: one on every alive node with CPUs);
    ``procs_per_host``: generator processes each actor runs (the ``--procs`` of one host).
    ``lead_s``: how far after the last clock measurement the shards start (they spawn their generator
    processes and open connections meanwhile); ``align_ms``: the start alignment asked for, above which
    a host's clock uncertainty is reported."""

    address: str | None = None
    hosts: int | None = None
    procs_per_host: int = 1
    lead_s: float = 3.0
    align_ms: float = 1.0

    def validate(self) -> RayOptions:
        if self.hosts is not None and self.hosts < 1:
            raise ValueError("--ray-hosts must be >= 1")
        if self.procs_per_host < 1:
            raise ValueError("--procs-per-host must be >= 1")
        if self.lead_s <= 0 or self.align_ms <= 0:
            raise ValueError("the Ray start lead and alignment must be > 0")
        return self

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RayOptions:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def is_number(x: Any) -> bool:
    """Whether ``float(x)`` reads ``x`` (a file's cell, an option's text) as a number."""
    try:
        float(x)
    except (TypeError, ValueError):
        return False
    return True


def ray_options(address: str | None, hosts: int | None, procs_per_host: int, procs: int = 1) -> RayOptions | None:
    """The Ray options ``--ray ADDRESS`` (``local``: a local instance), ``--ray-hosts`` and
    ``--procs-per-host`` ask for (None without ``--ray``)."""
    if address is None:
        if hosts is not None or procs_per_host != 1:
            raise ValueError("--ray-hosts and --procs-per-host go with --ray")
        return None
    if procs != 1:
        raise ValueError("with --ray, give the processes of each host with --procs-per-host (not --procs)")
    return RayOptions(None if address == "local" else address, hosts, procs_per_host).validate()


@dataclass(frozen=True)
class LoadOptions:
    """How the generator sends: arrival process, connections, timeouts, processes."""

    arrival: Arrival = "constant"
    seed: int = 0
    #: the in-flight cap (connections, or gRPC streams); None: derived from the plan (engine.inflight)
    max_inflight: int | None = None
    timeout_s: float = 30.0
    drain_s: float = 10.0
    procs: int = 1
    generator_cpus: tuple[int, ...] | None = None
    warm_connections: int = 16
    #: gRPC HTTP/2 connections per generator process; None: automatic (more while the server's
    #: MAX_CONCURRENT_STREAMS is what limits the in-flight streams)
    grpc_connections: int | None = None
    #: shards on Ray actors across hosts (None: this machine only, ``procs`` processes)
    ray: RayOptions | None = None
    #: wake-up window (ms): one wake-up sends every request due within this window after the first one,
    #: which leaves up to this late (its send lag recorded as always); 0: each request at its own due time
    wake_window_ms: float = 0.0
    #: run each generator process's event loop at SCHED_FIFO this priority (1-99; ``engine.realtime``), so a
    #: process sharing its core cannot hold a due request back for a scheduler slice; 0: the usual policy
    realtime_priority: int = 0

    def validate(self) -> LoadOptions:
        parse_arrival(self.arrival)  # a PlanError (a ValueError) naming the valid processes
        if self.procs < 1 or (self.max_inflight is not None and self.max_inflight < 1):
            raise ValueError("procs and max_inflight must be >= 1")
        if self.timeout_s <= 0 or self.drain_s < 0:
            raise ValueError("procs and max_inflight must be >= 1, timeout > 0 and drain >= 0")
        if self.grpc_connections is not None and self.grpc_connections < 1:
            raise ValueError("grpc_connections must be >= 1 (or None: automatic)")
        if not 0 <= self.wake_window_ms <= MAX_WAKE_WINDOW_MS:
            raise ValueError(
                f"--wake-window-ms must be from 0 to {MAX_WAKE_WINDOW_MS:g} ms (a wider window's send lag reaches the "
                f"generator-lag limit and every stage would read as generator-limited); got {self.wake_window_ms:g}"
            )
        if not 0 <= self.realtime_priority <= 99:
            raise ValueError("realtime_priority must be from 1 to 99 (0: the usual scheduling)")
        if self.ray is not None:
            self.ray.validate()
        return self

    def describe(self) -> dict[str, Any]:
        return {
            "arrival": self.arrival,
            "seed": self.seed,
            "max_inflight": self.max_inflight,
            "timeout_s": self.timeout_s,
            "drain_s": self.drain_s,
            "procs": self.procs,
            "generator_cpus": list(self.generator_cpus) if self.generator_cpus else None,
            "grpc_connections": self.grpc_connections,
            "wake_window_ms": self.wake_window_ms,
            "realtime_priority": self.realtime_priority,
            "ray": self.ray.describe() if self.ray is not None else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoadOptions:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        if kw.get("generator_cpus") is not None:
            kw["generator_cpus"] = tuple(kw["generator_cpus"])
        if isinstance(kw.get("ray"), dict):
            kw["ray"] = RayOptions.from_dict(kw["ray"])
        return cls(**kw)


@dataclass(frozen=True)
class VerdictRules:
    """The thresholds stage verdicts are judged by (``analysis.search.verdicts``)."""

    max_error_rate: float = 0.01
    #: the outstanding-request count may grow by at most this fraction of the offered rate
    queue_growth_frac: float = 0.01
    #: ... and by at least this many requests over the window before it counts as growth
    queue_growth_min: float = 5.0
    #: completions (any outcome) per second must keep up with due requests within this fraction
    completion_frac: float = 0.95
    #: share of requests that may wait for a free slot (in-flight cap full of unanswered requests)
    waited_frac: float = 0.01
    #: p99 send lag of requests that had a free slot: above this the generator fell behind
    generator_lag_p99_ms: float = 10.0
    #: ... or this fraction of the stage's p50 latency when that is more (a slow server)
    generator_lag_latency_frac: float = 0.05
    #: latency objectives, e.g. {"p99": 50.0} (ms)
    slo_ms: dict[str, float] = field(default_factory=dict)
    #: p50 latency at low load (``find`` measures it in its first stage); when set, a stage whose p50
    #: exceeds ``knee_factor`` x baseline + ``knee_floor_ms`` is saturated: queueing has degraded latency
    #: even if the queue did not visibly grow within the window
    baseline_p50_ms: float | None = None
    knee_factor: float = 4.0
    knee_floor_ms: float = 2.0
    #: the server's own answer time (service p50, done - sent) at low load; ``find`` takes it from its probe
    #: (the median of sequential requests over one kept-alive connection, as warm as the load's), a ``run``
    #: from its lowest stage whose requests did not wait for a connection.  When
    #: requests wait for a connection while the service time stays within ``client_service_factor`` x
    #: this + ``client_service_floor_ms``, the generator's in-flight cap is the limit, not the server
    baseline_service_ms: float | None = None
    client_service_factor: float = 2.0
    client_service_floor_ms: float = 2.0
    #: a growing outstanding count means a growing queue only if latency grows with it: over the window,
    #: the latency trend must add at least this fraction of the p50 latency (and ``queue_trend_floor_ms``);
    #: a slow server filling its pipeline after a ramp grows the count, not the latency
    queue_trend_frac: float = 0.1
    queue_trend_floor_ms: float = 2.0
    #: the requests due in the window were answered more slowly than they came: their latency rises with
    #: their due time by more than this many seconds per second (the server finishes them at less than
    #: 1 / (1 + this) of the rate they were due) and by more than ``trend_sigmas`` standard errors of
    #: that slope; this sees a slow server just past its capacity, whose queue grows by too few requests
    #: within a window for the outstanding-count rule
    trend_frac: float = 0.015
    #: the latency rise the outstanding-count rule asks for must also exceed this many standard errors
    queue_trend_sigmas: float = 2.0
    trend_sigmas: float = 3.0
    #: ... over at least this many answered requests
    trend_min_requests: int = 12

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VerdictRules:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


#: ``FindOptions.budget_s``'s default: planned from (``analysis.search.budget_plan``) unless given
DEFAULT_FIND_BUDGET_S = 270.0


@dataclass(frozen=True)
class FindOptions:
    """How the saturation search runs (``satpoint find``)."""

    precision: float = 0.05
    growth: float = 2.0
    start_rps: float | None = None  # None: from a probe of the service time
    max_rps: float = 50_000.0
    #: the whole find's time cap; unless ``budget_given``, what one search and its profile get: every
    #: further search (``repeats``) and every extra (flame graph, hysteresis, a baseline's hold) grows it
    #: (``analysis.search.budget_plan``)
    budget_s: float = DEFAULT_FIND_BUDGET_S
    #: ``budget_s`` was given (``--budget-s``): a budget that cannot hold the work asked for is refused, and
    #: none is planned; None (the default): given when ``budget_s`` is not the default (``budget_fixed``), so
    #: ``FindOptions(budget_s=120)`` from the Python API is the cap it says
    budget_given: bool | None = None
    ramp_s: float = 2.0
    min_hold_s: float = 6.0
    max_hold_s: float = 15.0
    min_requests: int = 2000
    cooldown_s: float = 2.0
    profile: bool = True
    #: after the search, hold one extra stage at ``FLAMEGRAPH_FRACTION`` of the saturation point while
    #: py-spy records the server (``satpoint find --flamegraph``; not the latency ``profile`` above)
    flamegraph: bool = False
    #: hold the per-replica target (saturation x (1 - margin)) before accepting an answer
    confirm: bool = True
    #: independent searches; the answer is the lowest, their spread is reported as a range
    repeats: int = 1
    #: measure a contradicted or collapsed stage again from idle before it may lower the answer
    retest: bool = True
    margin: float = 0.15
    peak_rps: float | None = None
    min_rps: float | None = None
    #: after the search (and its profile): tip the server over at 1.2 x the saturation point, then step
    #: the load down in one segment to see where it recovers (``satpoint find --hysteresis``)
    hysteresis: bool = False

    @property
    def budget_fixed(self) -> bool:
        """``budget_s`` is the cap asked for (``budget_given``, or a ``budget_s`` other than the default),
        not a figure ``analysis.search.budget_plan`` plans from."""
        return self.budget_given if self.budget_given is not None else self.budget_s != DEFAULT_FIND_BUDGET_S

    def validate(self) -> FindOptions:
        if not 0 < self.precision < 1 or not 0 <= self.margin < 1 or self.growth <= 1 or self.budget_s <= 0:
            raise ValueError("precision in (0,1), margin in [0,1), growth > 1 and budget > 0 are required")
        if self.ramp_s < 0 or self.min_hold_s <= 0 or self.max_hold_s < self.min_hold_s or self.min_requests < 1:
            raise ValueError("ramp >= 0, 0 < min hold <= max hold and min requests >= 1 are required")
        if self.repeats < 1:
            raise ValueError("repeats must be >= 1")
        if not 0 <= self.cooldown_s <= 600:
            raise ValueError("cooldown must be between 0 and 600 s")
        return self

    def describe(self, start_rps: float, slo: dict[str, float]) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "growth": self.growth,
            "start_rps": start_rps,
            "max_rps": self.max_rps,
            "budget_s": self.budget_s,
            "budget_given": self.budget_fixed,
            "ramp_s": self.ramp_s,
            "hold_s": [self.min_hold_s, self.max_hold_s],
            "min_requests": self.min_requests,
            "margin": self.margin,
            "profile": self.profile,
            "flamegraph": self.flamegraph,
            "confirm": self.confirm,
            "retest": self.retest,
            #: a retest that disagrees is decided by a third measurement (2 of 3)
            "retest_majority": self.retest,
            "repeats": self.repeats,
            "peak_rps": self.peak_rps,
            "min_rps": self.min_rps,
            "hysteresis": self.hysteresis,
            "slo": {k: f"{v:g}ms" for k, v in slo.items()} or None,
        }


@dataclass(frozen=True)
class RunConfig:
    """Everything about a run that its results header records under ``config``."""

    kind: Kind = "run"
    mode: Mode = "open_loop"
    load: LoadOptions = field(default_factory=LoadOptions)
    rules: VerdictRules = field(default_factory=VerdictRules)
    thresholds: tuple[str, ...] = ()
    #: the search's settings as run (``FindOptions.describe``), for ``find``
    find: dict[str, Any] | None = None
    #: the closed loop's settings (``ClosedLoopOptions.describe``), for a closed-loop run
    closed_loop: dict[str, Any] | None = None
    #: the demonstration a run belongs to (``"co"``), if any
    demo: str | None = None

    def with_rules(self, rules: VerdictRules) -> RunConfig:
        return replace(self, rules=rules)

    def to_header(self) -> dict[str, Any]:
        """The ``config`` block of ``results.json``."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "load": self.load.describe(),
            "rules": self.rules.to_dict(),  # every threshold, so old folders are judged by their own rules
            "thresholds": list(self.thresholds),
        }
        for key in ("find", "closed_loop", "demo"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> RunConfig:
        """The configuration a results header records (older headers lack some keys: defaults)."""
        c = dict(header.get("config") or {})
        kind: Kind = "find" if header.get("kind") == "find" else "run"
        mode: Mode = "closed_loop" if c.get("mode") == "closed_loop" else "open_loop"
        return cls(
            kind=kind,
            mode=mode,
            load=LoadOptions.from_dict(dict(c.get("load") or {})),
            rules=VerdictRules.from_dict(dict(c.get("rules") or {})),
            thresholds=tuple(c.get("thresholds") or ()),
            find=c.get("find"),
            closed_loop=c.get("closed_loop"),
            demo=c.get("demo"),
        )


@dataclass(frozen=True)
class FlamegraphOptions:
    """A py-spy flame graph of the server for the hold of one stage (``--flamegraph``).

    ``stage``: on ``run``, the 1-based stage whose hold is recorded (None: the last); ``find`` holds a
    stage of its own after the search.  ``native`` adds C/C++/Cython frames (slower to sample, and
    py-spy then pauses the server for every sample: it cannot unwind a running process's native stack);
    ``nonblocking`` samples without pausing the server (py-spy's ``--nonblocking``: a stack may be read
    while it changes, so a few samples can be wrong, but the server is never stopped while it serves
    the load being measured)."""

    native: bool = False
    rate_hz: int = 100
    stage: int | None = None
    nonblocking: bool = True

    def validate(self) -> FlamegraphOptions:
        if not 1 <= self.rate_hz <= 1000:
            raise ValueError(f"the flame graph's sampling rate must be within [1, 1000] Hz, got {self.rate_hz}")
        if self.stage is not None and self.stage < 1:
            raise ValueError(f"--flamegraph-stage counts from 1, got {self.stage}")
        return self

    @property
    def samples_nonblocking(self) -> bool:
        """Whether py-spy reads without pausing: never with ``native`` (py-spy cannot unwind native
        stacks of a running process)."""
        return self.nonblocking and not self.native

    def describe(self) -> dict[str, Any]:
        return {
            "native": self.native,
            "rate_hz": self.rate_hz,
            "stage": self.stage,
            "nonblocking": self.samples_nonblocking,
        }


@dataclass(frozen=True)
class ObserveOptions:
    """What satpoint watches on the server side while it measures (``satpoint.observe``).

    ``server_pids``: root pids of a local server; each one's whole process tree (re-discovered at every
    sample: MLServer runs one process per worker) is sampled with psutil every ``sample_interval_s`` by
    a separate process, never inside the generator.  ``metrics_urls``: Prometheus endpoints, scraped at
    every segment's start and end and every ``scrape_interval_s`` in between."""

    server_pids: tuple[int, ...] = ()
    metrics_urls: tuple[str, ...] = ()
    sample_interval_s: float = 0.25
    scrape_interval_s: float = 2.0
    #: record a py-spy flame graph of ``server_pids[0]``'s tree during one stage (None: no flame graph)
    flamegraph: FlamegraphOptions | None = None

    def validate(self) -> ObserveOptions:
        if any(p <= 0 for p in self.server_pids):
            raise ValueError(f"server pids must be positive, got {list(self.server_pids)}")
        if not 0.05 <= self.sample_interval_s <= 10 or not 0.2 <= self.scrape_interval_s <= 60:
            raise ValueError("sample_interval_s must be within [0.05, 10] and scrape_interval_s within [0.2, 60]")
        for url in self.metrics_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"a metrics URL starts with http:// or https://, got {url!r}")
        if self.flamegraph is not None:
            self.flamegraph.validate()
        return self

    @property
    def active(self) -> bool:
        return bool(self.server_pids or self.metrics_urls)
