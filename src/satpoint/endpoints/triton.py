"""Triton Inference Server as a target: recognise it, read its model configuration and statistics, and
apply a model configuration through its repository API.

Pure parts (tested on recorded answers): :func:`detect` (``GET /v2``: name and extensions),
:func:`config_inputs` (``/v2/models/M/config`` → OIP input descriptions, batch dimension included),
:func:`batch_problem`, :func:`config_with_knobs` / :func:`config_differences` (the knobs a sweep sets:
``max_batch_size``, ``max_queue_delay_us``, ``preferred_batch_size``, ``instances``).

Control calls (REST, off the hot path): :func:`probe` (``/v2`` + the model's config when it is a
Triton), :func:`stats_url`, :func:`apply_knobs` (``POST /v2/repository/models/M/load`` with the changed
configuration as the override, then ``GET`` the configuration back and check it; needs Triton started
with ``--model-control-mode explicit``), :func:`restore_config` (the configuration found before, loaded
back: a shared Triton is left as it was).  Over gRPC satpoint speaks only the OIP services, so Triton's
configuration and statistics are read over REST.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from satpoint.errors import ConfigError, TargetUnreachable
from satpoint.transports.rest.control_rest import RestControl
from satpoint.transports.tls import TlsOptions

#: the knobs of a Triton model configuration a sweep can set
TRITON_KNOBS = ("max_batch_size", "max_queue_delay_us", "preferred_batch_size", "instances")

_DATATYPES = {
    "TYPE_BOOL": "BOOL", "TYPE_UINT8": "UINT8", "TYPE_UINT16": "UINT16", "TYPE_UINT32": "UINT32",
    "TYPE_UINT64": "UINT64", "TYPE_INT8": "INT8", "TYPE_INT16": "INT16", "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64", "TYPE_FP16": "FP16", "TYPE_FP32": "FP32", "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES", "TYPE_BF16": "BF16",
}  # fmt: skip


@dataclass(frozen=True)
class TritonServer:
    """What ``GET /v2`` says of a Triton."""

    name: str
    version: str | None
    extensions: tuple[str, ...]

    @property
    def has_statistics(self) -> bool:
        return "statistics" in self.extensions

    @property
    def has_repository(self) -> bool:
        return "model_repository" in self.extensions

    @property
    def has_binary_data(self) -> bool:
        return "binary_tensor_data" in self.extensions

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "extensions": list(self.extensions)}


def detect(doc: object) -> TritonServer | None:
    """A Triton from its ``/v2`` answer (``name`` "triton"), or None for another server."""
    if not isinstance(doc, Mapping):
        return None
    name = doc.get("name")
    if not isinstance(name, str) or name.strip().lower() != "triton":
        return None
    ext = doc.get("extensions")
    extensions = tuple(str(e) for e in ext) if isinstance(ext, list) else ()
    version = doc.get("version")
    return TritonServer(name, str(version) if version is not None else None, extensions)


def config_inputs(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The model's inputs as OIP metadata (``name``, ``datatype``, ``shape``) from its Triton
    configuration: with ``max_batch_size`` > 0 the configured dims lack the batch dimension, which goes
    first as -1."""
    batched = int(config.get("max_batch_size") or 0) > 0
    out: list[dict[str, Any]] = []
    for spec in config.get("input") or []:
        dtype = str(spec.get("data_type", ""))
        if dtype not in _DATATYPES:
            raise ConfigError(f"input {spec.get('name')!r}: Triton data type {dtype!r} is not one satpoint can build")
        dims = [int(d) for d in spec.get("dims") or []]
        out.append(
            {"name": str(spec["name"]), "datatype": _DATATYPES[dtype], "shape": [-1, *dims] if batched else dims}
        )
    return out


def batch_problem(config: Mapping[str, Any], batch_size: int) -> str | None:
    """Why requests of ``batch_size`` rows cannot work with this configuration (None: they can)."""
    mbs = int(config.get("max_batch_size") or 0)
    if mbs > 0 and batch_size > mbs:
        return (
            f"--batch-size {batch_size} exceeds the model's max_batch_size {mbs} in its Triton configuration: "
            "Triton would reject every request"
        )
    return None


def config_with_knobs(config: Mapping[str, Any], knobs: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a model configuration with the Triton knobs among ``knobs`` applied (others ignored)."""
    out = copy.deepcopy(dict(config))
    if "max_batch_size" in knobs:
        out["max_batch_size"] = int(knobs["max_batch_size"])
    if "max_queue_delay_us" in knobs or "preferred_batch_size" in knobs:
        batching = dict(out.get("dynamic_batching") or {})
        if "max_queue_delay_us" in knobs:
            batching["max_queue_delay_microseconds"] = int(knobs["max_queue_delay_us"])
        if "preferred_batch_size" in knobs:
            batching["preferred_batch_size"] = [int(knobs["preferred_batch_size"])]
        out["dynamic_batching"] = batching
    if "instances" in knobs:
        groups = [dict(g) for g in out.get("instance_group") or [{"kind": "KIND_CPU"}]]
        groups[0]["count"] = int(knobs["instances"])
        out["instance_group"] = groups
    return out


def knob_values(config: Mapping[str, Any]) -> dict[str, Any]:
    """The Triton knobs' values in a configuration (None where it does not set one)."""
    batching = config.get("dynamic_batching") or {}
    preferred = batching.get("preferred_batch_size") or []
    groups = config.get("instance_group") or []
    return {
        "max_batch_size": config.get("max_batch_size"),
        "max_queue_delay_us": int(batching.get("max_queue_delay_microseconds", 0)) if batching else None,
        "preferred_batch_size": int(preferred[0]) if preferred else None,
        "instances": int(groups[0].get("count", 1)) if groups else None,
    }


def config_differences(config: Mapping[str, Any], knobs: Mapping[str, Any]) -> list[str]:
    """``"knob: wanted W, the server has H"`` for each Triton knob the configuration does not hold."""
    have = knob_values(config)
    return [
        f"{k}: wanted {knobs[k]}, the server has {have[k]}"
        for k in TRITON_KNOBS
        if k in knobs and (have[k] is None or int(have[k]) != int(knobs[k]))
    ]


# -- control calls ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TritonProbe:
    """A target found to be a Triton: the server and the model's configuration (None if unreadable)."""

    server: TritonServer
    config: dict[str, Any] | None
    config_error: str | None = None

    def describe(self) -> dict[str, Any]:
        cfg = self.config or {}
        return {
            **self.server.to_dict(),
            "model_config": {"max_batch_size": cfg.get("max_batch_size"), **_knobs_shown(cfg)} if self.config else None,
            "model_config_error": self.config_error,
        }


def _knobs_shown(cfg: Mapping[str, Any]) -> dict[str, Any]:
    v = knob_values(cfg)
    return {k: v[k] for k in TRITON_KNOBS if k != "max_batch_size"}


def probe(
    base_url: str,
    model: str,
    headers: Sequence[tuple[str, str]] = (),
    *,
    tls: TlsOptions | None = None,
) -> TritonProbe | None:
    """``GET /v2``; for a Triton also ``GET /v2/models/M/config``.  None when the server is not a Triton
    or does not answer ``/v2`` with JSON."""
    return probe_with(RestControl(base_url, tuple(headers), tls), model)


def probe_with(client: RestControl, model: str) -> TritonProbe | None:
    """``probe`` through the target's control client."""
    try:
        status, doc = client.call_json("/v2")
    except TargetUnreachable:
        return None
    server = detect(doc) if status == 200 else None
    if server is None:
        return None
    status, cfg = client.call_json(f"/v2/models/{model}/config")
    if status == 200 and isinstance(cfg, dict):
        return TritonProbe(server, cfg)
    why = cfg.get("error") if isinstance(cfg, dict) else None
    return TritonProbe(server, None, f"GET /v2/models/{model}/config: HTTP {status}" + (f": {why}" if why else ""))


def stats_url(base_url: str, model: str) -> str:
    """Where Triton's statistics of ``model`` are (for the observer's scrapes)."""
    return RestControl(base_url).statistics_url(model)


def apply_knobs(
    base_url: str,
    model: str,
    knobs: Mapping[str, Any],
    headers: Sequence[tuple[str, str]] = (),
    *,
    tls: TlsOptions | None = None,
    timeout_s: float = 300.0,
    original: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Reload ``model`` with its configuration changed by the Triton ``knobs`` (repository API, explicit
    model control), read the configuration back and check that it holds them; what was done (with the
    knobs' values before, ``before``).  ``original`` receives the whole configuration found, for
    :func:`restore_config`."""
    wanted = {k: v for k, v in knobs.items() if k in TRITON_KNOBS}
    client = RestControl(base_url, tuple(headers), tls)
    status, doc = client.call_json("/v2")
    server = detect(doc) if status == 200 else None
    if server is not None and not server.has_repository:
        raise ConfigError(
            f"this Triton does not offer the model repository API (its extensions: {', '.join(server.extensions)}): "
            f"{_show(wanted)} cannot be applied by reloading {model}"
        )
    status, cfg = client.call_json(f"/v2/models/{model}/config")
    if status != 200 or not isinstance(cfg, dict):
        raise TargetUnreachable(f"cannot read {model}'s Triton configuration (HTTP {status}): {cfg}")
    if original is not None:
        original.clear()
        original.update(copy.deepcopy(cfg))
    override = config_with_knobs(cfg, wanted)
    load = {"parameters": {"config": json.dumps(override)}}
    status, answer = client.call_json(f"/v2/repository/models/{model}/load", load, timeout_s)
    if status != 200:
        why = answer.get("error") if isinstance(answer, dict) else answer
        raise ConfigError(
            f"Triton refused to load {model} with {_show(wanted)} (HTTP {status}: {why}); the repository API needs "
            "tritonserver --model-control-mode explicit"
        )
    status, back = client.call_json(f"/v2/models/{model}/config")
    if status != 200 or not isinstance(back, dict):
        raise TargetUnreachable(f"cannot read {model}'s Triton configuration back after loading (HTTP {status})")
    missing = config_differences(back, wanted)
    if missing:
        raise ConfigError(f"after loading {model}, its configuration does not hold the knobs: {'; '.join(missing)}")
    return {"applied": wanted, "read_back": knob_values(back), "before": knob_values(cfg)}


def restore_config(
    base_url: str,
    model: str,
    original: Mapping[str, Any],
    headers: Sequence[tuple[str, str]] = (),
    *,
    tls: TlsOptions | None = None,
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    """Load ``model`` back with the configuration ``original`` (what :func:`apply_knobs` found) and check
    that its knobs hold again; the knobs' values read back."""
    client = RestControl(base_url, tuple(headers), tls)
    load = {"parameters": {"config": json.dumps(dict(original))}}
    status, answer = client.call_json(f"/v2/repository/models/{model}/load", load, timeout_s)
    if status != 200:
        why = answer.get("error") if isinstance(answer, dict) else answer
        raise ConfigError(f"Triton refused to load {model} back with its original configuration (HTTP {status}: {why})")
    status, back = client.call_json(f"/v2/models/{model}/config")
    was = {k: v for k, v in knob_values(original).items() if v is not None}
    missing = config_differences(back, was) if status == 200 and isinstance(back, dict) else ["not readable"]
    if missing:
        raise ConfigError(f"after loading {model} back, its configuration is not the original: {'; '.join(missing)}")
    return knob_values(back)


def _show(knobs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items())
