"""``--help`` that reads by concern: every option in a panel (Target, Load, Search, ...) and with a metavar
that says what it takes (``URL``, ``RPS:RAMP_S:HOLD_S``, ``SECONDS``), set by parameter name on the options
of every command of a ``PanelledGroup``; an option a panel does not name stays under "Options"."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from typer.core import TyperGroup

from satpoint.cli.opts.duration_opts import DURATION_HELP, UNIT_S, in_units

#: panel -> the parameters shown in it, whatever the command
PANELS: dict[str, tuple[str, ...]] = {
    "Target": (
        "url", "grpc_url", "model", "model_names", "version", "model_version", "protocol", "protocols", "header",
        "payload", "batch_size", "grpc_raw", "binary_data", "grpc_connections", "models_from_server", "mix",
        "resident", "allow_unload", "stream", "timeout", "step", "pipeline_model", "seldon_model", "call_timeout",
    ),
    "Load": (
        "stage", "arrival", "seed", "max_inflight", "drain", "users", "duration", "think_ms", "rate", "during_rps",
        "warm", "max_error_rate",
    ),
    "Search": (
        "precision", "budget_s", "margin", "peak_rps", "min_rps", "emit_k8s", "start_rps", "growth", "cooldown",
        "max_rps", "profile", "confirm", "repeats", "hysteresis", "ramp", "min_hold", "max_hold", "min_requests",
        "find_budget_s", "set_", "objective", "at_rps", "remeasure_top", "max_quality_loss", "eval_data",
        "reference_model_dir",
    ),
    "Embedded server": (
        "server", "server_cpus", "server_cpu_limit", "server_memory_limit", "workers", "max_batch_size",
        "max_queue_delay_us", "instances", "preferred_batch_size", "max_batch_time", "mlserver_debug", "demo_model",
        "runtime", "model_dir", "demo_models", "model_repo", "env", "reconfigure", "ready_timeout",
        "server_cores", "server_memory_mb",
    ),
    "Generator": ("procs", "generator_cpus", "wake_window_ms", "realtime"),
    "Observe": ("server_pid", "metrics_url", "flamegraph", "flamegraph_stage", "flamegraph_native", "flamegraph_rate"),
    "Traffic": (
        "trace", "trace_format", "trace_time_column", "speed", "trace_window", "trace_peak", "trace_stage_s",
        "server_slots", "trace_time_unit", "trace_model", "trace_select", "start_speed",
    ),
    "Distributed": ("ray", "ray_hosts", "procs_per_host"),
    "TLS": ("ca_cert", "insecure", "client_cert", "client_key", "tls_cert", "tls_key", "tls_client_ca"),
    "Simulated server": (
        "port", "host", "slots", "service_ms", "dist", "models", "model_queues", "pipeline", "step_service",
        "stream_first_ms", "stream_gap_ms", "stream_chunks",
    ),
    "Faults": (
        "pause_every", "pause_s", "error_rate", "metastable", "fault", "fault_rate", "fault_after", "close_after",
        "idle_timeout", "slow_headers_ms", "error_status", "error_framing",
    ),
    "Gates": (
        "threshold", "slo", "slo_p99_ms", "baseline", "fail_on_inconclusive", "sweep", "tolerance", "tail_tolerance",
        "error_tolerance", "run_spread", "calibrate",
    ),
    "Output": ("out", "html", "no_html", "json_out", "markdown", "junit", "resume", "dry_run", "report", "to"),
    "Autoscaling": (
        "from_rps", "to_rps", "ramp_s", "base_s", "hold_s", "down_hold_s", "replicas_cmd", "replicas_prom",
        "replicas_query", "replicas_desired_query", "replicas_k8s", "replicas_k8s_url", "replicas_k8s_token_file",
        "capacity_rps", "capacity", "settle_s", "settle_max_s", "predict", "predict_sync_s", "predict_window_s",
        "predict_delay_s", "predict_max", "autoscale", "scale_delay_s", "scale_target", "scale_sync_s",
        "scale_down_window_s",
    ),
}  # fmt: skip
_PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}

_SECONDS = (
    "timeout", "drain", "duration", "budget_s", "cooldown", "ramp", "min_hold", "max_hold", "find_budget_s",
    "ready_timeout", "max_batch_time", "trace_stage_s", "pause_every", "pause_s", "idle_timeout", "call_timeout",
)  # fmt: skip
_MS = ("think_ms", "service_ms", "wake_window_ms", "slow_headers_ms", "slo_p99_ms", "stream_first_ms", "stream_gap_ms")
#: parameter -> metavar; else by type (``_by_type``); choices (``Literal``) and flags keep click's own
METAVARS: dict[str, str] = {
    **dict.fromkeys(_SECONDS, "DURATION"),
    **dict.fromkeys(_MS, "DURATION"),
    **dict.fromkeys(("url", "metrics_url"), "URL"),
    "grpc_url": "HOST:PORT",
    "stage": "RPS:RAMP_S:HOLD_S",
    "header": "KEY:VALUE",
    **dict.fromkeys(("threshold", "slo"), "EXPR"),
    "set_": "KNOB=V1,V2",
    "env": "NAME=VALUE",
    **dict.fromkeys(("generator_cpus", "server_cpus"), "CPUS"),
    **dict.fromkeys(("out", "resume", "report", "baseline", "model_dir", "model_repo", "reference_model_dir"), "DIR"),
    **dict.fromkeys(("rate", "during_rps", "peak_rps", "min_rps", "start_rps", "max_rps", "at_rps"), "RPS"),
    **dict.fromkeys(("model", "model_names", "trace_model", "pipeline_model", "step"), "NAME"),
}
_BY_TYPE: dict[Any, str] = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}


def _by_type(annotation: Any) -> str | None:
    """``N``, ``NUMBER``, ``TEXT``, ``PATH`` for an option's type (its first type but None; a choice, a
    ``Literal``, keeps click's own ``<a|b>``)."""
    origin = typing.get_origin(annotation)
    if origin is None or origin is typing.Literal:
        return _BY_TYPE.get(annotation)
    return _by_type(next((a for a in typing.get_args(annotation) if a is not type(None)), None))


class PanelledGroup(TyperGroup):
    """A command group whose commands' options (and its sub-groups') get their panel and metavar, and whose
    time options take durations (``duration_opts``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            _take_durations(command)
            if getattr(command, "commands", None) is None:
                command.epilog = f"{command.epilog or ''}\n\n{ENV_HELP}".strip()
            for p in command.params:
                if not p.opts or not p.opts[0].startswith("-") or p.name is None:
                    continue
                if getattr(p, "rich_help_panel", None) is None and p.name in _PANEL_OF:
                    p.rich_help_panel = _PANEL_OF[p.name]  # type: ignore[attr-defined]
                if p.metavar is None and not getattr(p, "is_flag", False) and p.name != "help":
                    kind = getattr(getattr(p, "type_descriptor", None), "annotation", None)
                    p.metavar = METAVARS.get(p.name) or _by_type(kind)


#: the environment variables, said at the end of every command's help
ENV_HELP = (
    "Every option can also be set in the environment, as SATPOINT_<COMMAND>_<PARAMETER> (e.g. SATPOINT_FIND_URL; "
    "each option's own is shown beside it); the command line wins."
)


def _take_durations(command: Any) -> None:
    """``command``'s time options take ``500ms``, ``30s``, ``2m``: its arguments are put in each option's unit
    before they are parsed, and its help says so."""
    flags = {o: unit for p in command.params for o in getattr(p, "opts", ()) if (unit := UNIT_S.get(o)) is not None}
    if not flags or getattr(command, "commands", None) is not None:
        return
    parse = command.parse_args
    command.parse_args = lambda ctx, args: parse(ctx, in_units(args, flags))
    command.epilog = f"{DURATION_HELP}\n\n{command.epilog or ''}".strip()
