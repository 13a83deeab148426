"""What each mode of ``run`` and ``find`` takes: the parameters it uses, or refuses with a message of its own
(a value check); any other option given is refused in one line before any load (``contract.refuse_unused``).
``find --trace``'s table is ``trace_opts.FIND_TRACE_OPTIONS``."""

from __future__ import annotations

import typer

from satpoint.cli.contract import reasons, refuse_unused
from satpoint.cli.opts.trace_opts import refuse_for_trace

_RUN_COMMON = frozenset(
    (
        "old_version",  # --version: the old spelling of --model-version
        "url", "model", "version", "protocol", "seed", "timeout", "drain", "header", "payload", "batch_size",
        "max_error_rate", "out", "grpc_raw", "binary_data", "grpc_connections", "html", "threshold", "ca_cert",
        "insecure", "client_cert", "client_key", "server_pid", "metrics_url", "baseline", "fail_on_inconclusive",
        "stream", "models_from_server", "mix", "resident", "allow_unload", "flamegraph", "flamegraph_stage",
        "flamegraph_native", "flamegraph_rate", "procs", "ray", "wake_window_ms", "realtime",
    )
)  # fmt: skip
_RUN_TRACE_ONLY = (
    "trace", "trace_format", "trace_time_column", "speed", "trace_window", "trace_peak", "trace_stage_s",
    "server_slots", "trace_time_unit", "trace_model", "trace_select",
)  # fmt: skip
#: ``run --stage`` (the open loop), ``run --users`` (the closed loop), ``run --trace`` (a replay)
RUN_STAGE = _RUN_COMMON | {"stage", "arrival", "max_inflight", "generator_cpus", "ray_hosts", "procs_per_host"}
#: ``run --rate R --duration D``: the one-stage open loop, ``--stage R:0:D``
RUN_RATE = RUN_STAGE - {"stage"} | {"rate", "duration"}
RUN_USERS = _RUN_COMMON | {"users", "duration", "think_ms", "stage"}
RUN_TRACE = _RUN_COMMON | {
    *_RUN_TRACE_ONLY, "max_inflight", "generator_cpus", "ray_hosts", "procs_per_host", "stage", "users"
}  # fmt: skip
_RUN_WHY = reasons(
    (_RUN_TRACE_ONLY, "only with --trace FILE"),
    (("duration",), "it is the closed loop's (--users) or --rate's length"),
    (("think_ms",), "it belongs to the closed loop, --users"),
    (("rate",), "--rate R --duration D is the one-stage open loop"),
    (("arrival",), "the arrivals are the closed loop's users, or the trace's own times"),
    (("max_inflight",), "the closed loop keeps --users requests in flight"),
    (("generator_cpus", "ray_hosts", "procs_per_host"), "a closed loop runs in one generator process"),
)

#: ``find --url``: a search of a running server (``--demo-model``, ``--runtime``, ``--model-dir``,
#: ``--demo-models`` and ``--model-repo`` are refused on their own, the trace-only options by
#: ``refuse_for_trace``, the embedded server's other options here)
FIND_URL = frozenset(
    (
        "old_budget_s",  # --budget-s: the old spelling of --budget
        "old_version",  # --version: the old spelling of --model-version
        "url", "model_names", "version", "protocol", "precision", "slo", "budget_s", "margin",
        "peak_rps", "min_rps", "emit_k8s", "start_rps", "growth", "cooldown", "max_rps", "arrival", "seed",
        "max_inflight", "timeout", "procs", "header", "payload", "batch_size", "max_error_rate", "generator_cpus",
        "binary_data", "demo_model", "runtime", "model_dir", "demo_models",
        "model_repo", "grpc_raw", "grpc_connections", "profile", "confirm", "repeats", "hysteresis", "ramp",
        "min_hold", "max_hold", "min_requests", "out", "html", "threshold", "ca_cert", "insecure", "client_cert",
        "client_key", "server_pid", "metrics_url", "flamegraph", "flamegraph_native", "flamegraph_rate", "ray",
        "ray_hosts", "procs_per_host", "baseline", "fail_on_inconclusive", "stream", "wake_window_ms", "realtime",
        "models_from_server", "mix", "resident", "allow_unload",
    )
)  # fmt: skip
_FIND_URL_WHY = reasons(
    (
        ("server", "server_cpus", "server_cpu_limit", "server_memory_limit", "workers", "max_batch_size",
         "max_queue_delay_us", "instances", "preferred_batch_size", "max_batch_time", "mlserver_debug"),
        "it sets up the embedded server, which --url replaces",
    ),
)  # fmt: skip

_COLD_ANY = frozenset(
    ("model", "repeats", "during_rps", "warm", "call_timeout", "timeout", "out", "protocol", "resident")
)
_COLD_OVERCOMMIT = frozenset(("mix", "rate", "duration", "seed", "slo", "slo_p99_ms"))
_COLD_URL = frozenset(("url", "header", "ca_cert", "insecure", "client_cert", "client_key"))
#: ``coldstart`` against ``--url`` or the embedded server (the TLS options are refused on their own without a
#: URL), each with or without the overcommit runs (``--resident``)
COLDSTART_URL = _COLD_ANY | _COLD_URL
COLDSTART_EMBEDDED = _COLD_ANY | {"demo_models", "demo_model", "server", "ca_cert", "insecure", "client_cert",
                                  "client_key"}  # fmt: skip
_COLD_WHY = reasons(
    (("demo_models", "demo_model", "server"), "it sets up the embedded server, which --url replaces"),
    (("header",), "the embedded server takes no headers: they go with --url"),
    (("mix", "rate", "duration", "seed"), "it shapes the overcommit runs: give --resident K"),
    (("slo", "slo_p99_ms"), "it judges the overcommit runs: give --resident K"),
)


def refuse_for_run(ctx: typer.Context, trace: bool, users: bool, rate: bool = False) -> None:
    """``run``: every option its mode (``--trace``, ``--users``, ``--rate``, else ``--stage``) does not take is
    refused."""
    if rate and not trace and not users:
        why = {**_RUN_WHY, "stage": "--rate R --duration D is the one-stage plan: give --stage or --rate"}
        refuse_unused(ctx, "run --rate", RUN_RATE, why)
    elif trace:
        refuse_unused(ctx, "run --trace", RUN_TRACE, _RUN_WHY)
    elif users:
        refuse_unused(ctx, "run --users (a closed loop)", RUN_USERS, _RUN_WHY)
    else:
        refuse_unused(ctx, "run --stage", RUN_STAGE, _RUN_WHY)


def refuse_for_find(ctx: typer.Context, trace: bool, url: bool) -> None:
    """``find``: ``--trace`` takes what ``refuse_for_trace`` says; a search of a ``--url`` server refuses
    the embedded server's options."""
    refuse_for_trace(ctx, trace)
    if url and not trace:
        refuse_unused(ctx, "find --url", FIND_URL, _FIND_URL_WHY)


def refuse_for_coldstart(ctx: typer.Context, url: bool, resident: bool) -> None:
    """``coldstart``: what neither its target (``--url`` or the embedded server) nor, without ``--resident``,
    the cold starts alone use is refused."""
    used = COLDSTART_URL if url else COLDSTART_EMBEDDED
    mode = "coldstart" + (" --url" if url else "") + (" --resident" if resident else "")
    refuse_unused(ctx, mode, used | _COLD_OVERCOMMIT if resident else used, _COLD_WHY)
