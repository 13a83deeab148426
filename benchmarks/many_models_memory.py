"""Memory of the embedded MLServer against the number of models it holds, per ``parallel_workers`` value:
no load, only start, readiness and the process tree's memory (``servers.models.many.tree_memory``).

For each worker count and each model count, starts the embedded MLServer with that many independent
copies of a demo model (``--demo-models``), reads the tree's RSS/PSS once ready and again after
``--settle`` seconds (the later reading is the one fitted), stops it, and prints one line per start and
the least-squares memory per model per worker count: in total, in the main process, and in the other
processes (the parallel workers, plus multiprocessing's resource tracker). A heavy demo model
(``digits-forest``: a random forest of 200 trees, 7.5 MB as joblib) makes the memory per model plain;
``iris`` (a logistic regression of ~1 KB) shows what MLServer itself costs per model.

    PYTHONPATH=src python benchmarks/many_models_memory.py --demo-model digits-forest --counts 1,10,30 --workers 1,2

Loopback only; bounded (each start waits at most ``servers.models.many.ready_timeout_s``); every server
is stopped. Run it alone (under the heavy lock): the copies are trained here first (0.66 s each for the
forest), and memory readings do not need a quiet machine but the start times do.
"""

from __future__ import annotations

import argparse
import json
import time

from satpoint.analysis.models.memory import memory_fit
from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget
from satpoint.servers.models.many import tree_memory


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo-model", default="digits-forest")
    ap.add_argument("--counts", default="1,10,30")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds after readiness before the reading fitted")
    ap.add_argument("--cpus", default="0", help="the server's CPUs")
    ap.add_argument("--json", default=None, help="write every reading to this file")
    args = ap.parse_args()
    cpus = tuple(int(c) for c in args.cpus.split(","))
    readings = []
    for workers in (int(w) for w in args.workers.split(",")):
        for n in (int(c) for c in args.counts.split(",")):
            settings = MLServerSettings(demo_model=args.demo_model, demo_models=n, parallel_workers=workers, cpus=cpus)
            t0 = time.monotonic()
            with MLServerTarget(settings) as server:
                up_s = time.monotonic() - t0
                info = server.info()
                time.sleep(args.settle)
                later = tree_memory(server.pids()) or {}
            procs = later.get("processes") or []
            main_mb = next(p["rss_mb"] for p in procs if p["role"] == "main")
            row = {
                "workers": workers,
                "models": n,
                "train_s": round(info["train_s"] or 0.0, 2),
                "startup_s": round(info["startup_s"] or 0.0, 2),
                "setup_and_start_s": round(up_s, 2),
                "last_loaded_s": info["models"]["load"].get("last_loaded_s"),
                "distinct_artifacts": info["models"]["distinct_artifacts"],
                "rss_mb_at_ready": info["memory_at_ready"]["rss_mb"],
                "rss_mb": later.get("rss_mb"),
                "pss_mb": later.get("pss_mb"),
                "main_rss_mb": main_mb,
                "other_rss_mb": [p["rss_mb"] for p in procs if p["role"] != "main"],
            }
            readings.append(row)
            print(json.dumps(row), flush=True)
    for workers in sorted({r["workers"] for r in readings}):
        rs = [r for r in readings if r["workers"] == workers]
        fits = {
            "total": memory_fit([(r["models"], r["rss_mb"]) for r in rs]),
            "pss": memory_fit([(r["models"], r["pss_mb"]) for r in rs]),
            "main": memory_fit([(r["models"], r["main_rss_mb"]) for r in rs]),
            "others": memory_fit([(r["models"], r["rss_mb"] - r["main_rss_mb"]) for r in rs]),
        }
        for name, fit in fits.items():
            if fit is not None:
                print(
                    f"workers={workers} {name:6s}: {fit['mb_per_model']:.3f} MB per model "
                    f"(± {fit['stderr_mb_per_model'] or 0:.3f}) over {fit['intercept_mb']:.1f} MB, r2 {fit['r2']}"
                )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(readings, fh, indent=2)


if __name__ == "__main__":
    main()
