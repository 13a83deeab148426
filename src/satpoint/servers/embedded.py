"""Which embedded server a command starts, from its options: MLServer (the default) or Triton.

One place that knows which options belong to which server, so a Triton knob given to MLServer (or an
MLServer option given to Triton) is refused before anything starts, by every command alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from satpoint.errors import ConfigError
from satpoint.servers.embedded_base import check_embedded_extra
from satpoint.servers.limits.cgroups import parse_cpu_limit, parse_memory
from satpoint.servers.mlserver.server import MLServerSettings
from satpoint.servers.triton.repo import TritonRepoSettings
from satpoint.servers.triton.server import TRITON_EXTRA_HINT, TritonSettings, pytriton_available

SERVERS = ("mlserver", "triton")
#: why ``--model-repo`` is refused with ``--server triton``
MODEL_REPO_ON_TRITON = (
    "--model-repo serves an MLServer repository (folders with model-settings.json) on the embedded MLServer; "
    "the embedded Triton serves copies of a demo model: --demo-models N"
)
#: the settings of an embedded server: MLServer, Triton with one model, Triton with copies of a demo model
EmbeddedSettings = MLServerSettings | TritonSettings | TritonRepoSettings


def check_extra(server: str) -> None:
    """A ``ConfigError`` naming the extra to install when the embedded ``server`` (``mlserver`` or ``triton``)
    cannot start in this environment: refused before the banner and before any load."""
    if server == "triton":
        if not pytriton_available():
            raise ConfigError(TRITON_EXTRA_HINT)
    else:
        check_embedded_extra()


def _refuse(server: str, given: Mapping[str, object]) -> None:
    wrong = ["--" + k.replace("_", "-") for k, v in given.items() if v not in (None, False)]
    if wrong:
        raise ConfigError(f"{', '.join(wrong)}: not for the embedded {server}")


def check_triton_served(served: Mapping[str, Any]) -> None:
    """A ``ConfigError`` for a repository of model folders on the embedded Triton (``--model-repo``)."""
    if served.get("model_repo") is not None:
        raise ConfigError(MODEL_REPO_ON_TRITON)


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
) -> EmbeddedSettings:
    """The settings of the embedded ``server`` (``mlserver`` or ``triton``) from command-line options;
    ``served`` holds the model options given (demo_model/runtime/model_dir, demo_models/model_repo). A
    ``ConfigError`` names the options the chosen server does not take.  Triton with ``demo_models``: the
    copies in a model repository (``servers.triton.repo``), with the same knobs."""
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
        _refuse(server, mlserver_only)
        check_triton_served(served)
        try:
            settings = TritonSettings.from_options(served, cpus, max_batch_size=max_batch_size, **triton)
            check_extra(server)
            copies = served.get("demo_models")
            return settings if copies is None else TritonRepoSettings.from_settings(settings, copies)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    _refuse(server, triton)
    try:
        cores = parse_cpu_limit(cpu_limit) if cpu_limit is not None else None
        memory = parse_memory(memory_limit) if memory_limit is not None else None
    except ValueError as e:
        raise ConfigError(f"--server-cpu-limit/--server-memory-limit: {e}") from None
    check_extra(server)
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
