"""In-process generator hosts for the coordinator's tests: a real ``HostWorker`` (its shard on a thread,
a fake transport) behind a wall clock with an injected offset, a one-way delay on every call, and
failures on demand: a host that dies, or one whose polls stop answering (a partitioned node)."""

from __future__ import annotations

import threading
import time
from typing import Any

from satpoint.distributed.coordinator import HostLost
from satpoint.distributed.host import HostReport, HostWorker, ShardJob
from satpoint.engine.live import LiveSnapshot


class FakeHost:
    def __init__(
        self,
        name: str,
        offset_s: float = 0.0,
        *,
        there_s: float = 0.0002,  # delay of each call on its way to the host
        back_s: float = 0.0002,  # ... and of its answer on the way back
        fail_prepare: bool = False,
        die_after_s: float | None = None,  # seconds after the start: every call then raises HostLost
        hang_after_s: float | None = None,  # seconds after the start: polls then block until abandoned
    ) -> None:
        self.name = name
        self.offset_s = offset_s
        self.there_s, self.back_s = there_s, back_s
        self.fail_prepare = fail_prepare
        self.die_after_s = die_after_s
        self.hang_after_s = hang_after_s
        self.abandoned = threading.Event()
        self.worker = HostWorker(name, wall=lambda: time.time() + offset_s, spawn=False)
        self.started_at: float | None = None
        self.stops = 0
        self.t0: float | None = None

    def _call(self) -> None:
        time.sleep(self.there_s)
        dead_at = None if self.die_after_s is None or self.started_at is None else self.started_at + self.die_after_s
        if dead_at is not None and time.time() > dead_at:
            self.worker.stop()  # the host's processes die with it
            raise HostLost("its actor died (simulated)")

    def describe(self) -> dict[str, Any]:
        self._call()
        return {**self.worker.describe(), "node_id": f"node-{self.name}"}

    def clock(self) -> float:
        time.sleep(self.there_s)
        now = self.worker.clock()
        time.sleep(self.back_s)
        return now

    def prepare(self, job: ShardJob, index: int) -> dict[str, float]:
        self._call()
        if self.fail_prepare:
            raise HostLost("no answer to prepare within 120 s (simulated)")
        return self.worker.prepare(job, index)

    def start(self, start_wall_s: float) -> dict[str, float]:
        self._call()
        got = self.worker.start(start_wall_s)
        self.t0 = got["t0_monotonic"]
        self.started_at = time.time()
        return got

    def poll(self) -> tuple[bool, LiveSnapshot | None]:
        self._call()
        hang_at = None if self.hang_after_s is None or self.started_at is None else self.started_at + self.hang_after_s
        if hang_at is not None and time.time() > hang_at:
            self.abandoned.wait(60)  # no answer until the driver gives the host up
            raise HostLost("its node was unreachable (simulated)")
        return self.worker.poll()

    def stop(self) -> None:
        self._call()
        self.stops += 1
        self.worker.stop()

    def result(self) -> HostReport:
        self._call()
        got = self.worker.result()
        if got is None:
            raise HostLost("rows asked for before the shard ended")
        return got

    def abandon(self) -> None:
        self.abandoned.set()
        self.worker.stop()
