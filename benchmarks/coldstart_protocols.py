"""Cold starts over REST and over gRPC against the same embedded MLServer: the repository API's unload and
load times (``/v2/repository/...`` against ``RepositoryModelUnload``/``RepositoryModelLoad``), readiness
polling, the first and warm inferences, each protocol measured by ``satpoint coldstart`` itself.

Starts one embedded MLServer with ``--demo-models`` copies of the iris model (pinned to all CPUs but the last;
this script to the last), then runs ``coldstart`` against its REST URL and its gRPC address in turn,
``--pairs`` times, alternating which protocol goes first; each run has ``--repeats`` rounds over every model.
Prints one line per run and the pooled percentiles per protocol; ``--json`` writes every run's summary block.

    PYTHONPATH=src python benchmarks/coldstart_protocols.py --demo-models 3 --repeats 10 --pairs 3

Loopback only; bounded (each call's timeout, ``--during-rps`` 0 by default: only the repository calls and
the inferences); the server is stopped at the end.  Run it alone (under the heavy lock).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from satpoint.api import split_cpus
from satpoint.endpoints.spec import Target
from satpoint.experiments.coldstart import ColdStartOptions, run_coldstart
from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget

KEYS = ("unload_ms", "absent_wait_ms", "load_ms", "first_infer_ms", "warm_infer_ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo-models", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--during-rps", type=float, default=0.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    server_cpus, own = split_cpus()
    if own:
        os.sched_setaffinity(0, own)
    runs: list[dict[str, Any]] = []
    pooled: dict[str, dict[str, list[float]]] = {"rest": {k: [] for k in KEYS}, "grpc": {k: [] for k in KEYS}}
    settings = MLServerSettings(demo_model="iris", demo_models=args.demo_models, cpus=server_cpus)
    with MLServerTarget(settings) as server, tempfile.TemporaryDirectory() as tmp:
        urls = {"rest": server.rest_url, "grpc": f"grpc://{server.grpc_address}"}
        for pair in range(args.pairs):
            order = ("rest", "grpc") if pair % 2 == 0 else ("grpc", "rest")
            for proto in order:
                target = Target(url=urls[proto], model=server.model_names[0], protocol=proto)
                opts = ColdStartOptions(repeats=args.repeats, during_rps=args.during_rps, warm_requests=5)
                out = Path(tmp) / f"{pair}-{proto}"
                result = run_coldstart(target, opts, out)
                reps = json.loads((out / "coldstart.json").read_text())["repetitions"]
                cold = result.summary["coldstart"]
                for key in KEYS:
                    pooled[proto][key] += [
                        r[key.replace("_ms", "_s")] * 1000 for r in reps if r[key.replace("_ms", "_s")] is not None
                    ]
                line = "  ".join(f"{k} p50 {cold[k]['p50']:.2f}" for k in KEYS)
                print(
                    f"pair {pair} {proto:4s} ({cold['repetitions']} reps, {cold['load_failures']} failed): {line}",
                    flush=True,
                )
                runs.append({"pair": pair, "protocol": proto, "coldstart": cold})
    print("\npooled (ms): protocol, measure, n, p50, p90, p99, max")
    for proto, values in pooled.items():
        for key, vals in values.items():
            a = np.asarray(vals)
            if len(a):
                q = np.percentile(a, [50, 90, 99])
                print(f"{proto:4s} {key:15s} {len(a):4d} {q[0]:8.2f} {q[1]:8.2f} {q[2]:8.2f} {a.max():8.2f}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
