"""A 10-million-row trace: written, read, its busiest window found and its schedule streamed (memory measured).

    python benchmarks/trace_10m.py gen /tmp/trace10m.csv          # 10 000 000 rows over 12 h (a day's shape)
    /usr/bin/time -v python benchmarks/trace_10m.py plan /tmp/trace10m.csv 2m   # scan + busiest 2 min + slice
    /usr/bin/time -v python benchmarks/trace_10m.py plan /tmp/trace10m.csv      # the whole schedule (10 M due times)

``gen``: epoch seconds with millisecond digits, an inhomogeneous Poisson process whose rate follows half a
sine wave from 80 to 380 rps and back over 12 hours (mean ~231 rps), seed 1, written in blocks of 10^6
rows.  ``plan`` runs ``trace_replay.plan_trace`` (the scan, the busiest window when asked, the slice's read
and due times, as ``run --trace`` does before sending) and prints its time, the rows kept and the peak RSS.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from pathlib import Path

import numpy as np


def gen(path: str, n: int = 10_000_000, hours: float = 12.0) -> None:
    rng = np.random.default_rng(1)
    span = hours * 3600.0
    lo, hi = 80.0, 380.0
    # cumulative rate Lambda(t) = lo t + (hi - lo) span / pi (1 - cos(pi t / span)); invert on a 1 s grid
    grid = np.arange(0.0, span + 1.0)
    cum = lo * grid + (hi - lo) * span / math.pi * (1 - np.cos(math.pi * grid / span))
    scale = n / cum[-1]
    t0 = 1_796_334_000.0
    block = 1_000_000
    with open(path, "w") as f:
        f.write("timestamp\n")
        done = 0
        while done < n:
            m = min(block, n - done)
            u = np.sort(rng.uniform(done, done + m, m))  # unit-rate epochs, blockwise (stays sorted)
            t = np.interp(u / scale, cum, grid)
            f.write("\n".join(f"{x:.3f}" for x in (t0 + t).tolist()) + "\n")
            done += m
    print(f"{path}: {n:,} rows over {hours:g} h ({n / span:.1f} rps mean)")


def plan(path: str, peak: str | None) -> None:
    from satpoint.procedures.trace_replay import plan_trace
    from satpoint.traffic.trace_plan import TraceOptions

    t = time.perf_counter()
    sched = plan_trace(TraceOptions(Path(path), peak=peak), on_event=lambda e: print(getattr(e, "text", e)))
    dt = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"plan: {len(sched.due_s):,} due times in {len(sched.stages)} stages, {dt:.1f} s, max RSS {rss:.0f} MiB")


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    else:
        plan(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
