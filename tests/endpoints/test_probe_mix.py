"""A model mix's low-load answer time (the baseline behind ``client_limited`` and the in-flight cap) comes
from every model of the mix, weighted by its share of the requests, not from its first model alone."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from satpoint.endpoints.prepare import mix_service_s, probe_service_s
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.payloads.mix import ResolvedMix
from tests.http_stub import QuietHandler, serving


def _doc(m: int) -> dict[str, object]:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [float(m)]}]}


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str]]]:
    """A loopback server answering every inference; records each request's path and data."""
    seen: list[str] = []

    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(f"{self.path} {body['inputs'][0]['data'][0]:g}")
            self.reply(200, b'{"outputs": []}')

    with serving(Handler) as url:
        yield url, seen


def test_every_model_of_a_rest_mix_is_probed_with_its_own_request(recorder: tuple[str, list[str]]) -> None:
    url, seen = recorder
    mix = ResolvedMix(("cheap", "slow"), (0.2, 0.8), per_model=2)
    docs = [_doc(m) for m in range(2) for _ in range(2)]  # model m's requests: payloads 2m, 2m + 1
    target = PreparedTarget(Target(url, "cheap"), {}, docs, builder=None, payload_bytes=0, mix=mix)
    assert probe_service_s(target, count=6) is not None
    assert set(seen) == {"/v2/models/cheap/infer 0", "/v2/models/slow/infer 1"}


class _Builder:
    """A recipe whose probe of message ``at`` takes a fixed time: model 0 (messages 0, 1) is cheap, model 1
    (messages 2, 3) slow."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def probe_service_s(self, count: int, at: int = 0) -> float:
        self.asked.append(at)
        return {0: 0.001, 2: 0.1}[at]


def test_a_cheap_first_model_does_not_set_the_mix_baseline() -> None:
    builder = _Builder()
    mix = ResolvedMix(("cheap", "slow"), (0.2, 0.8), per_model=2)
    target = PreparedTarget(
        Target("grpc://127.0.0.1:1", "cheap"), {}, [_doc(0)] * 4, builder=builder, payload_bytes=0, mix=mix
    )
    assert probe_service_s(target) == 0.1  # 80 % of the requests are the slow model's: the mix's p50
    assert sorted(builder.asked) == [0, 2]


def test_the_weighted_median_of_the_models() -> None:
    assert mix_service_s([(0.001, 0.6), (0.1, 0.4)]) == 0.001  # most requests are cheap: the mix's p50 is
    assert mix_service_s([(0.001, 0.4), (0.1, 0.6)]) == 0.1
    assert mix_service_s([(0.1, 0.5), (0.001, 0.5)]) == 0.001
    assert mix_service_s([(None, 0.0), (0.002, 1.0)]) == 0.002  # a model without traffic does not count
    assert mix_service_s([(None, 0.5), (0.002, 0.5)]) is None  # a model with traffic did not answer
