"""A/B of the gRPC generator's cost between two versions of satpoint, interleaved on the same machine.

One fixed-answer C++ gRPC server (``grpc_bench.py``'s, compiled once into ``--build-dir``) pinned to core 0
serves both versions; for every pair and every rate, each version's own ``grpc_bench.py --child --client
wire`` (the real ``OpenLoopDispatcher`` over ``GrpcPool``, one connection, constant rate, ``--duration`` s)
runs pinned to core 1, old then new (``--new-first``: new then old).  Each child puts its own checkout's
``src`` first on ``sys.path``, so ``--old-bench OLD/benchmarks/grpc_bench.py`` measures OLD's code.

Prints per-run figures, then per rate the medians and ranges of CPU per request (client user+system CPU
over the window 0.5 s after the start to the last due time, per request sent) and of the p99 send lag,
and the new/old ratio per pair; raw results go to ``--json``.  ``--hog DUTY`` runs a busy loop pinned to
core 1 beside every child (busy ``DUTY`` of every ``--hog-period`` s, sleeping the rest): the generator's
core shared with another process.

    python benchmarks/ab_grpc.py --old-bench /tmp/satpoint-old/benchmarks/grpc_bench.py --pairs 5 --rates 5000

Loopback only; each child is bounded (``--duration`` + 40 s); every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import grpc_bench  # noqa: E402  (beside this script)

HOG = """
import sys, time
busy, period = float(sys.argv[1]), float(sys.argv[2])
while True:
    t = time.monotonic()
    while time.monotonic() - t < busy * period:
        pass
    if busy < 1.0:
        time.sleep((1.0 - busy) * period)
"""


def start_server(build_dir: Path) -> tuple[subprocess.Popen[str], int]:
    exe = build_dir / "grpc_fixed_server"
    if not exe.exists():
        build_dir.mkdir(parents=True, exist_ok=True)
        grpc_bench.build_cpp(build_dir)
    _, resp = grpc_bench._messages()
    proc = subprocess.Popen(["taskset", "-c", "0", str(exe), "0", resp.hex()], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening"):
        grpc_bench.stop(proc)
        raise SystemExit(f"server did not start: {line!r}")
    return proc, int(line.split()[1])


def one(bench: str, port: int, rate: float, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    cmd = ["taskset", "-c", "1", sys.executable, bench, "--child", "--client", "wire", "--port", str(port)]
    cmd += ["--rate", f"{rate:g}", "--duration", f"{args.duration:g}", "--connections", "1", "--inflight", "512"]
    cmd += extra
    hog = None
    if args.hog > 0:
        hog = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", HOG, str(args.hog), str(args.hog_period)])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 40, env=env)
    finally:
        if hog is not None:
            os.kill(hog.pid, signal.SIGKILL)
            hog.wait()
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    res: dict[str, Any] = json.loads(lines[-1][7:])
    res["load1"] = os.getloadavg()[0]
    return res


def med_range(v: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})" if v else "-"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old-bench", required=True, help="the old version's grpc_bench.py")
    p.add_argument("--new-bench", default=str(HERE / "grpc_bench.py"))
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--rates", default="5000")
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--new-first", action="store_true")
    p.add_argument("--hog", type=float, default=0.0, help="busy share of a loop pinned to core 1 (0: none)")
    p.add_argument("--hog-period", type=float, default=0.02)
    p.add_argument("--old-args", default="", help="extra grpc_bench.py --child arguments for the old version")
    p.add_argument("--new-args", default="", help="extra grpc_bench.py --child arguments (e.g. --wake-window-ms 0.5)")
    p.add_argument("--build-dir", default=os.path.join(tempfile.gettempdir(), "satpoint-grpc-fixed-server"))
    p.add_argument("--json", default=None)
    args = p.parse_args()

    rates = [float(r) for r in args.rates.split(",") if r]
    runs: dict[float, list[dict[str, Any]]] = {r: [] for r in rates}
    server, port = start_server(Path(args.build_dir))
    try:
        for i in range(args.pairs):
            for rate in rates:
                order = ("new", "old") if args.new_first else ("old", "new")
                pair: dict[str, Any] = {}
                for v in order:
                    if v == "new":
                        pair[v] = one(args.new_bench, port, rate, args, args.new_args.split())
                    else:
                        pair[v] = one(args.old_bench, port, rate, args, args.old_args.split())
                    time.sleep(0.5)
                runs[rate].append(pair)
                o, n = pair["old"], pair["new"]
                print(
                    f"  pair {i + 1} {rate:>7,.0f} rps: old {o['cpu_us_per_req']:.1f} µs/req p99 lag "
                    f"{o['lag_p99_ms']:.3f} ms | new {n['cpu_us_per_req']:.1f} µs/req p99 lag {n['lag_p99_ms']:.3f} ms"
                    f" | errors {o['errors']}/{n['errors']} load {n['load1']:.2f}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        grpc_bench.stop(server)
    print("| rate | figure | old: median (range) | new: median (range) | new/old per pair: median (range) |")
    print("|---|---|---|---|---|")
    for rate in rates:
        for key, label, fmt in (
            ("cpu_us_per_req", "CPU µs/req", "{:.1f}"),
            ("lag_p99_ms", "p99 send lag ms", "{:.3f}"),
        ):
            o = [pr["old"][key] for pr in runs[rate]]
            n = [pr["new"][key] for pr in runs[rate]]
            rs = [b / a for a, b in zip(o, n, strict=True) if a]
            print(f"| {rate:,.0f} | {label} | {med_range(o, fmt)} | {med_range(n, fmt)} | {med_range(rs, '{:.3f}')} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": {str(k): v for k, v in runs.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
