"""Does MLServer stay slow after an overload? (benchmarks/RESULTS.md, "One server, one answer")

One embedded MLServer (iris, parallel_workers=1, core 0; generator on core 1): hold LOW_RPS, overload it at
1 100 rps, hold LOW_RPS again 2 s and 20 s later, overload again, hold LOW_RPS 2 s later; print each hold's
verdict, throughput, p50/p99, server cores and server CPU per request.

Usage: flock /tmp/satpoint-heavy.lock python benchmarks/mlserver_after_overload.py OUT_DIR [LOW_RPS]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from satpoint import api
from satpoint.config import LoadOptions, ObserveOptions
from satpoint.servers.mlserver.server import MLServerTarget
from satpoint.servers.mlserver.settings import MLServerSettings


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    low = float(sys.argv[2]) if len(sys.argv) > 2 else 450.0
    with MLServerTarget(MLServerSettings(cpus=(0,))) as srv:
        target = srv.target("rest")
        load = LoadOptions(drain_s=3.0, generator_cpus=(1,), timeout_s=10.0)
        observe = ObserveOptions(server_pids=(srv.pid,), metrics_urls=(srv.metrics_url,))

        def hold(name: str, stages: list[str], pause_s: float = 0.0) -> None:
            time.sleep(pause_s)
            summary = api.run(target, stages, load=load, out=out / name, html=False, observe=observe).summary
            for st in summary.model_dump()["stages"]:
                server = st.get("server") or {}
                cores = (server.get("cpu_cores") or {}).get("mean")
                lat = st["latency_ms"]
                print(
                    name, st["target_rps"], st["verdict"], round(st["throughput_rps"], 1), lat["p50"], lat["p99"],
                    cores, server.get("cpu_us_per_request"), flush=True,
                )  # fmt: skip

        hold("a-low", [f"{low}:2:10"])
        hold("b-over", ["1100:1:4"], 2)
        hold("c-low-2s", [f"{low}:2:10"], 2)
        hold("d-low-20s", [f"{low}:2:10"], 20)
        hold("e-over", ["1100:1:4"], 2)
        hold("f-low-2s", [f"{low}:2:10"], 2)


if __name__ == "__main__":
    main()
