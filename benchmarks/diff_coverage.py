"""Coverage and power of ``satpoint diff``'s interval of the change (offline, seeded, bounded).

Coverage: A/A pairs of an M/M/1 at rho = 0.9 (Lindley's recursion, unit mean service), share of pairs whose
95 % interval of the change of p50/p90/p99 holds 0.  Power: every request 1.5 x the tolerance slower on an
M/M/1 at rho = 0.5 through the whole diff (Holm over its metrics).  Variants: the block rule as shipped,
``--max-blocks`` (the most blocks a stage is cut into), ``--fixed-rows`` (every block that many rows: one
second at the rate the rows stand for, the rule before issue 33), ``--blocks-df`` (Student's t with blocks − 1
degrees of freedom, without the kurtosis of the block means).

    python benchmarks/diff_coverage.py --pairs 200 --rows 60000 [--max-blocks 12] [--fixed-rows 90] [--blocks-df]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "analysis" / "diff"))
from test_diff_stats import mm1, power_by_metric

from satpoint.analysis.diff import bootstrap as db


def coverage(pairs: int, rows: int, seed: int) -> tuple[dict[float, float], float]:
    rng = np.random.default_rng(seed)
    qs = (0.5, 0.9, 0.99)
    hit: dict[float, list[bool]] = {q: [] for q in qs}
    lengths = []
    for t in range(pairs):
        sides = [db.cut([mm1(rows, 0.9, rng)], tails=qs) for _ in range(2)]
        lengths.append(sides[0].lengths[0])
        for q in qs:
            b, n = (db.quantile_estimate(s, q, db.N_BOOT, 2 * t + i) for i, s in enumerate(sides))
            if b.blocks < db.MIN_BLOCKS or n.blocks < db.MIN_BLOCKS:
                continue
            c = db.change_of(b, n, absolute=False)
            hit[q].append(c.low <= 0 <= c.high)
    return {q: round(float(np.mean(v)), 3) if v else float("nan") for q, v in hit.items()}, float(np.median(lengths))


def power(pairs: int, seed: int) -> dict[str, float]:
    return {m: round(p, 3) for m, p in power_by_metric(pairs, np.random.default_rng(seed)).items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--rows", type=int, default=60_000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--max-blocks", type=int, default=None)
    ap.add_argument("--fixed-rows", type=int, default=None)
    ap.add_argument("--power-pairs", type=int, default=0)
    ap.add_argument("--blocks-df", action="store_true", help="blocks - 1 degrees of freedom (no kurtosis)")
    a = ap.parse_args()
    if a.max_blocks:
        db.MAX_BLOCKS = a.max_blocks
    if a.fixed_rows:
        fixed = a.fixed_rows
        db.series_block_rows = lambda x, tails=(): fixed  # type: ignore[assignment]
    if a.blocks_df:
        db.effective_df = lambda blocks, kurtosis=0.0: float(max(blocks, 2) - 1)  # type: ignore[assignment]
    t0 = time.monotonic()
    cov, block = coverage(a.pairs, a.rows, a.seed)
    print(f"coverage {cov} median block {block:.0f} rows ({a.pairs} pairs, {a.rows} rows, seed {a.seed})", flush=True)
    if a.power_pairs:
        print(f"power {power(a.power_pairs, a.seed)} ({a.power_pairs} pairs)", flush=True)
    print(f"{time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
