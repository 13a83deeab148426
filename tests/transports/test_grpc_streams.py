"""gRPC streams the server did not process are resent; the pool grows while MAX_CONCURRENT_STREAMS binds.

A scripted HTTP/2 server (an asyncio protocol on the test's own loop, HPACK from the ``hpack`` library)
refuses streams (RST_STREAM REFUSED_STREAM) or sends GOAWAY exactly when the test says; a grpc.aio
server with ``grpc.max_concurrent_streams`` shows the connection count and the effective cap.
"""

from __future__ import annotations

import asyncio
import math
import struct
import time
from collections.abc import Callable, Coroutine
from typing import Any

import grpc
import grpc.aio
import numpy as np
import uvloop
from hpack import Encoder

from satpoint.metrics.records import Outcome, Records
from satpoint.transports.grpc import wire as gw
from satpoint.transports.grpc.codec import encode_infer_request, grpc_frame
from satpoint.transports.grpc.grpc_proto import SERVICE
from satpoint.transports.grpc.wire import GrpcPool

DOC = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}
MSG = encode_infer_request(DOC, "m")
perf = time.perf_counter


# a scripted HTTP/2 server -----------------------------------------------------------------------------------
class H2Server(asyncio.Protocol):
    """One server-side connection; ``policy(server, conn, sid)`` decides each complete request stream:
    ``"ok"`` (answer grpc-status 0), ``"refuse"`` (RST_STREAM REFUSED_STREAM) or ``"hold"`` (no answer yet)."""

    def __init__(self, owner: H2Listener) -> None:
        self.owner = owner
        self.number = len(owner.conns)
        owner.conns.append(self)
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.preface = False
        self.encoder = Encoder()
        self.held: list[int] = []
        self.streams: list[int] = []  # every complete request stream, in arrival order

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        settings = b""
        if self.owner.max_streams is not None:
            settings = struct.pack(">HI", 3, self.owner.max_streams)
        self.write(gw.frame(gw.SETTINGS, 0, 0, settings))

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.preface:
            if len(self.buf) < len(gw.PREFACE):
                return
            assert self.buf.startswith(gw.PREFACE)
            self.buf = self.buf[len(gw.PREFACE) :]
            self.preface = True
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                return
            ftype, flags = self.buf[3], self.buf[4]
            sid = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            self.buf = self.buf[9 + length :]
            if ftype == gw.SETTINGS and not flags & gw.ACK:
                self.write(gw.frame(gw.SETTINGS, gw.ACK, 0))
            elif ftype == gw.DATA and flags & gw.END_STREAM:
                self.streams.append(sid)
                self.owner.total += 1
                self.decide(sid)

    def decide(self, sid: int) -> None:
        action = self.owner.policy(self.owner, self, sid)
        if action == "ok":
            self.answer(sid)
        elif action == "refuse":
            self.write(gw.frame(gw.RST_STREAM, 0, sid, struct.pack(">I", gw.RST_REFUSED_STREAM)))
        else:
            self.held.append(sid)

    def answer(self, sid: int) -> None:
        head = self.encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
        trailers = self.encoder.encode([("grpc-status", "0")])
        self.write(
            gw.frame(gw.HEADERS, gw.END_HEADERS, sid, head)
            + gw.frame(gw.DATA, 0, sid, grpc_frame(b""))
            + gw.frame(gw.HEADERS, gw.END_HEADERS | gw.END_STREAM, sid, trailers)
        )

    def goaway(self, last_sid: int) -> None:
        self.write(gw.frame(gw.GOAWAY, 0, 0, struct.pack(">II", last_sid, 0)))


Policy = Callable[["H2Listener", H2Server, int], str]


class H2Listener:
    def __init__(self, policy: Policy, max_streams: int | None = None) -> None:
        self.policy = policy
        self.max_streams = max_streams
        self.conns: list[H2Server] = []
        self.total = 0
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> H2Listener:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: H2Server(self), "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for c in self.conns:
            if c.transport is not None:
                c.transport.abort()


def on_uvloop(coro: Coroutine[Any, Any, Any], timeout_s: float = 10.0) -> Any:
    return uvloop.run(asyncio.wait_for(coro, timeout_s))


async def until(pred: Callable[[], bool], timeout_s: float = 3.0) -> None:
    end = perf() + timeout_s
    while not pred():
        assert perf() < end, "condition not reached in time"
        await asyncio.sleep(0.005)


def _pool(port: int, n: int, max_inflight: int = 16, **kw: Any) -> GrpcPool:
    return GrpcPool(Records.empty(np.zeros(n)), lambda: None, "127.0.0.1", port, [MSG], max_inflight, **kw)


# refused and GOAWAY'd streams ---------------------------------------------------------------------------------
def test_a_refused_stream_is_sent_once_more() -> None:
    def refuse_first_on_each_connection(listener: H2Listener, conn: H2Server, sid: int) -> str:
        return "refuse" if len(conn.streams) == 1 else "ok"

    async def main() -> tuple[GrpcPool, int]:
        listener = await H2Listener(refuse_first_on_each_connection).start()
        try:
            pool = _pool(listener.port, 4, connections=1)
            await pool.prepare(1)
            for i in range(4):
                assert pool.try_send(i, 0)
            await until(lambda: pool.inflight() == 0)
            await pool.close()
            return pool, listener.total
        finally:
            listener.close()

    pool, total = on_uvloop(main())
    rec = pool.rec
    assert (rec.outcome == Outcome.OK).all()
    assert rec.retried.tolist() == [True, False, False, False]
    assert total == 5 and pool.retries == 1 and pool.refused_streams == 1


def test_a_stream_refused_twice_is_unavailable() -> None:
    async def main() -> tuple[GrpcPool, int]:
        listener = await H2Listener(lambda listener, conn, sid: "refuse").start()
        try:
            pool = _pool(listener.port, 3, connections=1)
            await pool.prepare(1)
            for i in range(3):
                assert pool.try_send(i, 0)
            await until(lambda: pool.inflight() == 0)
            await pool.close()
            return pool, listener.total
        finally:
            listener.close()

    pool, total = on_uvloop(main())
    rec = pool.rec
    assert (rec.outcome == Outcome.GRPC_ERROR).all() and (rec.status == gw.GRPC_UNAVAILABLE).all()
    assert rec.retried.all() and pool.retries == 3 and total == 6


def test_streams_above_goaway_last_id_are_resent_elsewhere() -> None:
    """Streams 1, 3, 5 arrive; the server says GOAWAY(last 1), answers 1 and drops the rest unread."""

    def hold(listener: H2Listener, conn: H2Server, sid: int) -> str:
        return "hold" if conn.number == 0 else "ok"

    async def main() -> tuple[GrpcPool, H2Listener]:
        listener = await H2Listener(hold).start()
        try:
            pool = _pool(listener.port, 3, connections=1)
            await pool.prepare(1)
            for i in range(3):
                assert pool.try_send(i, 0)
            first = listener.conns[0]
            await until(lambda: len(first.held) == 3)
            first.goaway(1)
            first.answer(1)
            await until(lambda: pool.inflight() == 0)
            await pool.close()
            return pool, listener
        finally:
            listener.close()

    pool, listener = on_uvloop(main())
    rec = pool.rec
    assert (rec.outcome == Outcome.OK).all()
    assert rec.retried.tolist() == [False, True, True]
    assert pool.goaways == 1 and pool.retries == 2
    assert [len(c.streams) for c in listener.conns] == [3, 2]


# MAX_CONCURRENT_STREAMS and the connection count ----------------------------------------------------------------
def test_connections_grow_while_max_concurrent_streams_binds() -> None:
    def never(listener: H2Listener, conn: H2Server, sid: int) -> str:
        return "hold"

    async def main(connections: int | None) -> tuple[list[bool], dict[str, Any]]:
        listener = await H2Listener(never, max_streams=4).start()
        try:
            pool = _pool(listener.port, 40, max_inflight=30, connections=connections)
            await pool.prepare(1)
            sent = [pool.try_send(i, 0) for i in range(40)]
            await asyncio.sleep(0.05)
            stats = pool.stats()
            pool.abort_all(Outcome.UNFINISHED)
            return sent, stats
        finally:
            listener.close()

    sent, stats = on_uvloop(main(None))
    assert sum(sent) == 30  # max_inflight, no longer 2 connections x 4 streams
    assert stats["connections"] == math.ceil(30 / 4) and stats["server_max_concurrent_streams"] == 4
    assert stats["stream_cap"] == 32 and stats["effective_cap"] == 30 and stats["connections_mode"] == "auto"

    sent, stats = on_uvloop(main(3))  # --grpc-connections 3: the number is fixed, the cap is 12
    assert sum(sent) == 12
    assert stats["connections"] == 3 and stats["effective_cap"] == 12 and stats["connections_mode"] == "fixed"


def test_a_grpcio_server_limit_is_seen_and_recorded() -> None:
    async def handler(request: bytes, context: Any) -> bytes:
        await asyncio.sleep(0.2)
        return b""

    async def main() -> tuple[int, dict[str, Any], Records]:
        server = grpc.aio.server(options=[("grpc.max_concurrent_streams", 5)])
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    SERVICE, {"ModelInfer": grpc.unary_unary_rpc_method_handler(handler)}
                ),
            )
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            pool = _pool(port, 20, max_inflight=20)
            await pool.prepare(1)
            sent = sum(pool.try_send(i, 0) for i in range(20))
            await until(lambda: pool.inflight() == 0, 5.0)
            await pool.close()
            return sent, pool.stats(), pool.rec
        finally:
            await server.stop(0)

    sent, stats, rec = on_uvloop(main())
    assert sent == 20 and (rec.outcome == Outcome.OK).all()
    assert stats["server_max_concurrent_streams"] == 5 and stats["connections"] == 4 and stats["effective_cap"] == 20


def test_ipv6_authority_is_bracketed() -> None:
    assert gw._authority("::1", 8081) == "[::1]:8081"
    assert gw._authority("127.0.0.1", 8081) == "127.0.0.1:8081"
