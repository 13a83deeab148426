"""Runs a load plan against a prepared target and turns it into a results segment."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from satpoint.endpoints.spec import PreparedTarget
from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.live import LiveSnapshot
from satpoint.engine.runner import run_schedule
from satpoint.engine.schedule import due_times
from satpoint.metrics.results import Segment
from satpoint.plan import Arrival, Stage


@dataclass(frozen=True)
class LoadOptions:
    arrival: Arrival = "constant"
    seed: int = 0
    max_inflight: int = 1024
    timeout_s: float = 30.0
    drain_s: float = 10.0
    procs: int = 1
    generator_cpus: tuple[int, ...] | None = None
    warm_connections: int = 16

    def describe(self) -> dict[str, object]:
        return {
            "arrival": self.arrival,
            "seed": self.seed,
            "max_inflight": self.max_inflight,
            "timeout_s": self.timeout_s,
            "drain_s": self.drain_s,
            "procs": self.procs,
            "generator_cpus": list(self.generator_cpus) if self.generator_cpus else None,
        }


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
) -> Segment:
    seed = opts.seed + seed_offset
    due = due_times(stages, opts.arrival, seed, start_rps)
    dopts = DispatchOptions(
        timeout_s=opts.timeout_s,
        drain_s=min(opts.drain_s, opts.timeout_s),
        warm_connections=opts.warm_connections,
        payload_count=len(target.payload_docs),
    )
    out = run_schedule(
        due,
        target.builder,
        dopts,
        procs=opts.procs,
        on_snapshot=on_snapshot,
        stop_event=stop_event,
        cpus=list(opts.generator_cpus) if opts.generator_cpus else None,
        abort_when=abort_when,
    )
    n = len(out.records)
    generator = {
        "procs": opts.procs,
        "cpu_s": round(out.generator_cpu_s, 4),
        "cpu_us_per_request": round(out.generator_cpu_s / n * 1e6, 2) if n else None,
        "wall_s": round(max((s.wall_s for s in out.shards), default=0.0), 4),
    }
    return Segment(
        index=index,
        purpose=purpose,
        stages=list(stages),
        arrival=opts.arrival,
        seed=seed,
        started_unix=out.started_unix,
        records=out.records,
        generator=generator,
        interrupted=out.interrupted,
        stopped="interrupted" if out.interrupted else "overload" if out.overloaded else None,
        notes=out.notes,
        start_rps=start_rps,
    )
