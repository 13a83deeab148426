"""A seeded synthetic trace: a slow rise and fall, with bursts, as a CSV of epoch-second timestamps.

The rate rises from ``--base`` to ``--peak`` rps and falls back over ``--minutes`` (half a sine wave), and
for ``--burst-s`` seconds every ``--every`` seconds it is ``--burst`` times that.  Arrivals are an
inhomogeneous Poisson process drawn with ``--seed`` (unit-rate epochs mapped through the inverse of the
cumulative rate, on a 1 ms grid).  Used by benchmarks/RESULTS.md ("Real traffic"):

    python benchmarks/trace_synth.py --out /tmp/trace.csv            # 10 min, 20 -> 60 -> 20 rps, 3x bursts
    satpoint run --trace /tmp/trace.csv --speed 2 --url ... --model sim
"""

from __future__ import annotations

import argparse
import math

import numpy as np

#: 2026-01-01T00:00:00Z: the trace's first second
EPOCH0 = 1_767_225_600.0


def rate_curve(t: np.ndarray, a: argparse.Namespace) -> np.ndarray:
    span = a.minutes * 60.0
    slow = a.base + (a.peak - a.base) * np.sin(math.pi * t / span)
    bursting = (t % a.every) < a.burst_s
    return slow * np.where(bursting, a.burst, 1.0)


def arrivals(a: argparse.Namespace) -> np.ndarray:
    dt = 0.001
    t = np.arange(0.0, a.minutes * 60.0, dt)
    cum = np.concatenate(([0.0], np.cumsum(rate_curve(t, a) * dt)))
    grid = np.append(t, t[-1] + dt)
    rng = np.random.default_rng(a.seed)
    n = rng.poisson(cum[-1])
    epochs = np.sort(rng.uniform(0.0, cum[-1], size=n))  # unit-rate Poisson epochs given their count
    out: np.ndarray = np.interp(epochs, cum, grid)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--base", type=float, default=20.0, help="rps at the start and the end")
    p.add_argument("--peak", type=float, default=60.0, help="rps in the middle (before bursts)")
    p.add_argument("--burst", type=float, default=3.0, help="rate factor during a burst")
    p.add_argument("--burst-s", type=float, default=2.0)
    p.add_argument("--every", type=float, default=30.0, help="a burst starts every this many seconds")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    times = arrivals(a) + EPOCH0
    with open(a.out, "w") as f:
        f.write("timestamp\n")
        for v in times:
            f.write(f"{v:.6f}\n")
    print(f"{a.out}: {len(times)} requests over {a.minutes:g} min ({len(times) / (a.minutes * 60):.1f} rps mean)")


if __name__ == "__main__":
    main()
