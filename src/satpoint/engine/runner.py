"""Runs one schedule, in this process or sharded over several generator processes.

Sharding deals request ``n`` to shard ``n % procs``: every shard keeps the same time-shape at
``1/procs`` of the rate, and the merged rows are exactly the single-process schedule.  All shards use
the same run clock (``CLOCK_MONOTONIC`` via ``perf_counter`` is shared by processes on one host).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import uvloop

from satpoint.engine.dispatcher import DispatchOptions, OpenLoopDispatcher, Progress
from satpoint.engine.live import LiveSnapshot, merge, snapshot
from satpoint.metrics.records import Records
from satpoint.transports.base import TransportFactory

#: builds the transport factory inside the process that runs the shard (factories hold sockets)
FactoryBuilder = Callable[[], TransportFactory]


@dataclass(frozen=True)
class ShardStats:
    cpu_s: float  # process CPU time spent while the shard ran
    wall_s: float
    requests: int
    stopped_early: bool
    transport: dict[str, Any] = field(default_factory=dict)  # the transport's report (``stats()``)


@dataclass
class RunOutput:
    records: Records
    shards: list[ShardStats]
    started_unix: float
    interrupted: bool = False  # stopped by the user (Ctrl-C / SIGTERM)
    notes: list[str] = field(default_factory=list)
    overloaded: bool = False  # stopped early because ``abort_when`` judged the server clearly overloaded

    @property
    def generator_cpu_s(self) -> float:
        return sum(s.cpu_s for s in self.shards)


def _shard_rows(due_s: np.ndarray, shard: int, procs: int) -> np.ndarray:
    return due_s[shard::procs]


def run_shard(
    due_s: np.ndarray,
    t0: float,
    build: FactoryBuilder,
    options: DispatchOptions,
    on_snapshot: Callable[[LiveSnapshot], None] | None,
    stop_requested: Callable[[], bool],
    cpus: list[int] | None = None,
) -> tuple[Records, ShardStats]:
    if cpus:
        os.sched_setaffinity(0, cpus)
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        factory = build()

        def progress(p: Progress, rec: Records) -> None:
            if on_snapshot is not None:
                on_snapshot(snapshot(p, rec))

        # no live snapshots (a few hundred microseconds of loop time each) when nobody watches
        disp = OpenLoopDispatcher(
            due_s, t0, factory, options, progress if on_snapshot is not None else None, stop_requested
        )
        cpu0, wall0 = time.process_time(), time.perf_counter()
        rec = loop.run_until_complete(disp.run())
        stats = ShardStats(
            time.process_time() - cpu0, time.perf_counter() - wall0, len(rec), disp.stopped_early, disp.transport_stats
        )
        return rec, stats
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def _child(
    due_s: np.ndarray,
    t0: float,
    build: FactoryBuilder,
    options: DispatchOptions,
    progress_q: Any,
    result_q: Any,
    stop: Any,
    shard: int,
    cpus: list[int] | None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    try:
        rec, stats = run_shard(due_s, t0, build, options, lambda s: progress_q.put((shard, s)), stop.is_set, cpus)
        result_q.put((shard, rec, stats, None))
    except BaseException as e:  # report, never hang the parent
        result_q.put((shard, None, None, f"{type(e).__name__}: {e}"))


def run_schedule(
    due_s: np.ndarray,
    build: FactoryBuilder,
    options: DispatchOptions,
    procs: int = 1,
    on_snapshot: Callable[[LiveSnapshot], None] | None = None,
    stop_event: threading.Event | None = None,
    cpus: list[int] | None = None,
    lead_s: float = 0.2,
    abort_when: Callable[[LiveSnapshot], bool] | None = None,
) -> RunOutput:
    """Run every row of ``due_s`` (run-clock seconds) and return the merged records.

    ``abort_when`` sees every live snapshot; when it returns True the run stops early (a clearly
    overloaded server: no point queueing more), which is reported as ``overloaded``, not interrupted.
    """
    user_stop = stop_event or threading.Event()
    overload = threading.Event()
    stop = _Either(user_stop, overload)
    started_unix = time.time()

    def snap_cb(snap: LiveSnapshot) -> None:
        if on_snapshot is not None:
            on_snapshot(snap)
        if abort_when is not None and not overload.is_set() and abort_when(snap):
            overload.set()

    if procs <= 1:
        t0 = time.perf_counter() + lead_s
        watched = on_snapshot is not None or abort_when is not None
        rec, stats = run_shard(due_s, t0, build, options, snap_cb if watched else None, stop.is_set, cpus)
        return RunOutput(rec, [stats], started_unix, interrupted=user_stop.is_set(), overloaded=overload.is_set())

    ctx = mp.get_context("spawn")
    progress_q = ctx.Queue()
    result_q = ctx.Queue()
    child_stop = ctx.Event()
    t0 = time.perf_counter() + max(lead_s, 2.0)  # spawn start-up happens before the clock starts
    workers = []
    for k in range(procs):
        shard_cpus = [cpus[k % len(cpus)]] if cpus else None
        p = ctx.Process(
            target=_child,
            args=(_shard_rows(due_s, k, procs), t0, build, options, progress_q, result_q, child_stop, k, shard_cpus),
            daemon=True,
        )
        p.start()
        workers.append(p)
    latest: dict[int, LiveSnapshot] = {}
    results: dict[int, tuple[Records | None, ShardStats | None, str | None]] = {}
    try:
        while len(results) < procs:
            if stop.is_set():
                child_stop.set()
            try:
                while True:
                    k, snap = progress_q.get_nowait()
                    latest[k] = snap
            except queue.Empty:
                pass
            if len(latest) == procs:
                snap_cb(merge(list(latest.values())))
                latest.clear()
            try:
                k, rec, stats, err = result_q.get(timeout=0.1)
                results[k] = (rec, stats, err)
            except queue.Empty:
                dead = [i for i, w in enumerate(workers) if not w.is_alive() and i not in results]
                if dead:
                    time.sleep(0.5)  # a result may still be in the pipe
                    try:
                        while True:
                            k, rec, stats, err = result_q.get_nowait()
                            results[k] = (rec, stats, err)
                    except queue.Empty:
                        pass
                    for i in dead:
                        results.setdefault(i, (None, None, f"generator process {i} died"))
    finally:
        child_stop.set()
        for w in workers:
            w.join(timeout=5)
            if w.is_alive():
                w.kill()
                w.join()
    notes = [f"shard {k}: {err}" for k, (_, _, err) in sorted(results.items()) if err]
    parts = [r for k, (r, _, _) in sorted(results.items()) if r is not None]
    stats_list = [s for k, (_, s, _) in sorted(results.items()) if s is not None]
    if not parts:
        raise RuntimeError("every generator process failed: " + "; ".join(notes))
    return RunOutput(
        Records.merge(parts),
        stats_list,
        started_unix,
        interrupted=user_stop.is_set(),
        notes=notes,
        overloaded=overload.is_set(),
    )


class _Either:
    """Set when either event is set."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()
