"""``run --trace``'s options (the replay itself: ``satpoint.procedures.trace_replay``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from satpoint.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_ANSWER, fail
from satpoint.cli.contract import given, reasons, refuse_unused
from satpoint.payloads.mix import ModelMix
from satpoint.traffic.trace_plan import TraceOptions

TraceOpt = Annotated[Path | None, typer.Option("--trace", help="replay this trace's arrival times (CSV or JSONL)")]
TraceFormatOpt = Annotated[
    Literal["csv", "jsonl", "envoy", "envoy-json", "prom"] | None,
    typer.Option(help="csv, jsonl, envoy, envoy-json, prom (default: by name)"),
]
TraceTimeColumnOpt = Annotated[str, typer.Option(help="--trace: the timestamp column (epoch s, ms, us or ISO 8601)")]
SpeedOpt = Annotated[float, typer.Option(help="--trace: replay X times as fast (2: twice the trace's rate)")]
TraceWindowOpt = Annotated[str | None, typer.Option(help="--trace: replay START..END only (2m..12m, or ISO times)")]
TracePeakOpt = Annotated[str | None, typer.Option(help="--trace: replay the busiest window this long (10m), printed")]
TraceStageOpt = Annotated[float, typer.Option("--trace-stage", help="--trace: seconds of trace per judged stage")]
StartSpeedOpt = Annotated[float, typer.Option(help="find --trace: the first speed factor tried")]
ServerSlotsOpt = Annotated[int | None, typer.Option(help="--trace: the server's concurrency for the queue prediction")]
TraceTimeUnitOpt = Annotated[
    Literal["auto", "s", "ms", "us", "iso"],
    typer.Option(help="--trace: the timestamps' unit: auto (epoch s/ms/us by size, or ISO 8601), s, ms, us, iso"),
]
TraceModelOpt = Annotated[
    str | None,
    typer.Option(help="--trace: replay the requests of this model of the trace only (default: --model; '*': all)"),
]
TraceSelectOpt = Annotated[
    list[str] | None, typer.Option(help="--trace-format prom: replay the series with this label=value (repeatable)")
]

#: ``find``'s parameters that ``find --trace`` uses; any other one given is refused (``refuse_unused``)
FIND_TRACE_OPTIONS = frozenset(
    (
        "old_budget_s",  # --budget-s: the old spelling of --budget
        "old_version",  # --version: the old spelling of --model-version
        "url", "model_names", "version", "protocol", "precision", "budget_s", "margin", "emit_k8s", "growth",
        "cooldown", "seed", "max_inflight", "timeout", "procs", "header", "payload", "batch_size", "max_error_rate",
        "generator_cpus", "binary_data", "grpc_raw", "grpc_connections", "profile", "confirm", "out", "html",
        "ca_cert", "insecure", "client_cert", "client_key", "trace", "trace_format", "trace_time_column",
        "trace_time_unit", "trace_window", "trace_peak", "trace_stage_s", "trace_model", "trace_select",
        "start_speed", "stream", "wake_window_ms", "realtime", "models_from_server", "mix", "resident",
        "allow_unload", "threshold", "slo",
    )
)  # fmt: skip
#: why ``find --trace`` refuses each option of ``find`` it does not use
FIND_TRACE_WHY = reasons(
    (("server", "server_cpus", "server_cpu_limit", "server_memory_limit", "workers", "max_batch_size",
      "max_queue_delay_us", "instances", "preferred_batch_size", "max_batch_time", "demo_model", "runtime",
      "model_dir", "demo_models", "model_repo", "mlserver_debug"),
     "it sets up the embedded server; find --trace replays against a running one, --url"),
    (("start_rps", "max_rps"), "the search is over the trace's speed factor: --start-speed"),
    (("peak_rps", "min_rps"), "replicas are sized for the trace's busiest minute"),
    (("arrival",), "the trace's own arrival times are replayed"),
    (("ramp", "min_hold", "max_hold", "min_requests"), "a replay's stages are --trace-stage seconds of trace"),
    (("repeats",), "one search of the speed factor per command: run it again for a spread"),
    (("hysteresis",), "the recovery walk steps a constant rate down; a trace has no one rate"),
    (("server_pid", "metrics_url"), "replays are not observed: observe the one at the speed found with run --trace"),
    (("flamegraph", "flamegraph_native", "flamegraph_rate"), "a flame graph records a stage of a --stage plan"),
    (("ray", "ray_hosts", "procs_per_host"), "a replay runs on this machine's generator processes, --procs"),
    (("baseline", "fail_on_inconclusive"), "diff judges rate searches and runs, not a headroom search"),
)  # fmt: skip


def model_filter(
    model_flag: str | None, given: str | None, mix: ModelMix | None = None
) -> str | tuple[str, ...] | None:
    """The model(s) whose requests a trace replays: ``--trace-model`` ('*': every one), else ``--model``; a
    mix's every named model (its first one alone would leave the others' requests out: an optimistic
    replay), and every row for ``--models-from-server`` (the models are known only once the server is asked)."""
    if given == "*":
        return None
    if given is not None:
        return given
    if mix is not None:
        return tuple(mix.models) if mix.models and not mix.from_server else None
    return model_flag or None


def select_pairs(items: list[str] | None) -> tuple[tuple[str, str], ...]:
    """``--trace-select label=value`` items as pairs (a malformed one is a usage error)."""
    out = []
    for item in items or ():
        label, sep, value = item.partition("=")
        if not sep or not label.strip():
            raise ValueError(f"--trace-select {item!r}: expected label=value")
        out.append((label.strip(), value.strip()))
    return tuple(out)


#: the spellings of find's options that only a trace search uses
TRACE_ONLY = ("--trace-", "--start-speed")
#: the spellings of run's options that only a replay uses
RUN_TRACE_ONLY = ("--trace-", "--speed", "--server-slots")


def refuse_run_trace_only(ctx: typer.Context) -> None:
    """``run`` without ``--trace``: every replay option given is refused (it would change nothing)."""
    if only := [o for _, o in given(ctx) if o.startswith(RUN_TRACE_ONLY)]:
        raise fail(f"{', '.join(only)}: only with --trace FILE")


def refuse_for_trace(ctx: typer.Context, with_trace: bool) -> None:
    """``find``: with ``--trace``, every option given that a trace search does not use is refused, each
    with its reason; without it, the trace-only options are."""
    if with_trace:
        refuse_unused(ctx, "find --trace", FIND_TRACE_OPTIONS, FIND_TRACE_WHY)
    if not with_trace and (only := [o for _, o in given(ctx) if o.startswith(TRACE_ONLY)]):
        raise fail(f"{', '.join(only)}: only with --trace FILE")


def headroom_exit(block: dict[str, object], stopped: bool) -> int:
    """``find --trace``'s exit code: 130 stopped, 1 when a replay lost its target (as ``find``: the server
    crashed under the load), ``EXIT_NO_ANSWER`` without a headroom (or when every replay at the last speed
    was limited: a lower bound that says nothing of the server), else 0."""
    if stopped or block.get("ended") == "stopped":
        return EXIT_INTERRUPTED
    if block.get("ended") == "target_lost":
        return EXIT_FAILED
    return EXIT_NO_ANSWER if block.get("speed") is None or block.get("ended") == "limit" else 0


def trace_search_options(
    path: Path,
    fmt: str | None,
    time_column: str,
    time_unit: str,
    window: str | None,
    peak: str | None,
    stage_s: float,
    seed: int,
    model: str | None,
    trace_model: str | None,
    select: list[str] | None,
    mix: ModelMix | None = None,
    speed: float = 1.0,
    **more: Any,
) -> TraceOptions:
    """``find --trace``'s replay options (speed 1: the search scales it), and ``run --trace``'s (its
    ``speed`` and the rest in ``more``): the model filter and the Prometheus selection from their options."""
    return TraceOptions(
        path, fmt, time_column, time_unit, speed, window, peak, stage_s, seed,
        model=model_filter(model, trace_model, mix), select=select_pairs(select), **more,
    )  # fmt: skip
