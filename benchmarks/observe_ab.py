"""A/B: does sampling the server (``--server-pid``: the observer process) change the generator's CPU?

Interleaves runs with the observer off and on (off, on, on, off, off, on, ...) against one ``satpoint
sim`` pinned to core 0, the whole benchmark (generator and observer) pinned to core 1 (``taskset -c 1``;
the observer then competes with the generator for its core: the worst case).  Each run is one stage
(``--rate`` for ``--hold`` s, constant arrivals).  Prints, per mode, the median and range of the
generator's CPU µs per request (``summary.generator.cpu_us_per_request``) and p99 send lag, and how
many server samples the "on" runs took.

    taskset -c 1 python benchmarks/observe_ab.py --pairs 5 --rate 1000 --hold 8

Loopback only; bounded: pairs x 2 x (hold + ~4 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import satpoint
from satpoint.config import LoadOptions, ObserveOptions


def one(sim: satpoint.SimServer, rate: float, hold: float, on: bool, out: Path) -> dict[str, Any]:
    observe = ObserveOptions(server_pids=(sim.pid,)) if on else None
    satpoint.run(
        satpoint.Target(sim.url, "sim"),
        [f"{rate:g}:1:{hold:g}"],
        load=LoadOptions(drain_s=2.0),
        out=out,
        html=False,
        observe=observe,
    )
    s = json.loads((out / "summary.json").read_text())
    st = s["stages"][0]
    return {
        "on": on,
        "cpu_us_per_request": s["generator"]["cpu_us_per_request"],
        "send_lag_p99_ms": st["send_lag_ms"]["p99"],
        "verdict": st["verdict"],
        "server_samples": (s.get("observed") or {}).get("samples", 0),
        "server_cores": (st.get("server") or {}).get("cpu_cores", {}).get("mean"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--hold", type=float, default=8.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    print(f"generator affinity {sorted(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f}")
    rows: list[dict[str, Any]] = []
    with satpoint.SimServer(slots=64, service_ms=1.0, cpus=[0]) as sim, tempfile.TemporaryDirectory() as tmp:
        for k in range(args.pairs):
            order = (False, True) if k % 2 == 0 else (True, False)
            for on in order:
                r = one(sim, args.rate, args.hold, on, Path(tmp) / f"{k}-{int(on)}")
                rows.append(r)
                print(json.dumps(r))
    print(f"\n| sampler | runs | generator CPU µs/request, median (range) | p99 send lag ms, median | server samples |")
    print("| --- | --- | --- | --- | --- |")
    for on in (False, True):
        mine = [r for r in rows if r["on"] == on]
        cpu = [r["cpu_us_per_request"] for r in mine]
        lag = [r["send_lag_p99_ms"] for r in mine]
        print(
            f"| {'on' if on else 'off'} | {len(mine)} | {statistics.median(cpu):.1f} ({min(cpu):.1f}–{max(cpu):.1f}) "
            f"| {statistics.median(lag):.2f} | {statistics.median([r['server_samples'] for r in mine]):.0f} |"
        )
    off = statistics.median(r["cpu_us_per_request"] for r in rows if not r["on"])
    on_ = statistics.median(r["cpu_us_per_request"] for r in rows if r["on"])
    print(f"\nratio on/off of the medians: {on_ / off:.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
