"""A trace with a 3x burst in the first seconds of every minute, against a server of known capacity.

The trace (``trace_synth``: a flat ``--rate`` rps, ``--burst`` times that for ``--burst-s`` seconds at the
start of every minute) is replayed against ``satpoint sim`` (``--slots`` x ``--service-ms``, constant):

1. ``run --trace --speed S``: each minute's measured p99 beside a FIFO queue simulation of the whole minute
   (the replay's own intended times, ``--slots`` slots holding the sim's constant service time, plus the
   client-side overhead the replay's queue prediction measured), and the summary's own prediction
   (``trace.prediction``: measured service times);
2. the queue model's headroom: the highest speed at which the offline simulation of the same server
   (``servers.sim.offline``), judged by the same verdict rules (``build_summary``), holds every minute;
3. ``find --trace``'s headroom against the sim.

    python benchmarks/trace_burst_headroom.py --minutes 2 --speed 4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from satpoint.analysis.summary.build import build_summary
from satpoint.config import RunConfig
from satpoint.metrics.results import Results, Segment, append_segment, load_results, new_header, write_header
from satpoint.plan import TRACE_ARRIVAL
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate
from satpoint.servers.sim.process import SimServer
from satpoint.traffic.queue_sim import fifo_sojourn
from satpoint.traffic.trace_plan import TraceOptions, at_speed, build

EPOCH0 = 1_767_225_600.0


def synth(a: argparse.Namespace, path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    import trace_synth  # the project's own generator

    ns = argparse.Namespace(
        minutes=a.minutes, base=a.rate, peak=a.rate, burst=a.burst, burst_s=a.burst_s, every=60.0, seed=a.seed
    )
    t = trace_synth.arrivals(ns)
    path.write_text("timestamp\n" + "".join(f"{EPOCH0 + x:.6f}\n" for x in t))


def offline_stable(due: np.ndarray, stages: list, a: argparse.Namespace, tmp: Path) -> bool:  # type: ignore[type-arg]
    out = tmp / f"offline-{len(list(tmp.iterdir()))}"
    config = {"mode": "open_loop", "rules": {"max_error_rate": 0.01}, "load": {"procs": 1, "max_inflight": 100_000}}
    target = {"url": "http://sim.invalid:8080", "model": "sim", "protocol": "rest"}
    results = Results(new_header(RunConfig.from_header({"kind": "run", "config": config}), target, EPOCH0))
    write_header(out, results)
    rec = simulate(due, SimConfig(slots=a.slots, service_ms=a.service_ms, dist="const", seed=1))
    append_segment(out, results, Segment(0, "run", stages, TRACE_ARRIVAL, 0, EPOCH0, rec))
    return all(s["verdict"] == "stable" for s in build_summary(load_results(out))["stages"])


def model_headroom(path: Path, a: argparse.Namespace, tmp: Path) -> float:
    """The highest speed (to 1 %) at which the offline queue holds every minute."""
    rec = build(TraceOptions(path))
    lo, hi = 0.25, 64.0
    while hi / lo > 1.01:
        mid = (lo * hi) ** 0.5
        s = at_speed(rec, mid, 60.0)
        lo, hi = (mid, hi) if offline_stable(s.due_s, s.stages, a, tmp) else (lo, mid)
    return lo


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--rate", type=float, default=40.0)
    p.add_argument("--burst", type=float, default=3.0)
    p.add_argument("--burst-s", type=float, default=3.0)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--service-ms", type=float, default=10.0)
    p.add_argument("--speed", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget-s", type=float, default=600.0)
    p.add_argument("--start-speed", type=float, default=4.0)
    p.add_argument("--skip-find", action="store_true")
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trace-burst-"))
    path = tmp / "trace.csv"
    synth(a, path)
    (tmp / "offline").mkdir()
    x_model = model_headroom(path, a, tmp / "offline")
    print(f"queue model headroom: X = {x_model:.3f}")
    sm = [sys.executable, "-m", "satpoint"]
    with SimServer(slots=a.slots, service_ms=a.service_ms) as sim:
        run_out = tmp / "run"
        subprocess.run(
            [*sm, "run", "--url", sim.url, "--model", "sim", "--trace", str(path), "--speed", str(a.speed),
             "--server-slots", str(a.slots), "--out", str(run_out), "--no-html"],
            check=False, capture_output=True, timeout=900,
        )  # fmt: skip
        summary = json.loads((run_out / "summary.json").read_text())
        rec = load_results(run_out).segments[0].records
        overhead_s = (summary["trace"].get("prediction") or {}).get("overhead_ms", 0.0) / 1000
        queue = fifo_sojourn(rec.intended, np.full(len(rec), a.service_ms / 1000), a.slots) + overhead_s
        print(f"run --trace at speed {a.speed:g}: minute, measured p99 ms, queue simulation p99 ms, ratio, verdict")
        for st in summary["stages"]:
            sel = (rec.intended >= st["window_start_s"]) & (rec.intended < st["window_end_s"])
            q99 = float(np.percentile(queue[sel], 99)) * 1000
            m99 = st["latency_ms"]["p99"]
            pred = summary["trace"]["prediction"]["stages"][st["index"]]["predicted_ms"]["p99"]
            print(f"  {st['index']}: {m99:.1f} {q99:.1f} {m99 / q99:.3f} {st['verdict']} (prediction {pred:.1f})")
        if a.skip_find:
            return
        find_out = tmp / "find"
        r = subprocess.run(
            [*sm, "find", "--url", sim.url, "--model", "sim", "--trace", str(path), "--budget-s", str(a.budget_s),
             "--start-speed", str(a.start_speed), "--no-profile", "--out", str(find_out), "--no-html"],
            check=False, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        h = json.loads((find_out / "headroom.json").read_text())
        print(f"find --trace (exit {r.returncode}): X = {h['speed']}, bracket {h['bracket']}, ended {h['ended']}, "
              f"confirmed {h['confirmed']}, {len(h['replays'])} replays; ratio to the queue model "
              f"{(h['speed'] or 0) / x_model:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
