"""Options of the embedded servers (``--server mlserver|triton``) turned into their settings."""

from __future__ import annotations

from typing import Any

from satpoint.cli.common import fail

SERVERS = ("mlserver", "triton")


def check_server(server: str) -> str:
    if server not in SERVERS:
        raise fail(f"--server takes {' or '.join(SERVERS)}, got {server!r}")
    return server


def triton_settings(
    served: dict[str, Any],
    *,
    max_batch_size: int | None,
    max_queue_delay_us: int | None,
    instances: int | None,
    preferred_batch_size: int | None,
    cpus: tuple[int, ...] | None,
) -> Any:
    """The embedded Triton's settings from the options (``served``: ``embedded_model``'s answer)."""
    from satpoint.servers.triton import TritonSettings

    unsupported = [k for k in ("runtime", "model_dir") if k in served]
    if unsupported:
        flags = ", ".join("--" + k.replace("_", "-") for k in unsupported)
        raise fail(f"{flags}: the embedded Triton serves the demo models only (as a Python function)")
    given = {
        "max_batch_size": max_batch_size,
        "max_queue_delay_us": max_queue_delay_us,
        "instances": instances,
        "preferred_batch_size": preferred_batch_size,
    }
    kw: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if "demo_model" in served:
        kw["demo_model"] = served["demo_model"]
    try:
        return TritonSettings(cpus=cpus, **kw)
    except ValueError as e:
        raise fail(str(e)) from None


def reject_options(server: str, **given: object) -> None:
    """Options given that the embedded ``server`` does not have: a usage error naming them."""
    wrong = [k for k, v in given.items() if v not in (None, False)]
    if wrong:
        flags = ", ".join("--" + k.replace("_", "-") for k in wrong)
        raise fail(f"{flags}: not an option of the embedded {server} (--server {server})")
