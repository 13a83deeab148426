"""Preparing a model mix: the index read, each model prepared on its own, their requests joined, and the errors
a user meets (an empty index, no model ready, an unknown model, a model without declared inputs)."""

from __future__ import annotations

from typing import Any

import pytest

from satpoint.endpoints import mix as endpoints_mix
from satpoint.endpoints.grpc import GrpcFactoryBuilder
from satpoint.endpoints.mix import prepare_mix, ready_models
from satpoint.endpoints.rest import RestFactoryBuilder
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.errors import ConfigError, ModelNotFound, PayloadError, TargetUnreachable
from satpoint.payloads.mix import ModelMix
from satpoint.transports.grpc.grpc_control import GrpcTarget
from satpoint.transports.rest import rest_control


def index(monkeypatch: pytest.MonkeyPatch, status: int, doc: Any) -> None:
    monkeypatch.setattr(rest_control, "call_json", lambda *a, **k: (status, doc))


def test_the_index_gives_the_ready_models_in_natural_order(monkeypatch: pytest.MonkeyPatch) -> None:
    t = Target("http://h:1", "", mix=ModelMix(from_server=True))
    index(
        monkeypatch, 200, [{"name": n, "state": s} for n, s in [("m-10", "READY"), ("m-2", "READY"), ("x", "UNKNOWN")]]
    )
    assert ready_models(t) == ["m-2", "m-10"]
    index(monkeypatch, 200, [])
    with pytest.raises(ModelNotFound, match="it is empty"):
        ready_models(t)
    index(monkeypatch, 200, [{"name": "x", "state": "UNAVAILABLE"}])
    with pytest.raises(ModelNotFound, match=r"no READY model.*x: UNAVAILABLE"):
        ready_models(t)
    index(monkeypatch, 404, None)
    with pytest.raises(TargetUnreachable, match="no repository index"):
        ready_models(t)
    with pytest.raises(ConfigError, match="over gRPC"):
        ready_models(Target("grpc://h:1", "", protocol="grpc", mix=ModelMix(from_server=True)))


def one(name: str, requests: tuple[bytes, ...]) -> PreparedTarget:
    builder = RestFactoryBuilder("h", 1, requests, 64)
    return PreparedTarget(Target("http://h:1", name), {"name": name}, [{"m": name}] * len(requests), builder, 10)


def test_each_model_is_prepared_alone_and_its_requests_follow_the_ones_before() -> None:
    asked: list[str] = []

    def prepare_one(t: Target) -> PreparedTarget:
        assert t.mix is None
        asked.append(t.model)
        return one(t.model, (f"{t.model}-0".encode(), f"{t.model}-1".encode()))

    got = prepare_mix(Target("http://h:1", "ignored", mix=ModelMix(("a", "b", "c"), weights="zipf:1")), prepare_one)
    assert asked == ["a", "b", "c"] and got.spec.model == "a"
    assert got.mix is not None and got.mix.names == ("a", "b", "c") and got.mix.per_model == 2
    assert got.builder.requests == (b"a-0", b"a-1", b"b-0", b"b-1", b"c-0", b"c-1")  # model m: payloads 2m, 2m+1
    grpc = GrpcFactoryBuilder(GrpcTarget("h", 1), (b"x",), 8, ())
    joined = endpoints_mix.join_builders([grpc, GrpcFactoryBuilder(GrpcTarget("h", 1), (b"y",), 8, ())])
    assert joined.messages == (b"x", b"y")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ModelNotFound("model 'nope' not found"), ModelNotFound),
        (PayloadError("declares no inputs: pass --payload FILE"), PayloadError),
    ],
)
def test_an_error_names_the_model_of_the_mix(error: Exception, kind: type[Exception]) -> None:
    def prepare_one(t: Target) -> PreparedTarget:
        if t.model == "nope":
            raise error
        return one(t.model, (b"r",))

    with pytest.raises(kind, match="model 'nope' of the mix"):
        prepare_mix(Target("http://h:1", "", mix=ModelMix(("ok", "nope"))), prepare_one)
