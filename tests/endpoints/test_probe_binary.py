"""The service-time probe (the baseline, the cool-down's "idle again" test) sends what the load sends: with
``--binary-data`` the tensors in Triton's binary form, not JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from satpoint.endpoints.prepare import probe_service_s
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.payloads.binary import BINARY_HEADER, encode_binary_body
from tests.http_stub import QuietHandler, serving

DOC = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]}]}


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A loopback HTTP/1.1 server that answers every POST with an empty OIP answer and records it."""
    seen: list[tuple[dict[str, str], bytes]] = []

    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.reply(200, json.dumps({"outputs": []}).encode())

    with serving(Handler) as url:
        yield url, seen


@pytest.mark.parametrize("binary", [True, False])
def test_the_probe_sends_the_loads_encoding(recorder: tuple[str, list[Any]], binary: bool) -> None:
    url, seen = recorder
    target = PreparedTarget(Target(url, "m", binary_data=binary), {}, [DOC], builder=None, payload_bytes=0)
    assert probe_service_s(target, count=3) is not None
    assert seen
    body, json_len = encode_binary_body(DOC)
    for headers, sent in seen:
        if binary:
            assert headers[BINARY_HEADER.lower()] == str(json_len) and sent == body
        else:
            assert BINARY_HEADER.lower() not in headers and json.loads(sent) == DOC
