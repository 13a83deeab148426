"""A measuring session: one prepared target, one results folder, segments written as they end.

``run_segment`` runs a load plan against a prepared target and returns a results segment.
``Session`` owns a results folder: it writes the header when it opens, measures segments (open loop
or closed loop), reports progress as events, and appends each segment to the folder the moment it
ends, so an error or an interruption later keeps everything measured before it.  While a segment
runs, its rows are checkpointed to the folder about once a second (``metrics.checkpoint``): a crash,
``kill -9`` or a full disk keeps everything up to the last checkpoint, and a segment that fails with an
exception is kept with the rows it checkpointed before the exception is passed on.

Why this module is long: everything that must happen around one segment, in order and on the same
folder, is here — the header, the checkpoints' folder, the observer's marks, the flame graph's start and
stop, the salvage of a failed segment and the move to a rescue folder when the results folder refuses a
write — so that no caller can run a segment without them.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
import psutil

from satpoint.analysis.server.flamegraph import profiles_seen, py_spy_counts, sample_count, top_functions
from satpoint.config import LoadOptions, RunConfig
from satpoint.endpoints.spec import INSECURE_WARNING, PreparedTarget, Target
from satpoint.engine.closed_loop import ARRIVAL, PURPOSE, ClosedLoopOptions, closed_loop_segment
from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.inflight import auto_inflight
from satpoint.engine.lead import start_lead_s
from satpoint.engine.live import LiveSnapshot
from satpoint.engine.machine_speed import reference_us
from satpoint.engine.realtime import check_realtime
from satpoint.engine.runner import RunOutput, ShardStats, run_schedule, split_max_inflight
from satpoint.engine.schedule import due_times
from satpoint.errors import TargetUnreachable
from satpoint.metrics.checkpoint import CheckpointSpec
from satpoint.metrics.observed import read_observations
from satpoint.metrics.records import Records
from satpoint.metrics.results import (
    RELOCATED_KEY,
    Results,
    Segment,
    abandon_segment,
    append_segment,
    new_header,
    recover_running,
    relocation_warning,
    start_segment,
    write_header,
)
from satpoint.observe.observer import Observer
from satpoint.observe.pyspy import LOG_FILE, SPEEDSCOPE_FILE, find_py_spy, record_command
from satpoint.payloads.mix import HEADER_KEY as MIX_KEY
from satpoint.plan import FloatArray, PlanError, RateCurve, Stage, spans
from satpoint.procedures.progress import OnEvent, SegmentFinished, SegmentStarted, Snapshot, say
from satpoint.transports.base import merge_stats

if TYPE_CHECKING:
    from satpoint.config import RayOptions
    from satpoint.distributed.host import ShardJob


class Fleet(Protocol):
    """Generator hosts for a command (``distributed.ray_fleet.RayFleet``): ``size`` hosts of
    ``options.procs_per_host`` processes each, running one segment's schedule at a time."""

    options: RayOptions

    @property
    def size(self) -> int: ...

    def run(
        self,
        job: ShardJob,
        *,
        on_snapshot: Callable[[LiveSnapshot], None] | None = None,
        stop_event: threading.Event | None = None,
        abort_when: Callable[[LiveSnapshot], bool] | None = None,
    ) -> tuple[RunOutput, dict[str, Any]]: ...


def require_generator(load: LoadOptions) -> None:
    """Fail early, before any server starts or request leaves, when this machine cannot give the generator
    what ``load`` asks for: Ray for ``load.ray`` (the one-line error names the extra) or the real-time
    priority ``load.realtime_priority`` (a ``ConfigError`` saying why)."""
    check_realtime(load.realtime_priority)  # a RealtimeUnavailable (a ConfigError) saying why not
    if load.ray is not None:
        from satpoint.distributed.ray_fleet import import_ray

        import_ray()


@contextlib.contextmanager
def open_fleet(load: LoadOptions, on_event: OnEvent | None = None) -> Iterator[Fleet | None]:
    """The Ray generator hosts ``load.ray`` asks for, for the length of a command (None: this machine).

    Ray is imported only here, and only then; leaving the block kills the actors, removes the placement
    group and stops the local Ray instance if this started one."""
    if load.ray is None:
        yield None
        return
    from satpoint.distributed.ray_fleet import RayFleet

    with RayFleet(load.ray, log=lambda text: say(on_event, text)) as fleet:
        yield fleet


def announce_target(spec: Target, on_event: OnEvent | None) -> None:
    """Warnings about a target, before any request reaches it: ``--insecure`` (also recorded in
    results.json as ``target.tls.verify: false`` and repeated in summary.json's warnings)."""
    if spec.insecure and spec.uses_tls:
        say(on_event, f"WARNING: {INSECURE_WARNING}", "warning")


def planned_inflight(
    target: PreparedTarget, opts: LoadOptions, stages: list[Stage], start_rps: float, due_s: FloatArray | None = None
) -> int:
    """The in-flight cap a segment runs with: ``--max-inflight``, else sized from its peak rate (with
    ``due_s``, a replayed trace: also its busiest second, whose bursts a stage's mean rate hides)."""
    peak = max([start_rps, *(s.target_rps for s in stages)])
    if due_s is not None and len(due_s):
        peak = max(peak, float(np.bincount(np.floor(np.maximum(due_s, 0.0)).astype(np.int64)).max()))
    return opts.max_inflight or auto_inflight(peak, target.latency_hint_s)


def run_segment(
    target: PreparedTarget,
    stages: list[Stage],
    opts: LoadOptions,
    index: int = 0,
    purpose: str = "run",
    on_snapshot: Callable[[LiveSnapshot], None] | None = None,
    stop_event: threading.Event | None = None,
    seed_offset: int = 0,
    start_rps: float = 0.0,
    abort_when: Callable[[LiveSnapshot], bool] | None = None,
    checkpoint: CheckpointSpec | None = None,
    fleet: Fleet | None = None,
    descending: bool = False,
    due_s: FloatArray | None = None,
    arrival: str | None = None,
    payload_index: npt.NDArray[np.int64] | None = None,
) -> Segment:
    """Run one open-loop schedule (the stages, ramping from ``start_rps``) and package its rows
    (checkpointed to ``checkpoint`` while it runs, if given).  ``due_s`` (with ``arrival``, what the
    segment records as its arrival process): the due times to send at instead of the plan's own, e.g. a
    replayed trace; the stages then only cut the run into judged stages.  ``payload_index``: each row's
    payload (an index into the target's payloads) instead of the payloads in turn.  ``descending`` allows
    falling targets (a sequence satpoint plans itself, ``find --hysteresis``; a user's plan must rise).  With
    ``fleet``, the schedule runs on its hosts (each regenerates its own rows) and the merged rows come back;
    the hosts' figures are kept under the generator's ``ray`` key."""
    check_plan_fits(stages, start_rps, descending=descending)
    if due_s is not None and fleet is not None:
        raise PlanError("a replayed trace runs on this machine's generator processes (--procs), not on --ray hosts")
    seed = opts.seed + seed_offset
    model_index = None
    if target.mix is not None:  # each row's model, drawn now from (seed, row): the same on every shard and host
        if payload_index is not None:
            raise PlanError("a model mix picks each request's payload itself: not with a trace's payload column")
        planned = due_times(stages, opts.arrival, seed, start_rps, descending=descending) if due_s is None else due_s
        payload_index, model_index = target.mix.rows(len(planned), seed)
    cap = planned_inflight(target, opts, stages, start_rps, due_s)
    builder = replace(target.builder, max_inflight=cap)
    dopts = DispatchOptions(
        timeout_s=opts.timeout_s,
        drain_s=min(opts.drain_s, opts.timeout_s),
        warm_connections=opts.warm_connections,
        payload_count=len(target.payload_docs),
        payload_index=payload_index,
        model_index=model_index,
        wake_window_s=opts.wake_window_ms / 1000.0,
        realtime_priority=opts.realtime_priority,
    )
    fleet_block: dict[str, Any] | None = None
    if fleet is not None:
        out, fleet_block = _run_on_fleet(
            fleet, stages, opts, seed, start_rps, builder, dopts, on_snapshot, stop_event, abort_when, descending
        )
        procs = fleet.size * fleet.options.procs_per_host
    else:
        out = run_schedule(
            due_times(stages, opts.arrival, seed, start_rps, descending=descending) if due_s is None else due_s,
            builder,
            dopts,
            procs=opts.procs,
            on_snapshot=on_snapshot,
            stop_event=stop_event,
            cpus=list(opts.generator_cpus) if opts.generator_cpus else None,
            abort_when=abort_when,
            checkpoint=checkpoint,
        )
        procs = opts.procs
    n = len(out.records)
    generator: dict[str, Any] = {
        "procs": procs,
        "max_inflight_per_proc": out.max_inflight_per_proc,
        "cpu_s": round(out.generator_cpu_s, 4),
        "cpu_us_per_request": round(out.generator_cpu_s / n * 1e6, 2) if n else None,
        "wall_s": round(max((s.wall_s for s in out.shards), default=0.0), 4),
        "max_inflight": cap,
        "max_inflight_auto": opts.max_inflight is None,
        # connections, retries, idle closes, gRPC's effective in-flight cap (connections x streams)...
        "transport": merge_stats([s.transport for s in out.shards]),
    }
    if out.t0_monotonic is not None:  # maps the server-side samples (CLOCK_MONOTONIC) onto the run clock
        generator["t0_monotonic"] = round(out.t0_monotonic, 6)
    notes = list(out.notes)
    fd_limited = _fd_limited(out.shards)
    if fd_limited is not None:
        generator["fd_limit"] = fd_limited["fd_limit"]
        if fd_limited["kept_per_proc"] < fd_limited["asked_per_proc"]:
            generator["max_inflight_per_proc"] = fd_limited["kept_per_proc"]
            generator["max_inflight_fd_limited"] = fd_limited
            notes.append(
                f"the in-flight cap of a generator process was lowered from {fd_limited['asked_per_proc']} to "
                f"{fd_limited['kept_per_proc']}: its open-files limit is {fd_limited['fd_limit']} (raise the hard "
                "limit, `ulimit -Hn`, or use more generator processes)"
            )
    if fleet_block is not None:
        generator["ray"] = fleet_block
    elif out.shard_rows:  # planned and recorded rows per process: a dead one's missing share is judged
        generator["shards"] = out.shard_rows
    return Segment(
        index=index,
        purpose=purpose,
        stages=list(stages),
        arrival=arrival or opts.arrival,
        seed=seed,
        started_unix=out.started_unix,
        records=out.records,
        generator=generator,
        interrupted=out.interrupted,
        stopped="interrupted" if out.interrupted else "overload" if out.overloaded else None,
        notes=notes,
        start_rps=start_rps,
    )


def _fd_limited(shards: list[ShardStats]) -> dict[str, int] | None:
    """The generator processes' lowest open-files limit and in-flight cap, kept and asked (None: unknown)."""
    known = [s for s in shards if s.fd_limit is not None and s.max_inflight is not None and s.max_inflight_asked]
    if not known:
        return None
    low = min(known, key=lambda s: (s.max_inflight or 0) - (s.max_inflight_asked or 0))
    return {
        "fd_limit": min(int(s.fd_limit or 0) for s in known),
        "asked_per_proc": int(low.max_inflight_asked or 0),
        "kept_per_proc": int(low.max_inflight or 0),
    }


def _run_on_fleet(
    fleet: Fleet,
    stages: list[Stage],
    opts: LoadOptions,
    seed: int,
    start_rps: float,
    builder: Any,
    dopts: DispatchOptions,
    on_snapshot: Callable[[LiveSnapshot], None] | None,
    stop_event: threading.Event | None,
    abort_when: Callable[[LiveSnapshot], bool] | None,
    descending: bool = False,
) -> tuple[RunOutput, dict[str, Any]]:
    from satpoint.distributed.host import ShardJob

    host_build, _ = split_max_inflight(builder, fleet.size)  # each host's share of the cap
    per_host = fleet.options.procs_per_host
    job = ShardJob(
        tuple(stages),
        opts.arrival,
        seed,
        start_rps,
        fleet.size,
        per_host,
        host_build,
        dopts,
        opts.generator_cpus,
        descending,
    )
    return fleet.run(job, on_snapshot=on_snapshot, stop_event=stop_event, abort_when=abort_when)


class Session:
    """A results folder being written for one prepared target."""

    def __init__(
        self,
        prepared: PreparedTarget,
        config: RunConfig,
        out_dir: Path,
        *,
        on_event: OnEvent | None = None,
        stop: threading.Event | None = None,
        server_info: dict[str, Any] | None = None,
        observer: Observer | None = None,
        fleet: Fleet | None = None,
    ) -> None:
        self.prepared = prepared
        self.fleet = fleet
        self.out_dir = Path(out_dir)
        self.on_event = on_event
        self.stop = stop or threading.Event()
        self.observer = observer
        self._relocation_said = False
        self._checkpoints = self.out_dir  # the folder the running segment checkpoints to
        self._reference_us: float | None = None  # the machine's speed before the running segment
        self.results = Results(new_header(config, prepared.spec.describe(), time.time()))
        self.results.header["target"]["metadata"] = prepared.metadata
        if prepared.triton is not None:
            self.results.header["target"]["triton"] = prepared.triton
        if prepared.mix is not None:  # the models of a mix: the rows' model column indexes them
            self.results.header[MIX_KEY] = prepared.mix.describe()
        self.results.header["target"]["managed"] = server_info is not None
        if server_info is not None:
            self.results.header["server"] = server_info
        if observer is not None:
            self.results.header["observe"] = observer.describe()
        write_header(self.out_dir, self.results, rescue_ok=False)  # an unwritable --out fails before any load

    @property
    def config(self) -> RunConfig:
        return self.results.config

    def _snap(self) -> Callable[[LiveSnapshot], None] | None:
        on_event = self.on_event
        if on_event is None:
            return None
        return lambda s: on_event(Snapshot(s))

    def _started(self, seg_index: int, purpose: str, stages: list[Stage], title: str, **kw: Any) -> None:
        if self.on_event is not None:
            self.on_event(SegmentStarted(seg_index, purpose, tuple(stages), title, **kw))

    def _mark(self, tag: str) -> None:
        """Tell the observer a segment starts or ended (it samples and scrapes the server right then)."""
        if self.observer is None:
            return
        self.observer.mark(tag)
        self.results.observed = read_observations(self.out_dir)
        if self.observer.problems != self.results.header.get("observe", {}).get("problems"):
            self.results.header["observe"] = self.observer.describe()
            write_header(self.out_dir, self.results)

    @property
    def folder(self) -> Path:
        """Where the results are written: ``out_dir``, or the rescue folder in ``$TMPDIR`` once ``out_dir``
        refused a write (a full disk, no permission; see ``metrics.results.rescue``)."""
        return self.results.rescue_dir or self.out_dir

    def _announce_relocation(self) -> None:
        """Say once, as a warning, that the results moved to a rescue folder (and why)."""
        moved = self.results.header.get(RELOCATED_KEY)
        if moved and not self._relocation_said:
            self._relocation_said = True
            say(self.on_event, relocation_warning(moved), "warning")

    def _finish(self, seg: Segment, append: bool = True) -> Segment:
        if self._reference_us is not None:
            seg.generator.setdefault("reference_us", self._reference_us)
        if append:
            append_segment(self.out_dir, self.results, seg)
        self._announce_relocation()
        if self.on_event is not None:
            self.on_event(SegmentFinished(seg.index, seg.purpose, seg.interrupted, len(seg.records)))
        return seg

    def _begin(
        self,
        index: int,
        purpose: str,
        stages: list[Stage],
        start_rps: float = 0.0,
        arrival: str | None = None,
        seed: int | None = None,
        max_inflight: int | None = None,
    ) -> CheckpointSpec:
        """Record the segment as running in ``results.json``; returns where its rows are checkpointed.
        First, on the generator's CPUs, the machine's speed (``engine.machine_speed``; not with a fleet: the
        load runs on other hosts)."""
        load = self.config.load
        self._reference_us = reference_us(cpus=load.generator_cpus) if self.fleet is None else None
        shell = Segment(
            index=index,
            purpose=purpose,
            stages=list(stages),
            arrival=arrival or load.arrival,
            seed=load.seed + index if seed is None else seed,
            started_unix=time.time(),
            records=Records.empty(np.empty(0)),
            generator={"procs": load.procs}
            if max_inflight is None
            else {
                "procs": load.procs,
                "max_inflight": max_inflight,
                "max_inflight_auto": load.max_inflight is None,
                "max_inflight_per_proc": -(-max_inflight // max(1, load.procs)),
            },
            start_rps=start_rps,
        )
        if self._reference_us is not None:  # kept by a segment rebuilt from its checkpoints too
            shell.generator["reference_us"] = self._reference_us
        start_segment(self.out_dir, self.results, shell)
        self._announce_relocation()  # a segment the previous one's caller appended, or this header
        self._checkpoints = self.folder
        return CheckpointSpec(self.folder, index)

    def _salvage(self, error: BaseException) -> None:
        """A segment failed with an exception: keep the rows it checkpointed (as an interrupted segment)."""
        running = self.results.running
        if running is None:
            return
        what = "aborted" if isinstance(error, KeyboardInterrupt) else f"failed: {type(error).__name__}: {error}"
        seg = recover_running(self._checkpoints, running, f"the segment {what}; rows kept up to its last checkpoint")
        if seg is None:
            abandon_segment(self._checkpoints, self.results)
            write_header(self.out_dir, self.results)
        else:
            append_segment(self.out_dir, self.results, seg)
        self._announce_relocation()

    def measure(
        self,
        stages: list[Stage],
        *,
        purpose: str = "run",
        start_rps: float = 0.0,
        abort_when: Callable[[LiveSnapshot], bool] | None = None,
        title: str | None = None,
        append: bool = True,
        flamegraph_stage: int | None = None,
        descending: bool = False,
        due_s: FloatArray | None = None,
        arrival: str | None = None,
        generator_extra: dict[str, Any] | None = None,
        payload_index: npt.NDArray[np.int64] | None = None,
    ) -> Segment:
        """Run an open-loop segment, append it to the folder (unless ``append`` is False: the caller
        does) and return it.  If it fails, the rows it checkpointed are appended before the error
        propagates.  ``flamegraph_stage`` (0-based, in ``stages``): py-spy records the server during
        that stage's hold (the observer's ``flamegraph`` options).  ``descending``: falling targets
        allowed (``find --hysteresis``'s step-down).  ``due_s``/``arrival``: send at these due times (a
        replayed trace, ``run_segment``); ``generator_extra`` is added to the segment's generator block."""
        index = len(self.results.segments)
        self._started(index, purpose, stages, title or purpose)
        # the cap is known before the load starts: in the running segment's header, a segment rebuilt from
        # its checkpoints (the run never returned its own figures) still says what it ran with
        cap = planned_inflight(self.prepared, self.config.load, stages, start_rps, due_s)
        checkpoint = self._begin(index, purpose, stages, start_rps, arrival=arrival, max_inflight=cap)
        self._mark(f"start {index}")
        flame = self._flame_begin(index, stages, start_rps, flamegraph_stage)
        try:
            seg = run_segment(
                self.prepared,
                stages,
                self.config.load,
                index=index,
                purpose=purpose,
                on_snapshot=self._snap(),
                stop_event=self.stop,
                seed_offset=index,
                start_rps=start_rps,
                abort_when=abort_when,
                checkpoint=checkpoint,
                fleet=self.fleet,
                descending=descending,
                due_s=due_s,
                arrival=arrival,
                payload_index=payload_index,
            )
        except BaseException as e:
            self._mark(f"end {index}")
            self._flame_end(flame, None)
            self._salvage(e)
            raise
        self._mark(f"end {index}")
        self._flame_end(flame, seg)
        if generator_extra:
            seg.generator.update(generator_extra)
        return self._finish(seg, append)

    def flamegraph_not_recorded(self, why: str) -> None:
        """Record in the header that the flame graph asked for was not recorded, and why."""
        self.results.header["flamegraph"] = {"error": why}
        write_header(self.out_dir, self.results)
        say(self.on_event, f"flame graph: {why}", "warning")

    def _flame_begin(
        self, index: int, stages: list[Stage], start_rps: float, stage: int | None
    ) -> dict[str, Any] | None:
        """Ask the observer to run py-spy over the hold of ``stages[stage]`` (None: nothing asked)."""
        obs = self.observer
        if stage is None or obs is None or obs.options.flamegraph is None:
            return None
        fopts = obs.options.flamegraph
        span = spans(stages, start_rps)[stage]
        py_spy = find_py_spy()
        if not obs.options.server_pids or py_spy is None:
            self.flamegraph_not_recorded("no server pid or no py-spy (checked before the run)")
            return None
        pid = obs.options.server_pids[0]
        output = self.out_dir / SPEEDSCOPE_FILE
        output.unlink(missing_ok=True)
        load = self.config.load  # the generator's clock starts this much later (about, with Ray's clock round trips)
        lead = load.ray.lead_s if load.ray is not None else start_lead_s(load.procs)
        # py-spy takes whole seconds: the hold's, rounded down (never past it)
        duration = float(max(1, math.floor(span.end_s - span.hold_start_s + 1e-6)))
        cmd = record_command(py_spy, pid, output, duration, fopts.rate_hz, fopts.native, fopts.nonblocking)
        request = {
            "command": cmd,
            "start_at_mono": time.monotonic() + lead + span.hold_start_s,
            "duration_s": duration,
            "output": str(output),
        }
        block: dict[str, Any] = {
            **fopts.describe(),  # native, rate_hz, nonblocking (its "stage" is replaced below)
            "segment": index,
            "stage": stage,  # 0-based, in the segment
            "target_rps": span.stage.target_rps,
            "pid": pid,
            "command": " ".join(["py-spy", *cmd[1:]]),
            "planned_s": round(duration, 3),
        }
        if not obs.flame_start(request):
            block["error"] = "the observer process did not take the request: nothing was recorded"
            self.results.header["flamegraph"] = block
            write_header(self.out_dir, self.results)
            return None
        say(self.on_event, f"flame graph: py-spy records pid {pid} (and its children) during this stage's hold")
        return block

    def _flame_end(self, block: dict[str, Any] | None, seg: Segment | None) -> None:
        """Stop py-spy, and record what it recorded (and the top functions) in the header."""
        if block is None or self.observer is None:
            return
        got = self.observer.flame_stop()
        t0 = seg.generator.get("t0_monotonic") if seg is not None else None
        started, stopped = got.get("started_mono"), got.get("stopped_mono")
        if isinstance(t0, (int, float)) and isinstance(started, (int, float)) and isinstance(stopped, (int, float)):
            block["from_s"] = round(started - t0, 3)  # on the segment's run clock
            block["to_s"] = round(stopped - t0, 3)
        if isinstance(started, (int, float)) and isinstance(stopped, (int, float)):
            block["seconds"] = round(stopped - started, 3)
        block["error"] = got.get("error")
        block["cpus"] = got.get("cpus")  # where py-spy ran: off the server's CPUs when it has spare ones
        log = self.out_dir / LOG_FILE
        block["log"] = LOG_FILE if log.exists() else None
        if log.exists():  # py-spy's own count, and the samples it could not read
            _, block["errors"] = py_spy_counts(log.read_text(errors="replace"))
        path = self.out_dir / SPEEDSCOPE_FILE
        block["speedscope"] = None
        if got.get("written") and path.exists():
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                block["error"] = block["error"] or f"py-spy's speedscope file could not be read: {e}"
            else:
                block["speedscope"] = SPEEDSCOPE_FILE
                block["samples"] = sample_count(doc)
                block["profiles"] = profiles_seen(doc)
                block["top"] = top_functions(doc)
                if not block["samples"]:
                    block["error"] = block["error"] or "py-spy recorded no sample of a running Python stack"
        self.results.header["flamegraph"] = block
        write_header(self.out_dir, self.results)
        if block["error"]:
            say(self.on_event, f"flame graph: {block['error']}", "warning")

    def measure_closed(self, options: ClosedLoopOptions, title: str = "closed loop") -> Segment:
        """Run a closed loop (users that wait for their answers), append it and return it."""
        if self.prepared.mix is not None:
            raise PlanError(
                "a model mix draws each request's model on an open-loop schedule (--stage), not a closed loop"
            )
        index = len(self.results.segments)
        stages = [Stage(1.0, 0.0, options.duration_s)]  # the real target (the achieved rate) is known at the end
        self._started(index, PURPOSE, stages, title, users=options.users, duration_s=options.duration_s)
        checkpoint = self._begin(index, PURPOSE, stages, arrival=ARRIVAL, seed=0)
        self._mark(f"start {index}")
        try:
            seg = closed_loop_segment(
                self.prepared.builder,
                options,
                index=index,
                on_snapshot=self._snap(),
                stop_event=self.stop,
                checkpoint=checkpoint,
            )
        except BaseException as e:
            self._mark(f"end {index}")
            self._salvage(e)
            raise
        self._mark(f"end {index}")
        return self._finish(seg)


#: what a target that went away raises once measuring has started: a probe (REST control calls), or a
#: segment's first connections (either protocol: ``TargetConnectFailed``, a ``TargetUnreachable``);
#: callers record it as the target lost, not bad input.  Not any ``ConnectionError``: a broken pipe to
#: one of satpoint's own processes is not the target going away
LOST_ERRORS: tuple[type[Exception], ...] = (TargetUnreachable,)

#: memory one scheduled request needs at the peak of a segment (due times, record columns, the
#: dispatcher's copy of the due times, checkpoint flags, merging the shards, writing the segment and its
#: summary): about 160 bytes per row, measured with tracemalloc over 2 million rows
BYTES_PER_ROW = 160


def check_plan_fits(stages: list[Stage], start_rps: float = 0.0, *, descending: bool = False) -> None:
    """Refuse, before anything starts, a plan whose rows would not fit in the memory available."""
    check_rows_fit(RateCurve(stages, start_rps, descending=descending).total)


def check_rows_fit(rows: float) -> None:
    """Refuse, before anything starts, a schedule of ``rows`` requests that would not fit in memory."""
    need = rows * BYTES_PER_ROW
    available = psutil.virtual_memory().available
    if need > 0.8 * available:
        raise PlanError(
            f"the plan schedules about {rows:,.0f} requests; their rows need about {need / 1e9:,.1f} GB of "
            f"memory and {available / 1e9:,.1f} GB is available: shorten the holds, lower the rates or "
            "split the plan into several runs"
        )
