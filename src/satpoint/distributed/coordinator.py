"""The driver's side: one schedule over several hosts, started together, merged exactly.

``run_on_hosts`` measures every host's clock offset (``clock``), prepares every host (and checks that it
built the driver's schedule: its row count and first and last due times), picks one start time on the
driver's wall clock and sends each host that time on its own clock, polls their progress (merged live
snapshots, the overload rule, Ctrl-C), and merges the rows they return exactly as ``--procs`` merges its
processes' rows.  A host that fails (``HostLost``) loses its rows: the others are kept, and the run says
which host and what share of the schedule is missing.

The polls of all hosts are in flight together, each on a thread of its own, so one host that stops
answering never blinds the driver to the others, to Ctrl-C, the overload rule or the deadline: a poll
unanswered for ``poll_lost_s`` loses its host (and abandons it: ``abandon`` kills what it runs).  A
host's rows are fetched only once it said it has finished, with a longer bound (``rows_timeout_s``).

Hosts are anything with the ``ShardHost`` methods: Ray actors in production (``ray_fleet``), in-process
fakes with injected clock offsets and failures in the tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from satpoint.distributed.clock import ClockOffset, ClockSample, estimate_offset
from satpoint.distributed.host import HostReport, ShardJob
from satpoint.engine.live import LiveSnapshot, merge
from satpoint.engine.runner import RunOutput, ShardStats
from satpoint.engine.schedule import due_times
from satpoint.errors import RunFailed
from satpoint.metrics.records import Records
from satpoint.metrics.stats import stage_metrics
from satpoint.plan import spans

#: round trips per host to measure its clock offset (the one with the shortest round trip is kept)
CLOCK_ROUNDS = 20
#: a host must report its rows within this long after the schedule's last due time + drain + timeout
RESULT_GRACE_S = 30.0
#: a poll (one short round trip) unanswered this long loses its host
POLL_LOST_S = 10.0
#: how long a host that has finished may take to hand over its rows
ROWS_TIMEOUT_S = 120.0
_POLL_S = 0.25


class HostLost(Exception):
    """A host stopped answering, died, or failed: its rows are lost."""


class ShardHost(Protocol):
    """One host's generator, as the driver sees it.  Every call but ``abandon`` may raise ``HostLost``;
    ``poll``, ``stop`` and ``result`` may be called from threads of the driver's own."""

    name: str

    def describe(self) -> dict[str, Any]: ...

    def clock(self) -> float: ...

    def prepare(self, job: ShardJob, index: int) -> dict[str, float]:
        """Regenerate the host's rows: ``rows``, ``first_s`` and ``last_s`` (its first and last due times)."""
        ...

    def start(self, start_wall_s: float) -> dict[str, float]: ...

    def poll(self) -> tuple[bool, LiveSnapshot | None]:
        """Whether the host's shard has ended, and its latest live snapshot (one short round trip)."""
        ...

    def stop(self) -> None: ...

    def result(self) -> HostReport:
        """The rows of a shard that has ended."""
        ...

    def abandon(self) -> None:
        """Give the host up: end whatever it runs, without waiting for an answer (never raises)."""
        ...


@dataclass
class _Host:
    index: int
    handle: ShardHost
    info: dict[str, Any] = field(default_factory=dict)
    clock: ClockOffset | None = None
    rows: int = 0
    started: dict[str, float] = field(default_factory=dict)
    report: HostReport | None = None
    lost: str | None = None
    stopped: bool = False
    snap: LiveSnapshot | None = None
    finished: bool = False  # its shard has ended: its rows are being fetched
    call: Future[Any] | None = None  # the poll or rows fetch in flight
    call_sent: float = 0.0
    stop_call: Future[None] | None = None
    stop_sent: float = 0.0


def measure_clock(host: ShardHost, rounds: int = CLOCK_ROUNDS, wall: Callable[[], float] = time.time) -> ClockOffset:
    samples = []
    for _ in range(rounds):
        send = wall()
        theirs = host.clock()
        samples.append(ClockSample(send, theirs, wall()))
    return estimate_offset(samples)


def run_on_hosts(
    hosts: Sequence[ShardHost],
    job: ShardJob,
    *,
    on_snapshot: Callable[[LiveSnapshot], None] | None = None,
    stop_event: threading.Event | None = None,
    abort_when: Callable[[LiveSnapshot], bool] | None = None,
    lead_s: float = 3.0,
    align_s: float = 0.001,
    wall: Callable[[], float] = time.time,
    poll_lost_s: float = POLL_LOST_S,
    rows_timeout_s: float = ROWS_TIMEOUT_S,
) -> tuple[RunOutput, dict[str, Any]]:
    """Run ``job`` on ``hosts`` (``job.hosts == len(hosts)``); returns the merged output and the
    ``ray`` block of the segment's generator figures (hosts, clocks, start, losses)."""
    if job.hosts != len(hosts):
        raise ValueError(f"the job is cut for {job.hosts} hosts, {len(hosts)} given")
    user_stop = stop_event or threading.Event()
    states = [_Host(i, h) for i, h in enumerate(hosts)]
    notes: list[str] = []

    def lose(st: _Host, why: str) -> None:
        if st.lost is None:
            st.lost = why
            notes.append(f"host {st.index} ({st.info.get('host', st.handle.name)}) lost: {why}; its rows are missing")

    due = due_times(list(job.stages), job.arrival, job.seed, job.start_rps, descending=job.descending)
    for st in states:  # phase 1: clocks and preparation (connections are opened by the runner itself)
        try:
            st.info = dict(st.handle.describe())
            st.clock = measure_clock(st.handle, wall=wall)
            built = st.handle.prepare(job, st.index)
            st.rows = int(built["rows"])
        except HostLost as e:
            lose(st, f"while preparing: {e}")
            continue
        differs = schedule_difference(built, due[st.index :: job.hosts])
        if differs is not None:
            lose(st, f"it built another schedule than the driver's ({differs}; numpy {st.info.get('numpy', '?')})")
            st.handle.abandon()
    live = [st for st in states if st.lost is None]
    if not live:
        raise RunFailed("no generator host could be prepared: " + "; ".join(notes))
    max_rtt = max(st.clock.rtt_s for st in live if st.clock is not None)
    start_unix = wall() + lead_s + max_rtt * len(live)
    driver_t0 = time.perf_counter() + (start_unix - wall())
    for st in live:  # phase 2: one absolute start time, on each host's own clock
        assert st.clock is not None
        try:
            st.started = dict(st.handle.start(start_unix + st.clock.offset_s))
        except HostLost as e:
            lose(st, f"at the start: {e}")
    overloaded = threading.Event()
    deadline = start_unix + _last_due(job) + job.options.drain_s + job.options.timeout_s + RESULT_GRACE_S
    stop_sent_at: float | None = None
    # two calls per host at most in flight (a poll or rows fetch, and a stop); a host that hangs keeps its
    # threads until its own call times out (Ray's) or it is abandoned, never the driver's loop
    pool = ThreadPoolExecutor(max_workers=2 * len(states), thread_name_prefix="satpoint-host-call")
    try:
        while any(st.lost is None and st.report is None for st in states):
            tick = time.monotonic()
            if (user_stop.is_set() or overloaded.is_set() or wall() > deadline) and stop_sent_at is None:
                stop_sent_at = wall()
                for st in states:
                    _stop(st, pool)
            if stop_sent_at is not None and wall() > stop_sent_at + RESULT_GRACE_S:
                for st in states:  # a host handing its rows over has its own bound (rows_timeout_s)
                    if st.lost is None and st.report is None and not st.finished:
                        lose(st, f"no rows {RESULT_GRACE_S:g} s after it was asked to stop")
                        st.handle.abandon()
            _poll(states, pool, lose, poll_lost_s, rows_timeout_s)
            snaps = [st.snap for st in states if st.snap is not None and st.lost is None]
            if snaps and (on_snapshot is not None or abort_when is not None):
                merged = merge(snaps)
                if on_snapshot is not None:
                    on_snapshot(merged)
                if abort_when is not None and not overloaded.is_set() and abort_when(merged):
                    overloaded.set()
            time.sleep(max(0.0, _POLL_S - (time.monotonic() - tick)))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    if wall() > deadline and stop_sent_at is not None and not (user_stop.is_set() or overloaded.is_set()):
        notes.append("the hosts were stopped: they ran past the schedule's end plus its drain and timeout")
    return _merge(states, job, notes, start_unix, driver_t0, user_stop, overloaded, align_s, lead_s)


def schedule_difference(built: dict[str, float], mine: np.ndarray[Any, Any]) -> str | None:
    """How a host's schedule (``prepare``'s answer) differs from the driver's rows for it (None: the same)."""
    n = int(built["rows"])
    if n != len(mine):
        return f"{n} rows, the driver's {len(mine)}"
    first, last = float(built["first_s"]), float(built["last_s"])
    if n and (abs(first - float(mine[0])) > 1e-9 or abs(last - float(mine[-1])) > 1e-9):
        return (
            f"due from {first:.9f} to {last:.9f} s, the driver's from {float(mine[0]):.9f} to {float(mine[-1]):.9f} s"
        )
    return None


def _stop(st: _Host, pool: ThreadPoolExecutor) -> None:
    if st.lost is not None or st.report is not None or st.stopped:
        return
    st.stopped = True
    st.stop_call, st.stop_sent = pool.submit(st.handle.stop), time.monotonic()


def _poll(
    states: list[_Host],
    pool: ThreadPoolExecutor,
    lose: Callable[[_Host, str], None],
    poll_lost_s: float,
    rows_timeout_s: float,
) -> None:
    """Send a poll (or, once a host has finished, the rows fetch) to every host without one in flight,
    wait a poll interval for the answers, and take those that came; a host whose call is unanswered
    past its bound is lost and abandoned."""
    now = time.monotonic()
    for st in states:
        if st.lost is None and st.report is None and st.call is None:
            st.call = pool.submit(st.handle.result if st.finished else st.handle.poll)
            st.call_sent = now
    calls = [f for st in states for f in (st.call, st.stop_call) if f is not None]
    if calls:
        wait(calls, timeout=_POLL_S)
    now = time.monotonic()
    for st in states:
        stop_call = st.stop_call
        if stop_call is not None and stop_call.done():
            st.stop_call = None
            if isinstance(stop_call.exception(), HostLost):
                lose(st, f"when asked to stop: {stop_call.exception()}")
        elif st.stop_call is not None and now - st.stop_sent > poll_lost_s and st.lost is None and st.report is None:
            lose(st, f"no answer to stop within {poll_lost_s:g} s")
            st.handle.abandon()
        call = st.call
        if call is None:
            continue
        if not call.done():
            bound = rows_timeout_s if st.finished else poll_lost_s
            if now - st.call_sent > bound and st.lost is None:
                what = "to its rows fetch" if st.finished else "to a poll"
                lose(st, f"no answer {what} within {bound:g} s")
                st.handle.abandon()
            continue
        st.call = None
        if st.lost is not None:
            continue
        err = call.exception()
        if isinstance(err, HostLost):
            lose(st, f"while running: {err}")
        elif err is not None:
            lose(st, f"while running: {type(err).__name__}: {err}")
        elif st.finished:
            st.report = call.result()
            if st.report is not None and st.report.error is not None:
                lose(st, f"its runner failed: {st.report.error}")
        else:
            finished, snap = call.result()
            st.finished, st.snap = bool(finished), snap or st.snap


def _last_due(job: ShardJob) -> float:
    sp = spans(list(job.stages), job.start_rps, descending=job.descending)
    return sp[-1].end_s if sp else 0.0


def _merge(
    states: list[_Host],
    job: ShardJob,
    notes: list[str],
    start_unix: float,
    driver_t0: float,
    user_stop: threading.Event,
    overloaded: threading.Event,
    align_s: float,
    lead_s: float,
) -> tuple[RunOutput, dict[str, Any]]:
    done = [st for st in states if st.lost is None and st.report is not None]
    parts = [st.report.records for st in done if st.report is not None]
    shards: list[ShardStats] = [s for st in done if st.report is not None for s in st.report.shards]
    for st in done:
        assert st.report is not None
        notes.extend(f"host {st.index}: {n}" for n in st.report.notes)
    if not parts:
        if user_stop.is_set():
            empty = Records.empty(np.empty(0))
            out = RunOutput(empty, shards, start_unix, True, notes, overloaded.is_set(), None, driver_t0)
            return out, fleet_block(states, job, start_unix, align_s, lead_s)
        raise RunFailed("every generator host failed: " + "; ".join(notes))
    block = fleet_block(states, job, start_unix, align_s, lead_s)
    lost = [st for st in states if st.lost is not None]
    if lost:
        notes.append(
            f"{len(lost)} of {len(states)} generator hosts lost: {block['lost_share']:.0%} of the schedule's rows "
            "are missing from every stage (the server got that much less load than planned)"
        )
    notes.extend(block["warnings"])
    host_stopped = any(st.report.interrupted for st in done if st.report is not None and not st.stopped)
    per_proc = next((st.report.max_inflight_per_proc for st in done if st.report is not None), None)
    out = RunOutput(
        Records.merge(parts),
        shards,
        start_unix,
        interrupted=user_stop.is_set() or host_stopped,
        notes=notes,
        overloaded=overloaded.is_set(),
        max_inflight_per_proc=per_proc,
        t0_monotonic=driver_t0,
    )
    return out, block


def fleet_block(states: list[_Host], job: ShardJob, start_unix: float, align_s: float, lead_s: float) -> dict[str, Any]:
    """The ``ray`` block of a segment's generator figures: every host's clock, start, load and lag."""
    stage_spans = spans(list(job.stages), job.start_rps, descending=job.descending)
    hosts = [_host_figures(st, stage_spans) for st in states]
    clocks = [st.clock for st in states if st.clock is not None and st.lost is None]
    bound = 2 * max((c.uncertainty_s for c in clocks), default=0.0) if len(clocks) > 1 else 0.0
    started = [st for st in states if "t0_monotonic" in st.started and st.lost is None]
    boots = {st.info.get("boot_id") for st in started}
    skew: float | None = None
    if len(started) > 1 and len(boots) == 1 and None not in boots:  # one machine: one monotonic clock
        t0s = [st.started["t0_monotonic"] for st in started]
        skew = max(t0s) - min(t0s)
    warnings = []
    for st in states:
        if st.clock is not None and st.clock.uncertainty_s > align_s:
            warnings.append(
                f"host {st.index}: clock offset uncertain by ±{st.clock.uncertainty_s * 1000:.2f} ms, more than the "
                f"{align_s * 1000:g} ms asked for: its per-second intervals may be shifted that much"
            )
        margin = st.started.get("margin_s")
        if margin is not None and margin < 0:
            warnings.append(
                f"host {st.index}: the start reached it {-margin * 1000:.0f} ms after the start time "
                "(its first requests went out late; raise the start lead)"
            )
    lost = sum(1 for st in states if st.lost is not None)
    return {
        "hosts": hosts,
        "procs_per_host": job.procs_per_host,
        "start_unix": round(start_unix, 6),
        "lead_s": lead_s,
        "align_ms": align_s * 1000,
        "start_skew_s": None if skew is None else round(skew, 7),
        "start_skew_bound_s": round(bound, 7),
        "lost_hosts": lost,
        "lost_share": lost / len(states) if states else 0.0,
        "warnings": warnings,
    }


def _host_figures(st: _Host, stage_spans: list[Any]) -> dict[str, Any]:
    rep = st.report if st.lost is None else None
    cpu = sum(s.cpu_s for s in rep.shards) if rep is not None else None
    n = len(rep.records) if rep is not None else 0
    lag: list[float | None] = []
    if rep is not None and n:
        for sp in stage_spans:
            got = stage_metrics(rep.records, sp).generator_lag_ms.get("p99")
            lag.append(None if got is None else round(got, 4))
    return {
        "index": st.index,
        "host": st.info.get("host", st.handle.name),
        "node_id": st.info.get("node_id"),
        "pid": st.info.get("pid"),
        "rows_planned": st.rows,
        "requests": n,
        "cpu_s": None if cpu is None else round(cpu, 4),
        "cpu_us_per_request": round(cpu / n * 1e6, 2) if cpu is not None and n else None,
        "wall_s": round(max((s.wall_s for s in rep.shards), default=0.0), 4) if rep is not None else None,
        "clock": st.clock.describe() if st.clock is not None else None,
        "start_margin_s": round(st.started["margin_s"], 6) if "margin_s" in st.started else None,
        "t0_monotonic": round(st.started["t0_monotonic"], 7) if "t0_monotonic" in st.started else None,
        "stage_lag_p99_ms": lag,
        "lost": st.lost,
    }
