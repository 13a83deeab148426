"""Preparing a model mix: each model's own metadata and requests, laid out model after model in one target.

``prepare_mix`` resolves the models (the names given, or every READY model of the server's repository
index: ``POST /v2/repository/index`` with ``{}``, MLServer and Triton), prepares each one as a single-model
target (its metadata, its own inputs, one test request), and joins their encoded requests into one
transport recipe: model ``m``'s requests are payloads ``m * per_model ...`` (``payloads.mix``).  The hot
path is unchanged: each row's payload index picks its model's request (REST: the request's path names the
model; gRPC: the message's ``model_name``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from satpoint.endpoints.overcommit import loading, with_resident
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.errors import ConfigError, ModelNotFound, PayloadError, SatpointError, TargetUnreachable
from satpoint.payloads.mix import ModelMix, ResolvedMix, mix_weights, natural_order
from satpoint.redact import redact_url
from satpoint.transports.control import control_for
from satpoint.transports.grpc.control_grpc import GrpcControl
from satpoint.transports.rest.control_rest import RestControl

#: prepares one model (``prepare``'s single-model path)
PrepareOne = Callable[[Target], PreparedTarget]


def ready_models(spec: Target, control: RestControl | GrpcControl | None = None) -> list[str]:
    """Every READY model of the server's repository index (natural name order), asked through ``control``
    (the target's client); a clear error when the server has no index, or no model in it is ready."""
    client = control if control is not None else control_for(spec)
    if not isinstance(client, RestControl):
        raise ConfigError(
            "--models-from-server reads the REST repository index; over gRPC, name the models (--model, repeated)"
        )
    base = client.base_url
    status, doc = client.call_json("/v2/repository/index", {}, timeout_s=30.0)
    if status != 200 or not isinstance(doc, list):
        raise TargetUnreachable(
            f"{redact_url(base)} has no repository index (POST /v2/repository/index answered HTTP {status}): "
            "name the models with --model (repeated)"
        )
    entries = [d for d in doc if isinstance(d, dict) and d.get("name")]
    ready = sorted({str(d["name"]) for d in entries if str(d.get("state", "")).upper() == "READY"})
    if not ready:
        states = ", ".join(f"{d['name']}: {d.get('state')}" for d in entries[:10])
        raise ModelNotFound(
            f"the repository index of {redact_url(base)} lists no READY model"
            + (f" ({states})" if states else " (it is empty)")
        )
    return natural_order(ready)


def prepare_mix(
    spec: Target, prepare_one: PrepareOne, control: RestControl | GrpcControl | None = None
) -> PreparedTarget:
    """Prepare every model of ``spec.mix`` and join them into one target (``PreparedTarget.mix`` set); the
    control calls (the index, ``--resident``'s loads) through ``control``, the target's client."""
    assert spec.mix is not None
    mix: ModelMix = spec.mix.validate()
    client = control if control is not None else control_for(spec)
    names = ready_models(spec, client) if mix.from_server else list(mix.models)
    weights = mix_weights(mix.weights, names)
    if mix.resident is not None:  # models a previous run left unloaded are loaded to be prepared
        prepare_one = loading(client, prepare_one, names, weights, mix.resident)
    parts: list[PreparedTarget] = []
    for name in names:
        try:
            parts.append(prepare_one(replace(spec, model=name, mix=None)))
        except PayloadError as e:
            raise PayloadError(f"model {name!r} of the mix: {e}") from None
        except SatpointError as e:
            raise type(e)(f"model {name!r} of the mix: {e}") from None
    counts = {len(p.payload_docs) for p in parts}
    if len(counts) != 1:
        raise PayloadError(f"the models of the mix got different numbers of requests ({sorted(counts)})")
    per_model = counts.pop()
    first = parts[0]
    joined = PreparedTarget(
        spec=replace(spec, model=names[0]),
        metadata=first.metadata,
        payload_docs=[d for p in parts for d in p.payload_docs],
        builder=join_builders([p.builder for p in parts]),
        payload_bytes=max(p.payload_bytes for p in parts),
        notes=[n for p in parts for n in p.notes],
        latency_hint_s=max((p.latency_hint_s for p in parts if p.latency_hint_s is not None), default=None),
        triton=first.triton,
        mix=ResolvedMix(tuple(names), weights, mix.weights, per_model, mix.from_server),
        control=client,
    )
    return joined if mix.resident is None else with_resident(joined, mix.resident)


def join_builders(builders: list[Any]) -> Any:
    """One transport recipe sending every model's requests: the REST recipe's encoded ``requests`` (each
    with its model's path) or the gRPC recipe's ``messages`` (each with its ``model_name``), concatenated."""
    first = builders[0]
    for field in ("requests", "messages"):
        if hasattr(first, field):
            joined = tuple(x for b in builders for x in getattr(b, field))
            return replace(first, **{field: joined})
    raise ConfigError(f"a model mix cannot join requests of {type(first).__name__}")
