"""How fast the generator's machine ran, measured by a fixed reference workload before each segment.

A local server's figures are the machine's as much as the version's.  Other processes on the machine show
as other work (``analysis.server.machine_busy``); a machine that runs slower with nothing to show for it does not:
a neighbour VM on the same host, a busy hyperthread sibling outside this VM, a lower clock.  Two runs of one
unchanged server measured 16 % apart in service time that way, with the generator's CPU per request 1.3x
higher at every rate (benchmarks/RESULTS.md).  So before each segment, on the generator's CPUs, the generator
times a fixed interpreter-bound workload (dictionary and integer work, like its own bookkeeping) ``REPS``
times and records the fastest in microseconds (a slower repetition was preempted; ``reference_us`` in the
segment's generator block): the same work on both sides of a ``satpoint diff``, whatever the server version,
so a ratio far from 1 means the machine changed, not the server (``analysis.server.machine_speed``).  It costs
about 10 ms per segment.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

#: timed repetitions of the workload; the fastest of 25 is steady within a few percent (a run's one segment
#: timed 1.12x slower than its base's by the median of 15 on a shared machine)
REPS = 25
#: loop length of one repetition: about 0.3-0.5 ms on the machines measured
_N = 4000


def _work() -> int:
    table: dict[int, int] = {}
    acc = 0
    for i in range(_N):
        table[i & 255] = i
        acc += (i * 7) % 13
    return acc + len(table)


def reference_us(reps: int = REPS, cpus: Sequence[int] | None = None) -> float:
    """The fastest wall time of one repetition of the reference workload, in microseconds, timed on ``cpus``
    (``--generator-cpus``: where the generator runs, not the server's cores; None: where the caller runs)."""
    before = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        times = []
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            _work()
            times.append(time.perf_counter_ns() - t0)
    finally:
        os.sched_setaffinity(0, before)
    return round(min(times) / 1e3, 2)
