"""Preparing a REST target and sending its load: a gateway's path prefix, IPv6 loopback, a user's Host.

The server is a small threaded HTTP/1.1 server that answers OIP only under its prefix (404 elsewhere, as
an API gateway does) and records the path and Host of every request, control calls and load alike.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from satpoint.endpoints.rest import prepare_rest
from satpoint.endpoints.spec import Target
from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.runner import run_shard
from satpoint.metrics.records import Outcome
from satpoint.transports.rest import pool as rest

META = {"name": "m", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}], "outputs": []}


class _Oip(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real gateway
    server: OipServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        with self.server.lock:
            self.server.seen.append((self.command, self.path, self.headers.get_all("Host") or []))
        prefix = self.server.prefix
        if not self.path.startswith(prefix + "/v2/"):
            self._answer(404, {"error": "no route"})
            return
        route = self.path[len(prefix) :]
        if route == "/v2/health/ready" or route == "/v2/models/m/ready":
            self._answer(200, {})
        elif route == "/v2/models/m" and self.command == "GET":
            self._answer(200, META)
        elif route == "/v2/models/m/infer" and self.command == "POST":
            self._answer(200, {"model_name": "m", "outputs": []})
        else:
            self._answer(404, {"error": "no route"})

    do_GET = _route
    do_POST = _route


class OipServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, prefix: str) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, 0), _Oip)
        self.prefix = prefix
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, list[str]]] = []


@contextmanager
def oip_server(host: str = "127.0.0.1", prefix: str = "") -> Iterator[OipServer]:
    server = OipServer(host, prefix)
    th = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        th.join(timeout=5.0)


def _load(prepared: Any, n: int = 20, rate: float = 200.0) -> Any:
    due = np.arange(n, dtype=np.float64) / rate
    opts = DispatchOptions(timeout_s=5.0, drain_s=2.0, warm_connections=2, payload_count=len(prepared.payload_docs))
    rec, _ = run_shard(due, time.perf_counter() + 0.1, prepared.builder, opts, None, lambda: False)
    return rec


def test_parse_url_keeps_the_prefix_and_the_ipv6_literal() -> None:
    a = rest.parse_url("http://gw:8080/seldon/ns/model/")
    assert (a.host, a.port, a.prefix) == ("gw", 8080, "/seldon/ns/model")
    assert a.path("/v2/models/m/infer") == "/seldon/ns/model/v2/models/m/infer"
    assert rest.parse_url("http://127.0.0.1:8080").prefix == ""
    b = rest.parse_url("http://[::1]:9000/p")
    assert (b.host, b.port, b.prefix) == ("::1", 9000, "/p")
    assert rest.host_header(b.host, b.port) == "[::1]:9000"
    assert (a.host, a.port) == ("gw", 8080)


def test_the_gateway_prefix_is_kept_on_every_load_request() -> None:
    """Fails before the fix: the pre-flight passes (control calls keep the prefix) and every load request
    is a 404 (the load dropped it)."""
    with oip_server(prefix="/seldon/ns/model") as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/seldon/ns/model/"
        prepared = prepare_rest(Target(url=url, model="m"), max_inflight=8)
        rec = _load(prepared)
        seen = list(server.seen)
    assert (rec.outcome == Outcome.OK).all(), np.unique(rec.status)
    infer_paths = {path for method, path, _ in seen if method == "POST" and path.endswith("/infer")}
    assert infer_paths == {"/seldon/ns/model/v2/models/m/infer"}


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this host")
def test_ipv6_target_connects_to_the_literal_and_sends_a_bracketed_host() -> None:
    with oip_server("::1") as server:
        port = server.server_address[1]
        prepared = prepare_rest(Target(url=f"http://[::1]:{port}", model="m"), max_inflight=8)
        rec = _load(prepared)
        seen = list(server.seen)
    assert (rec.outcome == Outcome.OK).all()
    load_hosts = {tuple(hosts) for method, path, hosts in seen if method == "POST"}
    assert load_hosts == {(f"[::1]:{port}",)}


def test_a_user_host_header_replaces_the_default_one() -> None:
    with oip_server() as server:
        port = server.server_address[1]
        spec = Target(url=f"http://127.0.0.1:{port}", model="m", headers=(("Host", "iris.models.example.com"),))
        prepared = prepare_rest(spec, max_inflight=8)
        rec = _load(prepared, n=5)
        seen = list(server.seen)
    assert (rec.outcome == Outcome.OK).all()
    assert {tuple(hosts) for method, _, hosts in seen if method == "POST"} == {("iris.models.example.com",)}
