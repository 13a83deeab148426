"""What runs on each host: its share of the schedule, on the existing multi-process runner.

A host gets the plan, not its rows: ``host_rows`` regenerates the whole schedule from (plan, seed) and
keeps every ``hosts``-th row from its index, so host ``h`` of ``H`` owns the requests ``n`` with
``n % H == h``.  Its runner then deals those to its ``M`` processes the same way, so generator process
``k`` of host ``h`` owns ``n % (H * M) == h + H * k``: the striping ``--procs H*M`` uses on one machine,
and the merged rows are exactly the single-machine schedule.

``HostWorker`` is the host's side of the two-phase start: ``prepare`` (rows regenerated, modules
loaded), then ``start`` at an absolute time on the host's own wall clock, mapped once onto its
monotonic clock; the schedule runs on a thread of its own so ``poll`` and ``stop`` answer while it
runs, and ``result`` hands back the rows.  The Ray actor (``ray_fleet``) and the in-process fakes of the
tests both wrap it.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.live import LiveSnapshot
from satpoint.engine.runner import FactoryBuilder, RunOutput, ShardStats, _shard_options, run_schedule
from satpoint.engine.schedule import due_times
from satpoint.metrics.checkpoint import CheckpointSpec
from satpoint.metrics.records import Records
from satpoint.plan import Arrival, FloatArray, Stage

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
#: a host's shard checkpoints its rows under ``<tmp>/satpoint-shard-<pid>-*`` while it runs (for its own
#: processes' recovery); the folder of an actor that was killed is removed by the next shard on that node
SHARD_DIR_PREFIX = "satpoint-shard-"


@dataclass(frozen=True)
class ShardJob:
    """Everything a host needs to run its share of one segment (small: no rows)."""

    stages: tuple[Stage, ...]
    arrival: Arrival
    seed: int
    start_rps: float
    hosts: int
    procs_per_host: int
    build: FactoryBuilder  # with this host's share of the in-flight cap
    options: DispatchOptions
    #: CPUs of each host its generator processes are pinned to, one each in turn (None: not pinned)
    cpus: tuple[int, ...] | None = None
    #: falling targets allowed (a sequence satpoint plans itself: ``find --hysteresis``)
    descending: bool = False


def host_rows(job: ShardJob, index: int) -> FloatArray:
    """The due times host ``index`` owns: every ``job.hosts``-th row of the schedule, from ``index``."""
    return due_times(list(job.stages), job.arrival, job.seed, job.start_rps, descending=job.descending)[
        index :: job.hosts
    ]


@dataclass
class HostReport:
    """What a host hands back when its share has run."""

    records: Records
    shards: list[ShardStats]
    interrupted: bool
    notes: list[str]
    t0_monotonic: float  # the host's CLOCK_MONOTONIC at the common start
    max_inflight_per_proc: int | None = None
    error: str | None = None  # the runner failed: no rows
    extra: dict[str, Any] = field(default_factory=dict)


def remove_stale_shard_dirs(root: Path | None = None) -> list[Path]:
    """Remove the shard folders whose process is gone (an actor killed mid-shard leaves its folder);
    returns those removed."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(f"{SHARD_DIR_PREFIX}*-*"):
        pid = d.name[len(SHARD_DIR_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's
        return True
    return True


def boot_id() -> str | None:
    """This machine's boot id: hosts that share it share one CLOCK_MONOTONIC."""
    try:
        return _BOOT_ID.read_text().strip() or None
    except OSError:
        return None


class HostWorker:
    """One host's shard, driven by the coordinator through ``prepare``/``start``/``poll``/``stop``/``result``.

    ``wall`` reads the host's wall clock (tests pass a clock with an offset to stand for another host's);
    ``spawn``: the shard runs in generator processes of its own, never in this (the actor's) process; tests
    run it on a thread here instead."""

    def __init__(self, name: str | None = None, wall: Callable[[], float] = time.time, spawn: bool = True) -> None:
        self.name = name or socket.gethostname()
        self._wall = wall
        self._spawn = spawn
        self._job: ShardJob | None = None
        self._rows: FloatArray | None = None
        self._stop = threading.Event()
        self._latest: LiveSnapshot | None = None
        self._thread: threading.Thread | None = None
        self._out: RunOutput | None = None
        self._error: str | None = None
        self._t0: float | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def describe(self) -> dict[str, Any]:
        return {"host": self.name, "pid": os.getpid(), "boot_id": boot_id(), "numpy": np.__version__}

    def clock(self) -> float:
        """This host's wall clock (seconds since the epoch)."""
        return self._wall()

    def prepare(self, job: ShardJob, index: int) -> dict[str, float]:
        """Regenerate this host's rows; returns how many there are and their first and last due times
        (the driver checks them against its own schedule)."""
        if self._thread is not None:
            raise RuntimeError("this host is running a shard already")
        job = replace(job, options=_shard_options(job.options, index, job.hosts))  # its rows' payloads and models
        self._job, self._rows = job, host_rows(job, index)
        remove_stale_shard_dirs()  # here, not at the start: it may take a while
        self._stop.clear()
        self._latest, self._out, self._error, self._t0 = None, None, None, None
        rows = self._rows
        return {
            "rows": len(rows),
            "first_s": float(rows[0]) if len(rows) else 0.0,
            "last_s": float(rows[-1]) if len(rows) else 0.0,
        }

    def start(self, start_wall_s: float) -> dict[str, float]:
        """Start the run clock at ``start_wall_s`` on this host's wall clock (mapped onto its monotonic
        clock here, once); returns the monotonic origin and how long before it the start arrived
        (negative: late, the first rows go out late and show it as send lag)."""
        job, rows = self._job, self._rows
        if job is None or rows is None:
            raise RuntimeError("start before prepare")
        margin = start_wall_s - self._wall()
        t0 = time.perf_counter() + margin
        self._t0 = t0
        self._tmp = tempfile.TemporaryDirectory(prefix=f"{SHARD_DIR_PREFIX}{os.getpid()}-")
        checkpoint = CheckpointSpec(Path(self._tmp.name), 0)

        def body() -> None:
            try:
                self._out = run_schedule(
                    rows,
                    job.build,
                    job.options,
                    procs=job.procs_per_host,
                    cpus=list(job.cpus) if job.cpus else None,
                    on_snapshot=self._on_snapshot,
                    stop_event=self._stop,
                    checkpoint=checkpoint,
                    t0=t0,
                    spawn=self._spawn,
                )
            except BaseException as e:  # reported by result(), never lost in a thread
                self._error = f"{type(e).__name__}: {e}"

        self._thread = threading.Thread(target=body, name="satpoint-host-shard", daemon=True)
        self._thread.start()
        return {"t0_monotonic": t0, "margin_s": margin}

    def _on_snapshot(self, snap: LiveSnapshot) -> None:
        self._latest = snap

    def progress(self) -> LiveSnapshot | None:
        """The latest live snapshot of this host's processes (None before the first)."""
        return self._latest

    def poll(self) -> tuple[bool, LiveSnapshot | None]:
        """Whether the shard has ended (its rows are then ready for ``result``), and the latest snapshot."""
        thread = self._thread
        return (thread is None or not thread.is_alive()), self._latest

    def stop(self) -> None:
        """Stop the shard (its rows so far are kept and reported)."""
        self._stop.set()

    def result(self, wait_s: float = 0.0) -> HostReport | None:
        """The rows, once the shard has ended (None while it runs)."""
        thread = self._thread
        if thread is None:
            raise RuntimeError("result before start")
        thread.join(timeout=wait_s)
        if thread.is_alive():
            return None
        self._thread = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        t0 = self._t0 if self._t0 is not None else 0.0
        out = self._out
        if out is None:
            return HostReport(Records.empty(np.empty(0)), [], self._stop.is_set(), [], t0, error=self._error)
        return HostReport(
            out.records, out.shards, out.interrupted, out.notes, t0, out.max_inflight_per_proc, error=None
        )
