"""With ``--resident K`` the service-time probe (the baseline, a cool-down's "idle again" test) asks a model
the emulated scheduler holds loaded: the mix's first model may have been evicted by the last stage, and a
probe of it (404) never looked idle, so every such cool-down waited its whole maximum (60 s)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from satpoint.endpoints.prepare import probe_service_s
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.payloads.mix import ResolvedMix
from satpoint.transports.overcommit import OvercommitBuilder
from tests.http_stub import QuietHandler, serving

NAMES = ("a", "b", "c")


def _doc(m: int) -> dict[str, object]:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [float(m)]}]}


class NoControl:
    def load(self, model: str) -> float:
        raise AssertionError("a probe loads nothing")

    def unload(self, model: str) -> float:
        raise AssertionError("a probe unloads nothing")


@pytest.fixture
def only_b() -> Iterator[tuple[str, list[str]]]:
    """A server where only model ``b`` is loaded: 404 for the others; records each request's path and data."""
    seen: list[str] = []

    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(f"{self.path} {body['inputs'][0]['data'][0]:g}")
            loaded = self.path == "/v2/models/b/infer"
            self.reply(200 if loaded else 404, b'{"outputs": []}' if loaded else b'{"error": "not found"}')

    with serving(Handler) as url:
        yield url, seen


def test_the_probe_asks_a_resident_model_with_its_own_request(only_b: tuple[str, list[str]]) -> None:
    url, seen = only_b
    mix = ResolvedMix(NAMES, (1 / 3,) * 3, per_model=2)
    docs = [_doc(m) for m in range(3) for _ in range(2)]  # model m's requests: payloads 2m, 2m + 1
    builder = OvercommitBuilder(lambda: None, NoControl(), NAMES, (0, 0, 1, 1, 2, 2), 2, (0, 1))  # type: ignore[arg-type,return-value]
    target = PreparedTarget(Target(url, "a"), {}, docs, builder=builder, payload_bytes=0, mix=mix)
    assert builder.probe_model() == 0  # before any run: the most popular, loaded by the settling
    assert probe_service_s(target, count=3) is None  # "a" was evicted: the probe never answers
    builder.residency[:] = [2, 1]  # as the last segment left them (least recently used first)
    seen.clear()
    assert probe_service_s(target, count=3) is not None
    assert seen and set(seen) == {"/v2/models/b/infer 1"}
