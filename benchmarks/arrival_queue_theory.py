"""What a 4-slot x 10 ms FIFO server (satpoint sim, 400 rps) does with each arrival process, predicted.

For each arrival process and offered rate, the exact due times satpoint sends (``engine.schedule.due_times``,
seed 0, one 10 s hold) go through the discrete-event queue (``traffic.queue_sim``): p50/p99 latency, and
how much the outstanding work at the end of the hold exceeds its start (a queue that a 10 s window sees
growing).  Used to explain the ``sweep --set arrival=...`` figures in benchmarks/RESULTS.md:

    python benchmarks/arrival_queue_theory.py
"""

from __future__ import annotations

import numpy as np

from satpoint.engine.schedule import due_times
from satpoint.plan import Stage
from satpoint.traffic.queue_sim import simulate

SLOTS, SERVICE_S, HOLD_S = 4, 0.010, 10.0


def main() -> None:
    print("arrival     rps   p50 ms   p99 ms   max ms  (10 s hold, seed 0; latency = wait + 10 ms)")
    for arrival in ("constant", "poisson", "gamma:2", "gamma:4"):
        for rps in (200, 280, 320, 360, 380, 400):
            due = due_times([Stage(float(rps), 0.0, HOLD_S)], arrival, seed=0)
            lat = simulate(due, SERVICE_S, SLOTS) * 1e3
            p50, p99, mx = np.percentile(lat, [50, 99, 100])
            print(f"{arrival:9s} {rps:5d} {p50:8.1f} {p99:8.1f} {mx:8.1f}")


if __name__ == "__main__":
    main()
