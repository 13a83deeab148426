"""Keep-alive races against the embedded MLServer: its main (uvicorn) process paused now and then.

Starts the embedded MLServer (pinned to core 0), runs a profile-like segment (50/80/90/100 % of
``--rate``, ``--hold`` s each, generator on core 1) and meanwhile pauses MLServer's main process with
SIGSTOP/SIGCONT, as a busy core or a long GC pause does.  ``--mode periodic`` pauses 0.3 s every 4.85 s
(+0.3), so the connections the client digs out of its pool during one pause were last used 5.15 s
earlier, just past uvicorn's 5 s keep-alive; ``rare`` pauses 0.05-0.4 s every 2-8 s; ``short`` pauses
20-100 ms every 0.2-1 s.  Prints each stage's errors and retries, and the pool's report.

    PYTHONPATH=src python benchmarks/keepalive_mlserver.py --mode periodic --rate 200 --hold 10

Loopback only; bounded (four stages plus MLServer's start); the server is always resumed and stopped.
Results (2 cores, shared VM): before fix/transport 3.6-3.8 % ``conn_reset`` in every stage with
``periodic`` (29, 48, 54, 61 per stage: each one "failing"), none with ``rare`` or ``short``; after it,
none in any mode (the pool closes idle connections after 1.5 s, long before uvicorn's 5 s).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import threading
import time

from satpoint.config import LoadOptions
from satpoint.endpoints.prepare import prepare
from satpoint.metrics.stats import stage_metrics
from satpoint.plan import Stage, spans
from satpoint.procedures.session import run_segment
from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget


def pauser(pid: int, mode: str, stop: threading.Event) -> None:
    rng = random.Random(1)
    while not stop.is_set():
        if mode == "periodic":
            gap, pause = 4.85, 0.3
        elif mode == "rare":
            gap, pause = rng.uniform(2.0, 8.0), rng.uniform(0.05, 0.4)
        else:
            gap, pause = rng.uniform(0.2, 1.0), rng.uniform(0.02, 0.1)
        if stop.wait(gap):
            break
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(pause)
        finally:
            os.kill(pid, signal.SIGCONT)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("periodic", "rare", "short"), default="periodic")
    p.add_argument("--rate", type=float, default=200.0, help="100 %% of the profile, rps")
    p.add_argument("--hold", type=float, default=10.0)
    args = p.parse_args()
    two = len(os.sched_getaffinity(0)) >= 2
    with MLServerTarget(MLServerSettings(cpus=(0,) if two else None)) as server:
        target = prepare(server.target("rest"), 256)
        stop = threading.Event()
        th = threading.Thread(target=pauser, args=(server.pid, args.mode, stop), daemon=True)
        th.start()
        try:
            stages = [Stage(args.rate * f, 2.0, args.hold) for f in (0.5, 0.8, 0.9, 1.0)]
            load = LoadOptions(max_inflight=256, drain_s=5.0, generator_cpus=(1,) if two else None)
            seg = run_segment(target, stages, load, purpose="profile")
        finally:
            stop.set()
            th.join(timeout=10.0)
            os.kill(server.pid, signal.SIGCONT)
    for sp in spans(seg.stages):
        m = stage_metrics(seg.records, sp)
        print(f"{m.target_rps:7.1f} rps: error rate {m.error_rate:.2%} {m.errors} retries {m.retries}")
    print("transport:", seg.generator.get("transport"))


if __name__ == "__main__":
    main()
