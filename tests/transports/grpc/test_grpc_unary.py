"""gRPC control calls over TLS (``grpc_unary`` under ``grpc_control``) against a grpcio TLS server:
large messages both ways (flow control), metadata, status codes, verification, --insecure and mTLS."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from satpoint.errors import TargetUnreachable
from satpoint.transports.grpc import grpc_control as ctl
from satpoint.transports.grpc.grpc_proto import SERVICE
from tests.certs import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@contextmanager
def tls_server(pki: Pki, handler: Callable[[bytes, Any], bytes], *, mtls: bool = False) -> Iterator[int]:
    server = grpc.server(ThreadPoolExecutor(2), options=[("grpc.max_receive_message_length", 64 << 20)])
    methods = {"ModelInfer": grpc.unary_unary_rpc_method_handler(handler)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    ca = pki.ca.read_bytes() if mtls else None
    pair = [(pki.server_key.read_bytes(), pki.server_cert.read_bytes())]
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(pair, ca, require_client_auth=mtls))
    server.start()
    try:
        yield port
    finally:
        server.stop(0)


def _target(port: int, **kw: Any) -> ctl.GrpcTarget:
    return ctl.GrpcTarget("127.0.0.1", port, tls=True, **kw)


def _echo(request: bytes, context: Any) -> bytes:
    return request[::-1]


def test_large_messages_and_metadata_both_ways(pki: Pki) -> None:
    seen: list[tuple[dict[str, str], int]] = []

    def handler(request: bytes, context: Any) -> bytes:
        seen.append((dict(context.invocation_metadata()), len(request)))
        return request[::-1]

    big = bytes(range(256)) * 2048  # 512 KiB: beyond the default 64 KiB HTTP/2 windows, both ways
    with tls_server(pki, handler) as port:
        code, status, response = ctl.infer_once(
            _target(port, ca_file=str(pki.ca)), big, [("Authorization", "Bearer t0k"), ("Seldon-Model", "m")]
        )
    assert (code, status) == (0, "OK") and response == big[::-1]
    (meta, size), *_ = seen
    assert meta["authorization"] == "Bearer t0k" and meta["seldon-model"] == "m" and size == len(big)


def test_status_codes_look_like_grpcio(pki: Pki) -> None:
    def handler(request: bytes, context: Any) -> bytes:
        context.abort(grpc.StatusCode.NOT_FOUND, "Model m not found: 100% sure")
        raise AssertionError("abort raises")

    with tls_server(pki, handler) as port:
        target = _target(port, ca_file=str(pki.ca))
        code, status, _ = ctl.infer_once(target, b"x")
        assert not ctl.server_ready(target)  # UNIMPLEMENTED on this server: not ready, no exception
    assert code == grpc.StatusCode.NOT_FOUND.value[0]
    assert status == "NOT_FOUND: Model m not found: 100% sure"


def test_verification_by_default_and_insecure(pki: Pki) -> None:
    with tls_server(pki, _echo) as port:
        with pytest.raises(TargetUnreachable, match=r"certificate verification failed.*--ca-cert FILE"):
            ctl.infer_once(_target(port), b"abc")
        with pytest.raises(TargetUnreachable, match="certificate verification failed"):
            ctl.infer_once(_target(port, ca_file=str(pki.other_ca)), b"abc")
        assert ctl.infer_once(_target(port, verify=False), b"abc") == (0, "OK", b"cba")


def test_mutual_tls(pki: Pki) -> None:
    ca = str(pki.ca)
    with tls_server(pki, _echo, mtls=True) as port:
        with pytest.raises(TargetUnreachable, match="give --client-cert FILE and --client-key FILE"):
            ctl.infer_once(_target(port, ca_file=ca), b"abc")
        stranger = _target(port, ca_file=ca, cert_file=str(pki.other_client_cert), key_file=str(pki.other_client_key))
        with pytest.raises(TargetUnreachable, match="may not trust --client-cert"):
            ctl.infer_once(stranger, b"abc")
        client = _target(port, ca_file=ca, cert_file=str(pki.client_cert), key_file=str(pki.client_key))
        assert ctl.infer_once(client, b"abc") == (0, "OK", b"cba")


def test_unreachable_is_unavailable(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, status, _ = ctl.infer_once(_target(port, verify=False), b"x", timeout_s=2.0)
    assert code == grpc.StatusCode.UNAVAILABLE.value[0] and status.startswith("UNAVAILABLE")
    assert not ctl.server_ready(_target(port, verify=False))
