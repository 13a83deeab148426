"""Runs one schedule, in this process or sharded over several generator processes.

Sharding deals request ``n`` to shard ``n % procs``: every shard keeps the same time-shape at
``1/procs`` of the rate, and the merged rows are exactly the single-process schedule.  All shards use
the same run clock (``CLOCK_MONOTONIC`` via ``perf_counter`` is shared by processes on one host).

Each generator process gets its share of the in-flight cap (``split_max_inflight``), appends its rows to
its own checkpoint file while it runs (``metrics.checkpoint``: the parent may be the process that gets
killed), stops gracefully on SIGTERM/SIGHUP, and dies with its parent (see ``_child``).  A shard that
dies without reporting is replaced by the rows its checkpoint file holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing import resource_tracker
from types import FrameType
from typing import Any

import numpy as np
import uvloop

from satpoint.engine.dispatcher import DispatchOptions, OpenLoopDispatcher, Progress
from satpoint.engine.inflight import fit_to_fd_limit, raise_fd_limit
from satpoint.engine.lead import LEAD_S, SPAWN_LEAD_S
from satpoint.engine.live import ErrorCount, LiveSnapshot, merge, snapshot
from satpoint.engine.realtime import pinned
from satpoint.errors import RunFailed, TargetConnectFailed
from satpoint.metrics.checkpoint import CheckpointSpec, RowCheckpoint, read_shard_file
from satpoint.metrics.records import Records
from satpoint.plan import FloatArray
from satpoint.transports.base import TransportFactory

#: builds the transport factory inside the process that runs the shard (factories hold sockets)
FactoryBuilder = Callable[[], TransportFactory]


#: signals that stop a shard gracefully (rows checkpointed, records reported); SIGINT is the parent's
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGHUP})
#: a shard asked to stop by a signal must be gone within this many seconds (SIGALRM then ends it)
_STOP_GRACE_S = 10
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ShardStats:
    cpu_s: float  # process CPU time spent while the shard ran
    wall_s: float
    requests: int
    stopped_early: bool
    checkpoint_error: str | None = None
    transport: dict[str, Any] = field(default_factory=dict)  # the transport's report (``stats()``)
    fd_limit: int | None = None  # the process's open-files limit (soft, after raising it to the hard one)
    max_inflight: int | None = None  # the in-flight cap it ran with (its share, within its open-files limit)
    max_inflight_asked: int | None = None  # its share of the cap before that limit was applied


@dataclass
class RunOutput:
    records: Records
    shards: list[ShardStats]
    started_unix: float
    interrupted: bool = False  # stopped by the user (Ctrl-C / SIGTERM / SIGHUP)
    notes: list[str] = field(default_factory=list)
    overloaded: bool = False  # stopped early because ``abort_when`` judged the server clearly overloaded
    max_inflight_per_proc: int | None = None  # the in-flight cap of each generator process
    t0_monotonic: float | None = None  # perf_counter() (CLOCK_MONOTONIC) of the run clock's origin
    #: per generator process: its planned rows, the rows it reported or its checkpoint recovered, and
    #: (when it died without reporting) why and until when its checkpoint holds rows (``shard_counts``)
    shard_rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def generator_cpu_s(self) -> float:
        return sum(s.cpu_s for s in self.shards)


def _shard_rows(due_s: FloatArray, shard: int, procs: int) -> FloatArray:
    return due_s[shard::procs]


def _shard_options(options: DispatchOptions, shard: int, procs: int) -> DispatchOptions:
    """A shard's dispatch options: its rows' payloads (``payload_index``) and models (``model_index``)."""
    pay, models = options.payload_index, options.model_index
    if pay is None and models is None:
        return options
    return replace(
        options,
        payload_index=None if pay is None else pay[shard::procs],
        model_index=None if models is None else models[shard::procs],
    )


def split_max_inflight(build: FactoryBuilder, procs: int) -> tuple[FactoryBuilder, int | None]:
    """The builder each of ``procs`` generator processes uses, with its share of the in-flight cap.

    The cap is split with ceiling division (at least 1 each), so the shards together never allow
    fewer requests in flight than asked, and at most ``procs - 1`` more.  Builders that carry no cap
    (``with_max_inflight``) are used as they are."""
    cap = getattr(build, "max_inflight", None)
    resize = getattr(build, "with_max_inflight", None)
    if not isinstance(cap, int) or not callable(resize):
        return build, None
    if procs <= 1:
        return build, cap
    per = max(1, -(-cap // procs))
    shard_build: FactoryBuilder = resize(per)
    return shard_build, per


def run_shard(
    due_s: FloatArray,
    t0: float,
    build: FactoryBuilder,
    options: DispatchOptions,
    on_snapshot: Callable[[LiveSnapshot], None] | None,
    stop_requested: Callable[[], bool],
    cpus: list[int] | None = None,
    checkpoint: CheckpointSpec | None = None,
    shard: int = 0,
) -> tuple[Records, ShardStats]:
    """Run one shard's rows on a fresh event loop; with ``checkpoint``, its rows are appended to its
    checkpoint file about once a second and once more, complete, when it ends.  Pinned to ``cpus`` while
    it runs, at ``options.realtime_priority`` if set (``engine.realtime.pinned``)."""
    with pinned(cpus, options.realtime_priority):
        return _run_shard(due_s, t0, build, options, on_snapshot, stop_requested, checkpoint, shard)


def _run_shard(
    due_s: FloatArray,
    t0: float,
    build: FactoryBuilder,
    options: DispatchOptions,
    on_snapshot: Callable[[LiveSnapshot], None] | None,
    stop_requested: Callable[[], bool],
    checkpoint: CheckpointSpec | None,
    shard: int,
) -> tuple[Records, ShardStats]:
    # whatever the cap (--max-inflight, automatic, a Ray host's share): this process's own limit, raised,
    # and no more connections than it leaves room for
    fd_limit = raise_fd_limit()
    build, asked, kept = _fit_to_fds(build, fd_limit)
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    ckpt: RowCheckpoint | None = None
    ckpt_error: str | None = None
    try:
        factory = build()
        errors = ErrorCount()  # counted as rows finish, not rescanned at every snapshot

        def progress(p: Progress, rec: Records) -> None:
            if on_snapshot is not None:
                on_snapshot(snapshot(p, rec, errors))

        # no live snapshots (a few hundred microseconds of loop time each) when nobody watches
        disp = OpenLoopDispatcher(
            due_s, t0, factory, options, progress if on_snapshot is not None else None, stop_requested
        )
        if checkpoint is not None:
            try:
                ckpt = RowCheckpoint(checkpoint.path(shard))
            except OSError as e:
                ckpt_error = f"no checkpoints for shard {shard}: {e.strerror or e}"
            disp.checkpoint = ckpt
            disp.checkpoint_interval_s = checkpoint.interval_s
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            rec = loop.run_until_complete(disp.run())
        finally:
            if ckpt is not None:
                ckpt.close()  # waits for the last frame to be written
                ckpt_error = ckpt.error
        stats = ShardStats(
            time.process_time() - cpu0,
            time.perf_counter() - wall0,
            len(rec),
            disp.stopped_early,
            ckpt_error,
            disp.transport_stats,
            fd_limit,
            kept,
            asked,
        )
        return rec, stats
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def _fit_to_fds(build: FactoryBuilder, fd_limit: int) -> tuple[FactoryBuilder, int | None, int | None]:
    """(the builder, its cap, the cap kept): a REST pool holds one connection per request in flight, so its
    cap is lowered to what this process's open-files limit leaves room for; gRPC multiplexes its streams
    over a few connections and keeps its cap."""
    cap = getattr(build, "max_inflight", None)
    resize = getattr(build, "with_max_inflight", None)
    if not isinstance(cap, int) or not callable(resize):
        return build, None, None
    if hasattr(build, "connections"):  # gRPC: streams share connections
        return build, cap, cap
    kept = fit_to_fd_limit(cap, fd_limit)
    resized: FactoryBuilder = resize(kept) if kept < cap else build
    return resized, cap, kept


def _die_with_parent(parent_pid: int) -> bool:
    """Ask the kernel to send SIGTERM to this process when its parent dies (Linux); False if the parent
    is already gone."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    return os.getppid() == parent_pid


def _child(
    due_s: FloatArray,
    t0: float,
    build: FactoryBuilder,
    options: DispatchOptions,
    progress_q: Any,
    result_q: Any,
    stop: Any,
    shard: int,
    cpus: list[int] | None,
    checkpoint: CheckpointSpec | None,
    parent_pid: int,
) -> None:
    """One generator process.  It stops, keeping and reporting its rows, when the parent asks (``stop``),
    on SIGTERM or SIGHUP (sent to the whole process group by ``timeout``, a closed terminal or a
    container runtime) and when the parent dies (the kernel's die-with-parent signal, and a check of the
    parent's pid at every housekeeping tick).  A shard whose parent is gone exits without reporting: its
    checkpoint file holds its rows."""
    signalled = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signalled.set()
        signal.alarm(_STOP_GRACE_S)  # stopping must not hang: SIGALRM's default action ends the process

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop on Ctrl-C
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) != signal.SIG_IGN:  # ignored in the parent (nohup): ignored here too
            signal.signal(sig, on_signal)
    if not _die_with_parent(parent_pid):
        signalled.set()
    # the parent blocked these signals while starting us: one that arrived meanwhile is delivered now
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, *STOP_SIGNALS})

    def parent_gone() -> bool:
        return os.getppid() != parent_pid

    def stop_requested() -> bool:
        return signalled.is_set() or parent_gone() or stop.is_set()

    try:
        rec, stats = run_shard(
            due_s,
            t0,
            build,
            options,
            lambda s: progress_q.put((shard, s)),
            stop_requested,
            cpus,
            checkpoint,
            shard,
        )
        if parent_gone():
            os._exit(0)  # nobody reads the queues any more: do not wait on them at exit
        result_q.put((shard, rec, stats, signalled.is_set(), None))
    except BaseException as e:  # report, never hang the parent
        if parent_gone():
            os._exit(1)
        result_q.put((shard, None, None, signalled.is_set(), f"{type(e).__name__}: {e}"))


def run_schedule(
    due_s: FloatArray,
    build: FactoryBuilder,
    options: DispatchOptions,
    procs: int = 1,
    on_snapshot: Callable[[LiveSnapshot], None] | None = None,
    stop_event: threading.Event | None = None,
    cpus: list[int] | None = None,
    lead_s: float = LEAD_S,
    abort_when: Callable[[LiveSnapshot], bool] | None = None,
    checkpoint: CheckpointSpec | None = None,
    t0: float | None = None,
    spawn: bool = False,
) -> RunOutput:
    """Run every row of ``due_s`` (run-clock seconds) and return the merged records.

    ``t0``: the run clock's origin (a ``perf_counter`` value) when the caller fixes it (shards on several
    hosts start at one agreed time); None: ``lead_s`` from now (2 s at least when processes are spawned).
    ``spawn``: run even a single shard in a generator process of its own (not in this process).

    ``abort_when`` sees every live snapshot; when it returns True the run stops early (a clearly
    overloaded server: no point queueing more), which is reported as ``overloaded``, not interrupted.
    With ``checkpoint``, every shard appends its rows to its own checkpoint file while it runs.  With
    several processes, each gets ``ceil(max_inflight / procs)`` of the in-flight cap.
    """
    user_stop = stop_event or threading.Event()
    overload = threading.Event()
    stop = _Either(user_stop, overload)
    started_unix = time.time()
    shard_build, per_proc = split_max_inflight(build, procs)

    def snap_cb(snap: LiveSnapshot) -> None:
        if on_snapshot is not None:
            on_snapshot(snap)
        if abort_when is not None and not overload.is_set() and abort_when(snap):
            overload.set()

    if procs <= 1 and not spawn:
        t0 = time.perf_counter() + lead_s if t0 is None else t0
        watched = on_snapshot is not None or abort_when is not None
        rec, stats = run_shard(
            due_s, t0, build, options, snap_cb if watched else None, stop.is_set, cpus, checkpoint, 0
        )
        notes = [stats.checkpoint_error] if stats.checkpoint_error else []
        return RunOutput(
            rec,
            [stats],
            started_unix,
            interrupted=user_stop.is_set(),
            notes=notes,
            overloaded=overload.is_set(),
            max_inflight_per_proc=per_proc,
            t0_monotonic=t0,
            shard_rows=[shard_count(0, len(due_s), rec)],
        )

    ctx = mp.get_context("spawn")
    if t0 is None:
        t0 = time.perf_counter() + max(lead_s, SPAWN_LEAD_S)  # spawn start-up happens before the clock starts
    workers = []
    # Children inherit the signal mask: blocked here, a SIGTERM/SIGHUP/SIGINT sent to the process group
    # while a child is still importing waits until the child has installed its handlers (the parent
    # gets it right after the starts, since only this thread blocks it).  multiprocessing's resource
    # tracker, started here on first use, keeps them blocked for good: it ignores SIGINT and SIGTERM
    # itself but would die of a SIGHUP to the group, and the next queue would then start a new one that
    # prints tracebacks about semaphores it never saw.
    masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, *STOP_SIGNALS})
    try:
        resource_tracker.ensure_running()
        progress_q = ctx.Queue()
        result_q = ctx.Queue()
        child_stop = ctx.Event()
        for k in range(procs):
            shard_cpus = [cpus[k % len(cpus)]] if cpus else None
            p = ctx.Process(
                target=_child,
                args=(
                    _shard_rows(due_s, k, procs),
                    t0,
                    shard_build,
                    _shard_options(options, k, procs),
                    progress_q,
                    result_q,
                    child_stop,
                    k,
                    shard_cpus,
                    checkpoint,
                    os.getpid(),
                ),
                daemon=True,
            )
            p.start()
            workers.append(p)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, masked)
    latest: dict[int, LiveSnapshot] = {}
    results: dict[int, tuple[Records | None, ShardStats | None, bool, str | None]] = {}
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
            # merge once every shard still running has reported: a dead one must not freeze the
            # snapshots (and with them the overload rule)
            running = {i for i, w in enumerate(workers) if i not in results and w.is_alive()}
            if latest and running <= latest.keys():
                snap_cb(merge(list(latest.values())))
                latest.clear()
            try:
                k, rec, stats, signalled, err = result_q.get(timeout=0.1)
                results[k] = (rec, stats, signalled, err)
            except queue.Empty:
                dead = [i for i, w in enumerate(workers) if not w.is_alive() and i not in results]
                if dead:
                    time.sleep(0.5)  # a result may still be in the pipe
                    try:
                        while True:
                            k, rec, stats, signalled, err = result_q.get_nowait()
                            results[k] = (rec, stats, signalled, err)
                    except queue.Empty:
                        pass
                    for i in dead:
                        code = workers[i].exitcode
                        results.setdefault(i, (None, None, False, f"generator process {i} died (exit code {code})"))
    finally:
        child_stop.set()
        for w in workers:
            w.join(timeout=5)
            if w.is_alive():
                w.kill()
                w.join()
    notes = [f"shard {k}: {err}" for k, (_, _, _, err) in sorted(results.items()) if err]
    for k, (_, st, _, _) in sorted(results.items()):
        if st is not None and st.checkpoint_error:
            notes.append(f"shard {k}: {st.checkpoint_error}")
    parts: list[Records] = []
    counts: list[dict[str, Any]] = []
    for k, (got, _, _, err) in sorted(results.items()):
        until_s: float | None = None
        if got is None and checkpoint is not None:
            got, until_s = _recover(checkpoint, k, notes)
        if got is not None:
            parts.append(got)
        planned = len(_shard_rows(due_s, k, procs))
        lost = None if err is None and results[k][1] is not None else err or "no report"
        counts.append(shard_count(k, planned, got, lost, until_s))
    stats_list = [s for k, (_, s, _, _) in sorted(results.items()) if s is not None]
    signalled_any = any(sig for (_, _, sig, _) in results.values())
    interrupted = user_stop.is_set() or signalled_any
    if not parts:
        if interrupted:  # stopped before any shard had a row to report
            empty = Records.empty(np.empty(0))
            return RunOutput(
                empty, stats_list, started_unix, True, notes, overload.is_set(), per_proc, shard_rows=counts
            )
        errors = [err for (_, _, _, err) in results.values() if err]
        if errors and all(e.startswith(("TargetConnectFailed", "ConnectionRefusedError")) for e in errors):
            raise TargetConnectFailed("every generator process failed to connect: " + "; ".join(notes))
        raise RunFailed("every generator process failed: " + "; ".join(notes))
    if signalled_any and not user_stop.is_set():
        notes.append("a generator process was stopped by a signal: the run was cut short")
    return RunOutput(
        Records.merge(parts),
        stats_list,
        started_unix,
        interrupted=interrupted,
        notes=notes,
        overloaded=overload.is_set(),
        max_inflight_per_proc=per_proc,
        t0_monotonic=t0,
        shard_rows=counts,
    )


def shard_count(
    shard: int, planned: int, rows: Records | None, lost: str | None = None, until_s: float | None = None
) -> dict[str, Any]:
    """One generator process's rows, as ``generator.shards`` records them: ``planned`` (its share of the
    schedule), ``rows`` (reported, or recovered from its checkpoint), ``last_due_s`` (the due time of its
    last row: processes asked to stop stop a few milliseconds apart), ``lost`` (why it did not report,
    None when it did) and ``until_s`` (run clock of its last checkpoint, when its rows were recovered)."""
    n = len(rows) if rows is not None else 0
    last = round(float(rows.intended[-1]), 6) if rows is not None and n else None
    return {"shard": shard, "planned": planned, "rows": n, "last_due_s": last, "lost": lost, "until_s": until_s}


def _recover(checkpoint: CheckpointSpec, shard: int, notes: list[str]) -> tuple[Records | None, float | None]:
    """The rows a dead shard checkpointed before it died, and the run clock of its last checkpoint."""
    path = checkpoint.path(shard)
    try:
        got = read_shard_file(path) if path.exists() else None
    except OSError:
        got = None
    if got is None:
        return None, None
    notes.append(f"shard {shard}: {len(got.records)} rows recovered from its checkpoint (until {got.now_s:.1f} s)")
    return got.records, round(got.now_s, 3)


class _Either:
    """Set when either event is set."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()
