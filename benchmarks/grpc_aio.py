"""OIP gRPC through ``grpc.aio``: the reference client the benchmarks compare satpoint's own with.

It costs several times more CPU per call than :class:`~satpoint.transports.grpc.wire.GrpcPool`
(see ``benchmarks/GRPC_NOTES.md``) and falls behind at a few thousand calls per second on one core,
which is why satpoint does not use it; ``grpc_bench.py`` runs it under the same dispatcher to
cross-check the raw HTTP/2 client.  Messages are pre-serialized bytes (no per-call serialization); one
task per call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import grpc.aio

from satpoint.metrics.records import Outcome, Records
from satpoint.transports.grpc.grpc_proto import method_path

perf = time.perf_counter


class GrpcAioPool:
    """``channels`` grpc.aio channels (each its own HTTP/2 connection), round-robin; implements
    :class:`~satpoint.transports.base.HotTransport`."""

    def __init__(
        self,
        rec: Records,
        on_free: Callable[[], None],
        address: str,
        messages: Sequence[bytes],
        max_inflight: int,
        *,
        channels: int = 2,
        metadata: Sequence[tuple[str, str]] = (),
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.rec = rec
        self.on_free = on_free
        self.address = address
        self.messages = list(messages)
        self.max_inflight = max_inflight
        self.n_channels = max(1, channels)
        self.metadata = tuple(metadata) or None
        self.credentials = credentials
        self._channels: list[grpc.aio.Channel] = []
        self._stubs: list[Any] = []
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._rr = 0
        self._closing = False

    async def prepare(self, warm_connections: int) -> None:
        # a local subchannel pool per channel: otherwise channels to one address share one connection
        options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", 256 << 20)]
        for _ in range(self.n_channels):
            if self.credentials is not None:
                ch = grpc.aio.secure_channel(self.address, self.credentials, options=options)
            else:
                ch = grpc.aio.insecure_channel(self.address, options=options)
            self._channels.append(ch)
            self._stubs.append(ch.unary_unary(method_path("ModelInfer")))  # bytes in, bytes out
        try:
            await asyncio.wait_for(asyncio.gather(*(c.channel_ready() for c in self._channels)), 10.0)
        except TimeoutError:
            raise ConnectionError(f"cannot open a gRPC channel to {self.address}") from None

    def try_send(self, idx: int, payload_idx: int) -> bool:
        if len(self._tasks) >= self.max_inflight or self._closing:
            return False
        self._rr += 1
        stub = self._stubs[self._rr % len(self._stubs)]
        self.rec.sent[idx] = perf()
        self._tasks[idx] = asyncio.ensure_future(self._one(stub, self.messages[payload_idx], idx))
        return True

    async def _one(self, stub: Any, payload: bytes, idx: int) -> None:
        outcome, status = Outcome.OK, 0
        try:
            await stub(payload, metadata=self.metadata)
        except grpc.aio.AioRpcError as e:
            code = int(e.code().value[0])
            details = e.details() or ""
            if code == grpc.StatusCode.UNAVAILABLE.value[0] and "refused" in details.lower():
                outcome = Outcome.CONN_REFUSED
            else:
                outcome, status = Outcome.GRPC_ERROR, code
        except asyncio.CancelledError:
            return
        rec = self.rec
        if self._tasks.pop(idx, None) is None:
            return  # already finished by expire/abort
        rec.done[idx] = perf()
        rec.outcome[idx] = outcome
        rec.status[idx] = status
        if not self._closing:
            self.on_free()

    def inflight(self) -> int:
        return len(self._tasks)

    def expire(self, now: float, timeout_s: float) -> None:
        limit = now - timeout_s
        sent = self.rec.sent
        old = [i for i in self._tasks if sent[i] < limit]
        for i in old:
            self._tasks.pop(i).cancel()
            self.rec.done[i] = now
            self.rec.outcome[i] = Outcome.TIMEOUT
        if old and not self._closing:
            self.on_free()

    def abort_all(self, outcome: int) -> None:
        self._closing = True
        now = perf()
        for i, task in list(self._tasks.items()):
            task.cancel()
            self.rec.done[i] = now
            self.rec.outcome[i] = outcome
        self._tasks.clear()

    async def close(self) -> None:
        self._closing = True
        for ch in self._channels:
            await ch.close()
        self._channels.clear()
