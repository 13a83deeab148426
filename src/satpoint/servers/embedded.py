"""Which embedded server a command starts, from its options: MLServer (the default) or Triton.

One place that knows which options belong to which server, so a Triton knob given to MLServer (or an
MLServer option given to Triton) is refused before anything starts, by every command alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from satpoint.errors import ConfigError
from satpoint.servers.cgroups import parse_cpu_limit, parse_memory
from satpoint.servers.mlserver import MLServerSettings
from satpoint.servers.triton import TritonSettings

SERVERS = ("mlserver", "triton")


def _refuse(server: str, given: Mapping[str, object]) -> None:
    wrong = ["--" + k.replace("_", "-") for k, v in given.items() if v not in (None, False)]
    if wrong:
        raise ConfigError(f"{', '.join(wrong)}: not for the embedded {server}")


def embedded_settings(
    server: str,
    served: Mapping[str, Any],
    cpus: tuple[int, ...] | None,
    *,
    workers: int = 1,
    mlserver_debug: bool = False,
    max_batch_size: int | None = None,
    max_batch_time: float | None = None,
    max_queue_delay_us: int | None = None,
    instances: int | None = None,
    preferred_batch_size: int | None = None,
    cpu_limit: str | None = None,
    memory_limit: str | None = None,
) -> MLServerSettings | TritonSettings:
    """The settings of the embedded ``server`` (``mlserver`` or ``triton``) from command-line options;
    ``served`` holds the model options given (demo_model/runtime/model_dir). A ``ConfigError`` names the
    options the chosen server does not take."""
    if server not in SERVERS:
        raise ConfigError(f"--server: {' or '.join(SERVERS)}, got {server!r}")
    triton = {"max_queue_delay_us": max_queue_delay_us, "instances": instances}
    triton["preferred_batch_size"] = preferred_batch_size
    if server == "triton":
        mlserver_only: dict[str, object] = {
            "workers": workers != 1,
            "max_batch_time": max_batch_time,
            "mlserver_debug": mlserver_debug,
        }
        mlserver_only |= {"server_cpu_limit": cpu_limit, "server_memory_limit": memory_limit}
        mlserver_only |= {k: served.get(k) for k in ("demo_models", "model_repo")}  # many models: MLServer's
        _refuse(server, mlserver_only)
        try:
            return TritonSettings.from_options(served, cpus, max_batch_size=max_batch_size, **triton)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    _refuse(server, triton)
    try:
        cores = parse_cpu_limit(cpu_limit) if cpu_limit is not None else None
        memory = parse_memory(memory_limit) if memory_limit is not None else None
    except ValueError as e:
        raise ConfigError(f"--server-cpu-limit/--server-memory-limit: {e}") from None
    return MLServerSettings(
        cpu_limit=cores,
        memory_limit=memory,
        parallel_workers=workers,
        debug=mlserver_debug,
        max_batch_size=max_batch_size,
        max_batch_time_s=max_batch_time,
        cpus=cpus,
        **served,
    )
