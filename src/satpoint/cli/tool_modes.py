"""What each mode of ``sweep``, ``compare``, ``sim`` and ``diff`` takes: the parameters it uses; any other
option given is refused in one line before any load or server start (``contract.refuse_unused``).
``run``, ``find`` and ``coldstart``'s tables are in ``satpoint.cli.opts.modes``."""

from __future__ import annotations

import typer

from satpoint.cli.contract import given, reasons, refuse_unused

# sweep ------------------------------------------------------------------------------------------------------
#: every new sweep, whatever its server (``--report``/``--resume`` select the other modes)
_SWEEP_ANY = frozenset(
    (
        "old_budget_s", "old_find_budget_s",  # the old spellings of --budget and --search-budget
        "set_", "server", "model", "header", "payload", "protocol", "batch_size", "generator_cpus", "objective",
        "at_rps", "slo", "threshold", "repeats", "remeasure_top", "budget_s", "max_quality_loss", "eval_data",
        "reference_model_dir", "find_budget_s", "precision", "profile", "ramp", "min_hold", "max_hold",
        "min_requests", "out", "dry_run", "ray", "ray_hosts", "procs_per_host", "stream", "wake_window_ms",
        "realtime", "models_from_server", "mix", "server_memory_mb",
    )
)  # fmt: skip
_SWEEP_REMOTE_ONLY = (
    "url", "grpc_url", "reconfigure", "ready_timeout", "server_cores", "server_pid", "metrics_url", "ca_cert",
    "insecure", "client_cert", "client_key",
)  # fmt: skip
#: a new sweep per ``--server`` kind (``remote``: the default with ``--url``/``--grpc-url``)
SWEEP_KINDS: dict[str, frozenset[str]] = {
    "mlserver": _SWEEP_ANY | {"demo_model", "runtime", "model_dir", "demo_models", "model_repo", "workers",
                              "max_batch_size", "max_batch_time", "env", "server_cpus"},
    "triton": _SWEEP_ANY | {"demo_model", "demo_models", "max_batch_size", "server_cpus"},
    "sim": _SWEEP_ANY | {"workers", "service_ms", "server_cpus"},
    "remote": _SWEEP_ANY | set(_SWEEP_REMOTE_ONLY),
}  # fmt: skip
#: ``sweep --resume DIR``: the settings come from the folder's sweep.json; only what was not written is given
SWEEP_RESUME = frozenset(
    ("resume", "url", "grpc_url", "metrics_url", "env", "reconfigure", "header", "dry_run", "threshold")
)
#: ``sweep --report DIR``: the files rewritten, and ``--threshold`` judged on the sweep's recommended point
SWEEP_REPORT = frozenset(("report", "threshold"))
_SWEEP_WHY = reasons(
    (_SWEEP_REMOTE_ONLY, "it describes a remote server: give --url (--server remote)"),
    (("runtime", "model_dir", "max_batch_time", "env"), "it sets up the embedded MLServer (--server mlserver)"),
    (("model_repo",), "--model-repo serves an MLServer repository (folders with model-settings.json) on the "
     "embedded MLServer; the embedded Triton serves copies of a demo model: --demo-models N"),
    (("demo_model", "demo_models"), "it sets up an embedded server (--server mlserver or triton)"),
    (("workers",), "it sets the embedded MLServer's parallel_workers or the sim's slots (Triton: --set instances=N)"),
    (("max_batch_size",), "it sets up an embedded server (a remote Triton: --set max_batch_size=N)"),
    (("service_ms",), "it sets up the synthetic server (--server sim)"),
    (("server_cpus",), "it pins a server satpoint starts (a remote server's cores: --server-cores)"),
)  # fmt: skip


def refuse_for_sweep(ctx: typer.Context, kind: str, report: bool, resume: bool, dry_run: bool) -> None:
    """``sweep``: ``--report`` measures nothing and takes nothing else; ``--resume`` takes its settings from
    the folder; a new sweep takes what its server ``kind`` uses; a dry run writes nothing (no ``--out``)."""
    if report:
        refuse_unused(ctx, "sweep --report", SWEEP_REPORT, {n: "it measures nothing" for n, _ in given(ctx)})
        return
    if resume:
        recorded = "--resume continues the sweep with the settings its sweep.json records"
        refuse_unused(ctx, "sweep --resume", SWEEP_RESUME, {n: recorded for n, _ in given(ctx)})
        return
    used = SWEEP_KINDS.get(kind, _SWEEP_ANY)
    if dry_run:
        used = used - {"out", "threshold"}
    why = {**_SWEEP_WHY, "out": "a dry run writes nothing", "threshold": "a dry run measures nothing to judge"}
    refuse_unused(ctx, f"sweep --server {kind}" + (" --dry-run" if dry_run else ""), used, why)


# compare ----------------------------------------------------------------------------------------------------
_COMPARE_ANY = frozenset(
    (
        "old_budget_s",  # --budget-s: the old spelling of --search-budget
        "protocols", "precision", "budget_s", "header", "payload", "grpc_raw", "binary_data", "generator_cpus",
        "ramp", "min_hold", "max_hold", "min_requests", "out", "stream", "wake_window_ms", "realtime",
        "threshold", "slo",
    )
)  # fmt: skip
COMPARE_URL = _COMPARE_ANY | {"url", "grpc_url", "model", "ca_cert", "insecure", "client_cert", "client_key"}
COMPARE_MLSERVER = _COMPARE_ANY | {"server", "workers", "demo_model", "runtime", "model_dir", "server_cpus"}
COMPARE_TRITON = _COMPARE_ANY | {"server", "demo_model", "server_cpus"}
_COMPARE_WHY = reasons(
    (("server", "server_cpus", "demo_model"), "it sets up the embedded server, which --url replaces"),
    (("workers", "runtime", "model_dir"), "it sets up the embedded MLServer (--server mlserver), which --url "
     "replaces"),
    (("grpc_url", "model", "ca_cert", "insecure", "client_cert", "client_key"),
     "it describes a running server: give its REST --url too (without it the embedded server is compared)"),
    (("grpc_raw",), "it shapes gRPC requests, and --protocols has no grpc"),
    (("binary_data",), "it shapes REST requests, and --protocols has no rest"),
)  # fmt: skip


def refuse_for_compare(ctx: typer.Context, url: bool, server: str, protocols: set[str]) -> None:
    """``compare``: a ``--url`` server or the embedded one (MLServer or Triton), over the ``protocols``."""
    used = COMPARE_URL if url else COMPARE_TRITON if server == "triton" else COMPARE_MLSERVER
    if "grpc" not in protocols:
        used = used - {"grpc_raw", "grpc_url"}
    if "rest" not in protocols:
        used = used - {"binary_data"}
    why = dict(_COMPARE_WHY)
    if url and "grpc" not in protocols:
        why["grpc_url"] = "--protocols has no grpc"
    mode = "compare --url" if url else f"compare (the embedded {server})"
    refuse_unused(ctx, mode, used, why)


# sim --------------------------------------------------------------------------------------------------------
_SIM_ANY = frozenset(
    (
        "port", "host", "slots", "service_ms", "dist", "pause_every", "error_rate", "model", "models", "seed",
        "protocol", "tls_cert", "metastable", "stream", "pipeline", "fault", "autoscale",
    )
)  # fmt: skip
#: each fault's own options (every fault takes ``--fault-rate`` and ``--fault-after``)
SIM_FAULT_OPTIONS = {
    "close-after": ("close_after",),
    "idle-timeout": ("idle_timeout",),
    "slow-headers": ("slow_headers_ms",),
    "error-body": ("error_status", "error_framing"),
}
_SCALE_TUNING = ("scale_delay_s", "scale_target", "scale_sync_s", "scale_down_window_s")
_SIM_WHY = reasons(
    (("pause_s",), "only with --pause-every"),
    (("model_queues",), "only with --models"),
    (("tls_key", "tls_client_ca"), "only with --tls-cert"),
    (("fault_rate", "fault_after"), "only with --fault"),
    (("close_after",), "only with --fault close-after"),
    (("idle_timeout",), "only with --fault idle-timeout"),
    (("slow_headers_ms",), "only with --fault slow-headers"),
    (("error_status", "error_framing"), "only with --fault error-body"),
    (("stream_first_ms", "stream_gap_ms", "stream_chunks"), "only with --stream"),
    (("step_service",), "only with --pipeline"),
    (("fault", "pipeline", "autoscale"), "the REST sim only (--protocol rest)"),
    (_SCALE_TUNING, "only with --autoscale"),
)  # fmt: skip


def refuse_for_sim(ctx: typer.Context, protocol: str, values: dict[str, object]) -> None:
    """``sim``: an option that tunes another one (a fault's, the stream's, TLS's) is refused without it."""
    used = set(_SIM_ANY)
    if protocol == "grpc":
        used -= {"fault", "pipeline", "autoscale"}
    on = {k for k, v in values.items() if v not in (None, False)}
    used |= {"pause_s"} if "pause_every" in on else set()
    used |= {"model_queues"} if "models" in on else set()
    used |= {"tls_key", "tls_client_ca"} if "tls_cert" in on else set()
    used |= {"stream_first_ms", "stream_gap_ms", "stream_chunks"} if "stream" in on else set()
    used |= {"step_service"} if "pipeline" in on else set()
    used |= set(_SCALE_TUNING) if "autoscale" in on else set()
    fault = values.get("fault")
    if isinstance(fault, str):
        used |= {"fault_rate", "fault_after", *SIM_FAULT_OPTIONS.get(fault, ())}
    refuse_unused(ctx, f"sim --protocol {protocol}" + (f" --fault {fault}" if fault else ""), frozenset(used), _SIM_WHY)


# diff -------------------------------------------------------------------------------------------------------
_DIFF_ANY = frozenset(
    (
        "sweep", "tolerance", "tail_tolerance", "error_tolerance", "run_spread", "fail_on_inconclusive",
        "calibrate", "json_out", "markdown", "junit", "html", "no_html",
    )
)  # fmt: skip
_DIFF_WHY = reasons(
    (("error_tolerance",), "two points of a sweep are compared on capacity and latency, not on error rates"),
    (("fail_on_inconclusive",), "an A/A pair (--calibrate) exits 0: its false alarms are the result"),
    (("html",), "--no-html writes no overlay page"),
)


def refuse_for_diff(ctx: typer.Context, sweep: bool, calibrate: bool, no_html: bool) -> None:
    """``diff``: two folders, or two points of a sweep (``--sweep``); ``--calibrate`` never gates."""
    used = set(_DIFF_ANY)
    used -= {"error_tolerance"} if sweep else set()
    used -= {"fail_on_inconclusive"} if calibrate else set()
    used -= {"html"} if no_html else set()
    mode = "diff" + (" --sweep" if sweep else "") + (" --calibrate" if calibrate else "")
    refuse_unused(ctx, mode + (" --no-html" if no_html else ""), frozenset(used), _DIFF_WHY)
