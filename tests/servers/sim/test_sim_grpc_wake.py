"""The gRPC sim wakes each call at its virtual finish time: never before it, in finish-time order, with one
timer for all (a cancelled call does not hold the others up)."""

from __future__ import annotations

import asyncio
import time

import uvloop

from satpoint.servers.sim.grpc_server import _Wake

perf = time.perf_counter


def test_calls_wake_at_their_finish_times_never_before() -> None:
    async def main() -> tuple[list[tuple[int, float, float]], bool]:
        wake = _Wake()
        t0 = perf()
        offsets_s = [0.012, 0.003, 0.0002, 0.007, 0.007, 0.001]
        woke: list[tuple[int, float, float]] = []

        async def call(i: int, finish_s: float) -> None:
            await wake.at(finish_s)
            woke.append((i, finish_s, perf()))

        tasks = [asyncio.create_task(call(i, t0 + off)) for i, off in enumerate(offsets_s)]
        cancelled = asyncio.create_task(call(99, t0 + 0.005))
        await asyncio.sleep(0.001)
        cancelled.cancel()  # the client gave up on this call
        await asyncio.wait_for(asyncio.gather(*tasks), 2.0)
        return woke, cancelled.cancelled()

    woke, cancelled = uvloop.run(main())
    assert cancelled
    assert [i for i, _, _ in woke] == [2, 5, 1, 3, 4, 0]  # finish-time order (ties: arrival order)
    assert all(at >= finish for _, finish, at in woke)  # never early
