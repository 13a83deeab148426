"""Typed mirrors of ``summary.json``: what ``satpoint.run``/``satpoint.find`` return and ``load`` reads.

Field for field the same names as the JSON (an interface users script against: fields are added,
never renamed).  The models accept fields they do not know (a folder written by a newer satpoint
still loads); a test checks that this version's summaries have none.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from satpoint.analysis.summary.hysteresis import Hysteresis as Hysteresis
from satpoint.analysis.summary.hysteresis import HysteresisStep as HysteresisStep
from satpoint.analysis.summary.server import CpuCores as CpuCores
from satpoint.analysis.summary.server import CpuThrottling as CpuThrottling
from satpoint.analysis.summary.server import CrossCheck as CrossCheck
from satpoint.analysis.summary.server import CtxSwitches as CtxSwitches
from satpoint.analysis.summary.server import DiagnosisLine as DiagnosisLine
from satpoint.analysis.summary.server import GpuStage as GpuStage
from satpoint.analysis.summary.server import GpuUtil as GpuUtil
from satpoint.analysis.summary.server import Observed as Observed
from satpoint.analysis.summary.server import RssMb as RssMb
from satpoint.analysis.summary.server import ServerMetrics as ServerMetrics
from satpoint.analysis.summary.server import ServerResources as ServerResources

_CONFIG = ConfigDict(frozen=True, extra="allow")


class Percentiles(BaseModel):
    """Latency percentiles in milliseconds (None: no request in the window)."""

    model_config = _CONFIG
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    max: float | None = None


class LagPercentiles(BaseModel):
    model_config = _CONFIG
    p50: float | None = None
    p99: float | None = None
    max: float | None = None


class StreamStage(BaseModel):
    """A stage's streamed answers (``--stream``; ``metrics.stream_stats``): time to first chunk from the
    intended send time, gaps between chunks (ms), chunks and requests per second of window."""

    model_config = _CONFIG
    ttfc_ms: Percentiles
    gap_ms: Percentiles
    chunks_per_s: float | None = None
    requests_per_s: float | None = None
    chunks_per_request: float | None = None
    streams: int = 0  # rows due in the window that got at least one chunk
    no_chunk: int = 0  # rows counted in latency (OK or censored) that got none
    #: gaps whose two chunks came in one read (recorded as 0: the loop read late or the server sent them
    #: together), and their share of the gaps; 0 and None in older folders
    coalesced_gaps: int = 0
    coalesced_share: float | None = None


class StageResult(BaseModel):
    """One stage's steady-window figures and verdict (``summary.json`` ``stages[]``)."""

    model_config = _CONFIG
    index: int
    segment: int
    target_rps: float
    ramp_s: float
    hold_s: float
    window_start_s: float
    window_end_s: float
    requests: int
    offered_rps: float
    throughput_rps: float
    completed_rps: float
    error_rate: float
    errors: dict[str, int]
    latency_ms: Percentiles
    service_ms: Percentiles
    send_lag_ms: LagPercentiles
    generator_lag_ms: LagPercentiles
    late_fraction: float
    waited_fraction: float
    censored: int
    queue_growth_rps: float
    latency_trend_ms_per_s: float
    verdict: str
    reasons: list[str]
    retries: int = 0  # requests sent twice (the first attempt failed before any answer); 0 in older folders
    #: the run was interrupted during this stage: its window ends where its rows end, and its verdict is
    #: ``incomplete`` when that window was too short to judge
    interrupted: bool = False
    #: requests due in the window that finished, followed past its end, per second of window (0 in older folders)
    due_finished_rps: float = 0.0
    #: standard error of ``latency_trend_ms_per_s`` (0 in older folders)
    latency_trend_se_ms_per_s: float = 0.0
    #: the server's process tree in the steady window (None: not sampled, or no sample covers it)
    server: ServerResources | None = None
    #: per Prometheus endpoint scraped: what the server's own metrics say of the steady window
    server_metrics: list[ServerMetrics] = []
    #: streamed answers (``--stream``): None when the run did not stream
    stream: StreamStage | None = None


class TargetInfo(BaseModel):
    model_config = _CONFIG
    url: str | None = None
    model: str | None = None
    protocol: str | None = None
    stream: bool = False  # every answer streamed (``--stream``); False in older folders


class LostSegment(BaseModel):
    model_config = _CONFIG
    segment: int
    why: str | None = None


class RayHost(BaseModel):
    """One generator host over the run's segments (``--ray``)."""

    model_config = _CONFIG
    index: int
    host: str | None = None
    node_id: str | None = None
    requests: int
    cpu_s: float
    cpu_us_per_request: float | None = None
    clock_offset_s: float | None = None  # its wall clock ahead of the driver's (last measurement)
    clock_uncertainty_max_s: float  # half the shortest round trip, the worst over the segments
    lag_p99_max_ms: float | None = None  # its own steady-window p99 send lag, the worst stage
    lost_segments: list[LostSegment] = []


class RayGenerators(BaseModel):
    """``generator.ray``: the hosts a ``--ray`` run's shards ran on, their clocks and their start."""

    model_config = _CONFIG
    address: str | None = None
    procs_per_host: int | None = None
    hosts: list[RayHost]
    segments: int
    start_skew_max_s: float | None = None  # measured when the hosts share one machine's monotonic clock
    start_skew_bound_max_s: float | None = None  # twice the worst clock uncertainty: a bound on other machines
    lost_hosts: int = 0


class GeneratorInfo(BaseModel):
    model_config = _CONFIG
    procs: int | None = None
    requests: int
    cpu_s: float
    cpu_us_per_request: float | None = None
    ray: RayGenerators | None = None  # None: the generator ran on this machine only


class Rules(BaseModel):
    model_config = _CONFIG
    max_error_rate: float
    generator_lag_p99_ms: float
    slo_ms: dict[str, float]


class ThresholdOutcome(BaseModel):
    """One ``--threshold`` gate and whether it held."""

    model_config = _CONFIG
    expr: str
    metric: str
    op: str
    limit: float
    unit: str
    actual: float | None = None
    passed: bool
    stage: int | None = None
    note: str | None = None


class TargetLost(BaseModel):
    """Where the target stopped answering once measuring had started (the run then fails: exit code 1)."""

    model_config = _CONFIG
    segment: int | None = None
    stage: int | None = None  # 1-based, as the stage table numbers stages (None: before the first one)
    at_s: float | None = None  # on the segment's run clock, when the rows show it
    message: str


class TopFunction(BaseModel):
    """A function of the flame graph and its share of the samples."""

    model_config = _CONFIG
    function: str
    file: str | None = None
    line: int | None = None
    own_fraction: float  # samples in which it was the running function (the leaf)
    total_fraction: float | None = None  # samples in which it was anywhere on the stack


class Flamegraph(BaseModel):
    """summary.json's ``flamegraph``: py-spy's recording of the server during one stage's hold."""

    model_config = _CONFIG
    svg: str | None = None  # flamegraph.svg, in the results folder
    speedscope: str | None = None  # profile.speedscope.json (open it at speedscope.app)
    segment: int | None = None
    stage: int | None = None  # 1-based row of stages[]
    target_rps: float | None = None
    seconds: float | None = None
    from_s: float | None = None  # on the segment's run clock
    to_s: float | None = None
    samples: int | None = None
    errors: int | None = None  # samples py-spy could not read (its "Errors:" count)
    profiles: list[str] = []  # py-spy's profiles: one per process and thread
    top: list[TopFunction] = []
    pid: int | None = None
    command: str | None = None
    native: bool | None = None
    rate_hz: int | None = None
    nonblocking: bool | None = None
    cpus: list[int] | None = None  # the CPUs py-spy ran on (those the server may not use), None: any
    log: str | None = None  # py-spy.log
    error: str | None = None  # why there is no flame graph (or what went wrong while recording)


class Relocated(BaseModel):
    """The results folder refused a write (a full disk, no permission): where the results went instead."""

    model_config = _CONFIG
    asked_dir: str  # the folder asked for (``--out``)
    rescue_dir: str  # the folder in $TMPDIR the results went to: a complete results folder
    error: str  # the write that failed and why
    segments: list[int] = []  # the segments whose rows are in ``rescue_dir`` (the others are in ``asked_dir``)


class RunSummary(BaseModel):
    """``summary.json`` of any run (``kind`` ``run``, or ``find`` with the fields of ``FindSummary``)."""

    model_config = _CONFIG
    schema_version: int
    tool_version: str
    kind: str
    mode: str
    created_unix: float | None = None
    target: TargetInfo
    server: dict[str, Any] | None = None
    #: a Triton target: its name, version, extensions and the model configuration's batching knobs
    triton: dict[str, Any] | None = None
    generator: GeneratorInfo
    rules: Rules
    stages: list[StageResult]
    interrupted: bool
    target_lost: TargetLost | None = None
    #: the results could not be written to the folder asked for: where they are (None: where asked)
    relocated: Relocated | None = None
    #: other work on the machine while it measured (``analysis.server.machine_busy``); None: not watched
    machine_busy: dict[str, Any] | None = None
    #: the reference workload's time before each segment and the fastest of them (``analysis.server.machine_speed``)
    machine_speed: dict[str, Any] | None = None
    warnings: list[str]
    thresholds: list[ThresholdOutcome] = []
    closed_loop: dict[str, Any] | None = None
    observed: Observed | None = None  # None: nothing on the server side was watched
    diagnosis: list[DiagnosisLine] = []
    flamegraph: Flamegraph | None = None  # None: no flame graph was asked for
    #: a replayed trace (``run --trace``): what was replayed and its fidelity per stage (None: no trace)
    trace: dict[str, Any] | None = None
    #: a model mix: per stage and model (offered/answered rates, latency from the intended time, errors, the
    #: server's per-model figures), the counts against the mix, the model whose latency rose first
    #: (``analysis.models.per_model``); absent for a single-model run
    models: dict[str, Any] | None = None
    #: ``find --trace``: the headroom search (``headroom.json``) beside the summary of its answer's replay
    trace_headroom: dict[str, Any] | None = None
    #: ``satpoint pipeline``: the pipeline's figures (``pipeline.json``) beside the whole pipeline's search
    pipeline: dict[str, Any] | None = None

    @property
    def thresholds_passed(self) -> bool:
        """True when every ``--threshold`` gate held (or there were none)."""
        return all(t.passed for t in self.thresholds)


class LatencyAt(BaseModel):
    """Latency at a fraction of the saturation point (``find``'s profile)."""

    model_config = _CONFIG
    fraction: float | None = None
    offered_rps: float
    throughput_rps: float
    latency_ms: Percentiles
    verdict: str
    #: streamed answers (``--stream``): the profile stage's ``stream`` figures; None when it did not stream
    stream: StreamStage | None = None


class Recommendation(BaseModel):
    """The per-replica autoscaling target and replica counts."""

    model_config = _CONFIG
    margin: float
    saturation_rps: float
    target_rps_per_replica: float
    peak_rps: float | None = None
    replicas: int | None = None
    min_rps: float | None = None
    min_replicas: int | None = None
    #: when ``find --hysteresis`` saw the server recover only below the target: the figures before it was
    #: lowered (None: not lowered), what lowered it and why
    target_rps_per_replica_unlowered: float | None = None
    replicas_unlowered: int | None = None
    min_replicas_unlowered: int | None = None
    lowered_by: str | None = None
    lowered_note: str | None = None


class SearchStep(BaseModel):
    model_config = _CONFIG
    rate_rps: float
    verdict: str
    phase: str = ""


class Confirmation(BaseModel):
    """The hold at the per-replica target that confirmed (or sent further down) the answer."""

    model_config = _CONFIG
    rate_rps: float
    verdict: str | None = None
    #: every hold at a per-replica target (the confirmations and their retests) and those not stable
    attempts: int
    failed_holds: int = 0
    #: the per-replica targets confirmed (more than one: a target that did not hold sent the search below)
    targets: int = 1


class RepeatResult(BaseModel):
    """One of ``find --repeats`` searches."""

    model_config = _CONFIG
    repeat: int
    saturation_rps: float | None = None
    unstable_rps: float | None = None
    confirmed: bool | None = None
    stages: int
    finished: bool
    #: it found a rate above its answer not stable (else its answer is a lower bound, never the answer)
    brackets: bool = True


class SearchInfo(BaseModel):
    model_config = _CONFIG
    params: dict[str, float]
    steps: list[SearchStep]
    finished: bool
    replay_matches: bool
    next: dict[str, Any] | None = None
    confirmation: Confirmation | None = None
    repeats: list[RepeatResult] = []


class FindSummary(RunSummary):
    """``summary.json`` of ``satpoint find``: the stages plus the saturation point and recommendation."""

    saturation_rps: float | None = None
    #: the lowest and highest answer of ``find --repeats`` searches (None with one search)
    saturation_range_rps: list[float] | None = None
    #: [lowest answer, highest rate found not stable] over the searches (top None: never found): where the
    #: capacity lies as far as the searches can tell, like a sweep point's ``bracket_rps``
    saturation_bracket_rps: list[float | None] | None = None
    unstable_rps: float | None = None
    max_throughput_rps: float | None = None
    precision: float
    precision_achieved: float | None = None
    slo: dict[str, str] | None = None
    search: SearchInfo
    latency_at: list[LatencyAt]
    recommendation: Recommendation | None = None
    #: the answer is only a lower bound (no search bracketed the capacity): no recommendation, profile,
    #: hysteresis or manifests are derived from it, and ``recommendation_withheld`` says why
    lower_bound: bool = False
    recommendation_withheld: str | None = None
    #: what the budget was planned for (``analysis.search.budget_plan.BudgetPlan.to_dict``; None: older folders)
    budget_plan: dict[str, Any] | None = None
    find_notes: list[str]
    #: ``find --hysteresis`` (None without it)
    hysteresis: Hysteresis | None = None


def parse_summary(doc: dict[str, Any]) -> RunSummary:
    """The typed summary for a ``summary.json`` document (``FindSummary`` when ``kind`` is ``find``)."""
    if doc.get("kind") == "find":
        return FindSummary.model_validate(doc)
    return RunSummary.model_validate(doc)
