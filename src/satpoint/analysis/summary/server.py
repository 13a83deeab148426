"""Typed mirrors of ``summary.json``'s server side: what the observer saw per stage (CPU, memory, context
switches, GPUs, the CPU quota's throttling, the server's own metrics and the count cross-check) and the
diagnosis lines.  Re-exported by ``summary_model``; the same rules hold (fields are added, never renamed;
unknown fields are kept).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

_CONFIG = ConfigDict(frozen=True, extra="allow")


class CpuCores(BaseModel):
    model_config = _CONFIG
    mean: float
    p95: float


class RssMb(BaseModel):
    model_config = _CONFIG
    max: float


class CtxSwitches(BaseModel):
    model_config = _CONFIG
    voluntary: float
    involuntary: float


class GpuUtil(BaseModel):
    model_config = _CONFIG
    mean: float
    max: float | None = None


class GpuStage(BaseModel):
    """One GPU over a stage's steady window (NVML, device-wide)."""

    model_config = _CONFIG
    device: int
    samples: int
    util_percent: GpuUtil  # share of time a kernel ran (NVML's readings: mean, max)
    mem_util_percent: GpuUtil  # memory-controller busy share
    mem_used_mb: RssMb  # max
    mem_total_mb: float


class CpuThrottling(BaseModel):
    """A stage's CFS throttling (the server's cgroup ``cpu.stat`` over the steady window)."""

    model_config = _CONFIG
    periods: int  # 100 ms periods in which the server's cgroup ran
    throttled_periods: int  # of which it used up its quota and was stalled
    throttled_share: float | None = None  # throttled_periods / periods
    throttled_s: float  # time stalled, summed over the CPUs (v1 throttled_time, v2 throttled_usec)
    throttled_ms_per_s: float | None = None  # throttled_s per second of the window, in ms


class ServerResources(BaseModel):
    """A stage's ``server`` block: the server's process tree over the steady window (psutil samples)."""

    model_config = _CONFIG
    samples: int
    cpu_cores: CpuCores  # cores used = ΔCPU seconds / Δwall (mean, and p95 of the sample intervals)
    cpu_user_cores: float
    cpu_system_cores: float
    allowed_cores: float | None = None  # affinity, or the cgroup quota when smaller
    cpu_utilisation: float | None = None  # cpu_cores.mean / allowed_cores
    cpus_busy_cores: float | None = None  # busy time of the server's allowed CPUs, by any process
    other_cores: float | None = None  # of which not the server's: its CPUs were shared
    #: cores the whole machine spent on other work than the server and satpoint (steal included)
    machine_other_cores: float | None = None
    cpu_us_per_request: float | None = None
    cpu_us_per_inference: float | None = None  # per row of a batch, when a request carries more than one
    rss_mb: RssMb
    threads_max: int
    procs_max: int
    ctx_switches_per_s: CtxSwitches
    #: per GPU NVML sees (a local server on a machine with NVML); [] otherwise
    gpus: list[GpuStage] = []
    #: CFS throttling of the server's own cgroup (a CPU limit), None without one
    cpu_throttling: CpuThrottling | None = None
    #: the memory peak of the server's own cgroup so far (a memory limit), None without one
    cgroup_memory_peak_mb: float | None = None


class CrossCheck(BaseModel):
    """The server's count of successful requests against the answers satpoint got (whole segment)."""

    model_config = _CONFIG
    window: str
    segment: int
    server_requests: int
    client_answers: int
    difference: float | None = None  # (server - client) / client
    agrees: bool  # within 1 %
    #: not within 1 %, but the server counted more by no more than the requests satpoint stopped waiting
    #: for (timed out, cut off at the end of the segment) or sent twice
    explained: bool = False
    note: str | None = None  # why they may differ


class ServerMetrics(BaseModel):
    """What one Prometheus endpoint says of a stage (counter deltas between two scrapes)."""

    model_config = _CONFIG
    url: str
    window: str  # "steady" (scrapes inside the steady window) or "bracketing" (the scrapes around it)
    from_s: float
    to_s: float
    source: str | None = None  # mlserver, triton, triton_stats, seldon (None: metrics satpoint does not interpret)
    requests: int | None = None
    failures: int | None = None
    rps: float | None = None
    mean_latency_ms: float | None = None  # the server's own mean request/inference time
    handler_mean_ms: float | None = None  # MLServer: REST/gRPC handler mean for inference calls
    queue_ms: float | None = None
    compute_ms: float | None = None
    batch_size: float | None = None  # achieved (Triton: inference count / execution count)
    batch_queue_mean: float | None = None  # MLServer batch_request_queue mean
    parallel_queue_mean: float | None = None  # MLServer parallel_request_queue mean
    pending_requests_mean: float | None = None  # Triton nv_inference_pending_request_count
    # Triton's statistics endpoint (source triton_stats): mean ms per request in each compute phase, and
    # the inferences (rows of requests) and executions (model calls) whose ratio is batch_size
    compute_input_ms: float | None = None
    compute_infer_ms: float | None = None
    compute_output_ms: float | None = None
    inferences: int | None = None
    executions: int | None = None
    cross_check: CrossCheck | None = None


class Observed(BaseModel):
    """summary.json's ``observed``: what was watched on the server side and what could not be seen."""

    model_config = _CONFIG
    server_pids: list[int]
    metrics_urls: list[str]
    affinity: list[int] | None = None
    cgroup_quota_cores: float | None = None
    allowed_cores: float | None = None
    samples: int
    scrapes: int
    gpus: list[dict[str, Any]] = []  # the GPUs sampled: {device, name}
    not_seen: list[str]
    problems: list[str]


class DiagnosisLine(BaseModel):
    """One line of the diagnosis: what kind, what it says, the numbers behind it."""

    model_config = _CONFIG
    kind: str
    text: str
    evidence: dict[str, Any]
