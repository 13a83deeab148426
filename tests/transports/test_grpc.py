"""OIP over gRPC: codec (pure), control calls and the raw HTTP/2 hot path against the gRPC sim (a
subprocess, a SimServer), in-process grpc.aio servers (metadata, flow control, TLS), and MLServer."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import numpy as np
import pytest
import uvloop

from satpoint.engine.dispatcher import DispatchOptions, OpenLoopDispatcher
from satpoint.errors import ConfigError, ModelNotFound, PayloadError
from satpoint.metrics.records import Outcome, Records
from satpoint.servers.sim.process import SimServer
from satpoint.transports.grpc import grpc_control as ctl
from satpoint.transports.grpc.codec import (
    decode_infer_request,
    encode_infer_request,
    normalize_metadata,
)
from satpoint.transports.grpc.grpc_proto import SERVICE, message
from satpoint.transports.grpc.wire import GrpcPool, client_ssl_context, grpc_factory

LINE_RE = re.compile(r"^satpoint sim listening on grpc://127\.0\.0\.1:(\d+) \(capacity ([0-9.e+]+) rps\)$")
DOC = {"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]}]}


# codec ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [False, True])
def test_codec_round_trip_all_datatypes(raw: bool) -> None:
    doc: dict[str, Any] = {
        "id": "r1",
        "parameters": {"content_type": "np", "n": 3, "flag": True, "x": 0.5},
        "inputs": [
            {"name": "f32", "datatype": "FP32", "shape": [2, 2], "data": [[1.5, 2.5], [3.5, 4.5]]},
            {"name": "f64", "datatype": "FP64", "shape": [1], "data": [0.25]},
            {"name": "i8", "datatype": "INT8", "shape": [2], "data": [-3, 4]},
            {"name": "i64", "datatype": "INT64", "shape": [2], "data": [-(2**40), 7]},
            {"name": "u16", "datatype": "UINT16", "shape": [1], "data": [65535]},
            {"name": "u64", "datatype": "UINT64", "shape": [1], "data": [2**63]},
            {"name": "b", "datatype": "BOOL", "shape": [3], "data": [True, False, True]},
            {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["héllo", "x"]},
        ],
    }
    data = encode_infer_request(doc, "m", "2", raw=raw)
    back = decode_infer_request(data)
    assert back["model_name"] == "m" and back["model_version"] == "2" and back["id"] == "r1"
    for sent, got in zip(doc["inputs"], back["inputs"], strict=True):
        assert got["name"] == sent["name"] and got["datatype"] == sent["datatype"]
        assert got["shape"] == sent["shape"]
        flat = np.asarray(sent["data"]).ravel().tolist()
        assert got["data"] == flat
    req = message("ModelInferRequest").FromString(data)
    assert bool(req.raw_input_contents) == raw
    assert req.parameters["n"].int64_param == 3 and req.parameters["flag"].bool_param is True
    if raw:
        assert req.raw_input_contents[0] == np.asarray([1.5, 2.5, 3.5, 4.5], "<f4").tobytes()
        assert not req.inputs[0].HasField("contents")


def test_codec_errors() -> None:
    with pytest.raises(PayloadError, match="needs 4 values"):
        encode_infer_request({"inputs": [{"name": "a", "datatype": "FP32", "shape": [1, 4], "data": [1]}]}, "m")
    with pytest.raises(PayloadError, match="grpc-raw"):
        encode_infer_request({"inputs": [{"name": "a", "datatype": "FP16", "shape": [1], "data": [1]}]}, "m")
    fp16 = encode_infer_request(
        {"inputs": [{"name": "a", "datatype": "FP16", "shape": [1], "data": [1]}]}, "m", raw=True
    )
    assert decode_infer_request(fp16)["inputs"][0]["data"] == [1.0]
    with pytest.raises(PayloadError, match="unknown datatype"):
        encode_infer_request({"inputs": [{"name": "a", "datatype": "F32", "shape": [1], "data": [1]}]}, "m")
    with pytest.raises(PayloadError):
        encode_infer_request({"inputs": []}, "m")


def test_metadata_normalization() -> None:
    assert normalize_metadata([("Seldon-Model", "iris")]) == [("seldon-model", "iris")]
    assert normalize_metadata({"x-bin": "abc"}) == [("x-bin", "YWJj")]
    for bad in ("grpc-timeout", ":path", "content-type", "a b"):
        with pytest.raises(ConfigError):
            normalize_metadata([(bad, "1")])


def test_parse_target() -> None:
    t = ctl.parse_target("grpc://127.0.0.1:9000")
    assert (t.host, t.port, t.tls) == ("127.0.0.1", 9000, False)
    assert ctl.parse_target("localhost").port == 8081
    assert ctl.parse_target("grpcs://h:1").tls
    with pytest.raises(ConfigError):
        ctl.parse_target("ftp://h:1")


# the gRPC sim as a subprocess (SimServer) -------------------------------------------------------------
def _grpc_sim(slots: int, service_ms: float, **kwargs: Any) -> SimServer:
    return SimServer(slots=slots, service_ms=service_ms, protocol="grpc", **kwargs)


@pytest.fixture(scope="module")
def sim() -> Iterator[int]:
    with _grpc_sim(4, 5) as server:
        assert LINE_RE.match(server.log_text().splitlines()[0])  # the gRPC sim's listening line
        yield server.port


@pytest.fixture(scope="module")
def sim_errors() -> Iterator[int]:
    with _grpc_sim(8, 2, error_rate=1.0) as server:
        yield server.port


def _run(
    port: int,
    rate: float,
    n: int,
    messages: Sequence[bytes] | None = None,
    *,
    timeout_s: float = 10.0,
    max_inflight: int = 64,
    **kw: Any,
) -> tuple[Records, dict[str, int]]:
    msgs = list(messages) if messages is not None else [encode_infer_request(DOC, "sim")]
    stats: dict[str, int] = {}

    async def main() -> Records:
        due = np.arange(n, dtype=np.float64) / rate
        made: list[GrpcPool] = []
        base = grpc_factory("127.0.0.1", port, msgs, max_inflight, **kw)

        def factory(rec: Records, on_free: Callable[[], None]) -> GrpcPool:
            p = base(rec, on_free)
            made.append(p)
            return p

        disp = OpenLoopDispatcher(
            due, time.perf_counter() + 0.3, factory, DispatchOptions(timeout_s=timeout_s, drain_s=5.0)
        )
        rec = await disp.run()
        stats.update(made[0].stats())
        return rec

    return uvloop.run(main()), stats


def test_control_calls(sim: int) -> None:
    t = ctl.parse_target(f"127.0.0.1:{sim}")
    assert ctl.server_live(t) and ctl.server_ready(t)
    assert ctl.model_ready(t, "sim") and not ctl.model_ready(t, "other")
    meta = ctl.model_metadata(t, "sim", headers=[("seldon-model", "sim")])
    assert meta["name"] == "sim"
    assert meta["inputs"] == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["outputs"][0]["name"] == "output-0"
    with pytest.raises(ModelNotFound):
        ctl.model_metadata(t, "other")
    code, _, resp = ctl.infer_once(t, encode_infer_request(DOC, "sim", raw=True))
    assert code == 0
    assert message("ModelInferResponse").FromString(resp).raw_output_contents
    code, text, _ = ctl.infer_once(t, encode_infer_request(DOC, "other"))
    assert code == 5 and "NOT_FOUND" in text
    assert not ctl.server_ready(ctl.parse_target(f"127.0.0.1:{_free_port()}"))


def test_pool_batch_ok(sim: int) -> None:
    msgs = [encode_infer_request(DOC, "sim"), encode_infer_request(DOC, "sim", raw=True)]
    rec, stats = _run(sim, 300.0, 300, msgs, connections=2)
    assert (rec.outcome == Outcome.OK).all(), np.unique(rec.outcome, return_counts=True)
    assert (rec.status == 0).all()
    service = rec.done - rec.sent
    assert service.min() >= 0.005 - 1e-4  # the sim answers no earlier than its service time
    assert np.median(service) < 0.05
    lag = rec.sent - rec.intended
    assert np.median(lag) < 0.005
    assert stats["protocol_errors"] == 0 and stats["connect_errors"] == 0
    assert stats["hpack_cache_hits"] > 0  # steady-state response blocks hit the decode cache


@pytest.mark.slow
def test_sim_capacity_over_grpc() -> None:
    """Overloaded at 1.5x capacity, the gRPC sim completes slots / service_s calls per second."""
    with _grpc_sim(4, 10) as server:
        rec, _ = _run(server.port, 600.0, 1500, max_inflight=2000, timeout_s=30.0)
    assert (rec.outcome == Outcome.OK).all()
    done = np.sort(rec.done)
    window = (done >= 0.5) & (done <= 2.5)
    rate = window.sum() / 2.0
    assert 0.85 * 400 <= rate <= 1.02 * 400, rate
    lat = rec.done - rec.intended
    assert lat[-100:].mean() > lat[:100].mean() + 0.5  # open loop: the queue grows while overloaded


def test_pool_grpc_errors(sim_errors: int) -> None:
    rec, _ = _run(sim_errors, 200.0, 40)
    assert (rec.outcome == Outcome.GRPC_ERROR).all()
    assert (rec.status == 13).all()  # INTERNAL


def test_pool_unknown_model_is_not_found(sim: int) -> None:
    rec, _ = _run(sim, 200.0, 10, [encode_infer_request(DOC, "nope")])
    assert (rec.outcome == Outcome.GRPC_ERROR).all() and (rec.status == 5).all()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refused_connection() -> None:
    port = _free_port()

    async def main() -> Records:
        rec = Records.empty(np.zeros(5))
        pool = GrpcPool(rec, lambda: None, "127.0.0.1", port, [encode_infer_request(DOC, "sim")], 8)
        with pytest.raises(ConnectionError):
            await pool.prepare(1)
        for i in range(5):
            assert pool.try_send(i, 0)
        for _ in range(100):
            if pool.inflight() == 0:
                break
            await asyncio.sleep(0.01)
        await pool.close()
        return rec

    rec = uvloop.run(main())
    assert (rec.outcome == Outcome.CONN_REFUSED).all()
    assert not np.isnan(rec.done).any()


def test_timeouts_cancel_streams_and_connection_survives() -> None:
    with _grpc_sim(1, 300) as server:
        port = server.port

        async def main() -> tuple[Records, int]:
            rec = Records.empty(np.zeros(4))
            freed = []
            pool = GrpcPool(
                rec,
                lambda: freed.append(1),
                "127.0.0.1",
                port,
                [encode_infer_request(DOC, "sim")],
                8,
                connections=1,
            )
            await pool.prepare(1)
            for i in range(3):
                assert pool.try_send(i, 0)
            await asyncio.sleep(0.05)
            pool.expire(time.perf_counter(), 0.01)
            assert pool.inflight() == 0 and freed
            assert pool.try_send(3, 0)  # same connection still usable after RST_STREAM
            for _ in range(300):
                if pool.inflight() == 0:
                    break
                await asyncio.sleep(0.01)
            n = len(pool._conns)
            await pool.close()
            return rec, n

        rec, conns = uvloop.run(main())
        assert list(rec.outcome[:3]) == [Outcome.TIMEOUT] * 3
        assert rec.outcome[3] == Outcome.OK  # the sim's slot frees: cancelled calls still took their turn
        assert conns == 1


# in-process grpc.aio servers: metadata, flow control, TLS ------------------------------------------
async def _aio_server(
    handler: Callable[[bytes, Any], Any], creds: grpc.ServerCredentials | None = None
) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": grpc.unary_unary_rpc_method_handler(handler)}),)
    )
    port = server.add_secure_port("127.0.0.1:0", creds) if creds else server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def _send_all(pool: GrpcPool, n: int, payload_idx: int = 0, limit_s: float = 10.0) -> None:
    await pool.prepare(1)
    for i in range(n):
        assert pool.try_send(i, payload_idx)
    end = time.perf_counter() + limit_s
    while pool.inflight() and time.perf_counter() < end:
        await asyncio.sleep(0.01)
    await pool.close()


def test_metadata_headers_and_large_messages_with_flow_control() -> None:
    seen: list[tuple[dict[str, str], int]] = []

    async def handler(request: bytes, context: Any) -> bytes:
        seen.append((dict(context.invocation_metadata()), len(request)))
        return b"\x0a\x01m" + b"\x32\x00" * 50_000  # a ~100 kB answer: exceeds the 64 KiB default window

    big = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [100_000], "data": [0.5] * 100_000}]}
    msgs = [encode_infer_request(DOC, "m"), encode_infer_request(big, "m", raw=True)]  # 400 kB request

    async def main() -> Records:
        server, port = await _aio_server(handler)
        rec = Records.empty(np.zeros(12))
        meta = normalize_metadata([("Seldon-Model", "iris"), ("x-team", "perf")])
        pool = GrpcPool(rec, lambda: None, "127.0.0.1", port, msgs, 16, connections=1, metadata=meta)
        await pool.prepare(1)
        for i in range(12):
            assert pool.try_send(i, i % 2)
        end = time.perf_counter() + 15
        while pool.inflight() and time.perf_counter() < end:
            await asyncio.sleep(0.01)
        await pool.close()
        await server.stop(0)
        return rec

    rec = uvloop.run(main())
    assert (rec.outcome == Outcome.OK).all(), rec.outcome
    assert len(seen) == 12
    assert all(m["seldon-model"] == "iris" and m["x-team"] == "perf" for m, _ in seen)
    assert sorted({n for _, n in seen}) == [len(msgs[0]), len(msgs[1])]


def test_server_abort_codes_and_trailers_only() -> None:
    async def handler(request: bytes, context: Any) -> bytes:
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy")
        return b""

    async def main() -> Records:
        server, port = await _aio_server(handler)
        rec = Records.empty(np.zeros(5))
        pool = GrpcPool(rec, lambda: None, "127.0.0.1", port, [b""], 8)
        await _send_all(pool, 5)
        await server.stop(0)
        return rec

    rec = uvloop.run(main())
    assert (rec.outcome == Outcome.GRPC_ERROR).all() and (rec.status == 8).all()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls(tmp_path: Path) -> None:
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip

    async def handler(request: bytes, context: Any) -> bytes:
        return b""

    async def main() -> Records:
        creds = grpc.ssl_server_credentials([(key.read_bytes(), crt.read_bytes())])
        server, port = await _aio_server(handler, creds)
        rec = Records.empty(np.zeros(6))
        ssl_ctx = client_ssl_context(str(crt))
        pool = GrpcPool(rec, lambda: None, "127.0.0.1", port, [b""], 8, ssl=ssl_ctx)
        await _send_all(pool, 6)
        await server.stop(0)
        t = ctl.GrpcTarget("127.0.0.1", port, tls=True, ca_file=str(crt))
        assert t.ssl_context() is not None
        return rec

    rec = uvloop.run(main())
    assert (rec.outcome == Outcome.OK).all()


# a real MLServer -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_mlserver_iris_over_grpc() -> None:
    mlserver = pytest.importorskip("satpoint.servers.mlserver.server")
    with mlserver.MLServerTarget() as target:
        t = ctl.parse_target(target.grpc_address)
        deadline = time.monotonic() + 30
        while not ctl.server_ready(t) and time.monotonic() < deadline:
            time.sleep(0.2)
        model = target.model_name
        assert ctl.model_ready(t, model)
        meta = ctl.model_metadata(t, model)
        assert meta["inputs"] and meta["inputs"][0]["shape"][-1] == 4
        spec = meta["inputs"][0]
        doc = {
            "inputs": [
                {
                    "name": spec["name"],
                    "datatype": spec["datatype"],
                    "shape": [1, 4],
                    "data": [5.1, 3.5, 1.4, 0.2],
                }
            ]
        }
        msgs = [encode_infer_request(doc, model), encode_infer_request(doc, model, raw=True)]
        port = int(target.grpc_address.rsplit(":", 1)[1])
        rec, stats = _run(port, 100.0, 150, msgs)
        assert (rec.outcome == Outcome.OK).all(), np.unique(rec.outcome, return_counts=True)
        assert stats["protocol_errors"] == 0
