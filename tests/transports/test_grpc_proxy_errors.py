"""A proxy in front of a gRPC server answers its own error page: HEADERS with ``:status`` 502 (or 504) and the
page in DATA ending the stream, no trailers, no grpc-status (nginx ``grpc_pass`` when the upstream is down or
times out).  That is ``http_<status>``, as docs/reference/error-classes.md says, not ``malformed``."""

from __future__ import annotations

import asyncio

import numpy as np

from satpoint.metrics.records import Outcome, Records
from satpoint.transports.grpc import wire as gw
from satpoint.transports.grpc.wire import GrpcPool
from tests.transports.test_grpc_streams import MSG, H2Listener, H2Server, on_uvloop, until

NGINX_502 = b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1>"


class ProxyPeer(H2Server):
    """Answers each request stream with ``:status`` from the listener's list (in turn), the body ending the
    stream in DATA and no trailers; ``200`` gets a body that is not gRPC."""

    def decide(self, sid: int) -> None:
        listener = self.owner
        assert isinstance(listener, ProxyListener)
        status = listener.statuses[(listener.total - 1) % len(listener.statuses)]
        head = self.encoder.encode([(":status", str(status)), ("content-type", "text/html"), ("server", "nginx")])
        self.write(gw.frame(gw.HEADERS, gw.END_HEADERS, sid, head) + gw.frame(gw.DATA, gw.END_STREAM, sid, NGINX_502))


class ProxyListener(H2Listener):
    def __init__(self, statuses: list[int]) -> None:
        super().__init__(lambda listener, conn, sid: "ok")
        self.statuses = statuses

    async def start(self) -> ProxyListener:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: ProxyPeer(self), "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self


def test_a_proxy_error_page_without_trailers_is_its_http_status() -> None:
    async def main() -> tuple[GrpcPool, list[dict[int, int]]]:
        listener = await ProxyListener([502, 504, 200]).start()
        try:
            pool = GrpcPool(
                Records.empty(np.zeros(6)), lambda: None, "127.0.0.1", listener.port, [MSG], 1, connections=1
            )
            await pool.prepare(1)
            for i in range(6):  # one at a time: the statuses come in order
                assert pool.try_send(i, 0)
                await until(lambda: pool.inflight() == 0)
            left = [dict(c.http_status) for c in pool._conns]
            await pool.close()
            return pool, left
        finally:
            listener.close()

    pool, left = on_uvloop(main())
    rec = pool.rec
    assert rec.outcome.tolist() == [Outcome.HTTP_ERROR, Outcome.HTTP_ERROR, Outcome.MALFORMED] * 2
    assert rec.status.tolist() == [502, 504, 0] * 2
    assert left == [{}]  # nothing kept for streams that have ended
