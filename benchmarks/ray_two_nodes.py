"""`--ray` on a two-node Ray cluster on this machine, against `--procs 2`, and a killed actor.

Starts `satpoint sim` (pinned to ``--server-cpu``), a ``ray.cluster_utils.Cluster`` of two nodes (one CPU
each; its processes inherit this script's CPU affinity: run the script under ``taskset``), then:

1. the same plan, alternately with ``--procs 2`` and with ``--ray ADDRESS --ray-hosts 2`` (``--repeats``
   times each), and prints the stage figures of every run and their medians side by side, with the
   start skew between the two hosts (one machine: both share CLOCK_MONOTONIC, so it is measured);
2. a ``--ray`` run whose second actor is killed (``kill -9`` of its process) two seconds into the hold,
   then what the results folder holds, and which Ray actors, placement groups and processes are left
   while the cluster still runs and after it is shut down.

    taskset -c 1 python benchmarks/ray_two_nodes.py --server-cpu 0 --rate 2000 --hold 10 --repeats 3

Every process it starts is stopped by its id; load goes to 127.0.0.1 only.
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

import psutil

SRC = str(Path(__file__).resolve().parents[1] / "src")
#: what Ray's own processes have in their command lines (its daemons, workers and actors)
RAY_PROCESS_MARKS = (
    "raylet",
    "gcs_server",
    "ray::",
    "default_worker.py",
    "ray/_private",
    "ray/dashboard",
    "ray/autoscaler",
)


def satpoint_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "satpoint", *args]


def ray_pids() -> dict[int, str]:
    out = {}
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if p.pid != os.getpid() and any(k in cmd for k in RAY_PROCESS_MARKS):
            out[p.pid] = cmd[:110]
    return out


def figures(out: Path) -> dict[str, Any]:
    s = json.loads((out / "summary.json").read_text())
    (st,) = s["stages"]
    g = s["generator"]
    ray = g.get("ray") or {}
    return {
        "offered_rps": st["offered_rps"],
        "throughput_rps": st["throughput_rps"],
        "p50_ms": st["latency_ms"]["p50"],
        "p90_ms": st["latency_ms"]["p90"],
        "p99_ms": st["latency_ms"]["p99"],
        "max_ms": st["latency_ms"]["max"],
        "lag_p99_ms": st["generator_lag_ms"]["p99"],
        "late_pct": 100 * st["late_fraction"],
        "cpu_us_per_request": g["cpu_us_per_request"],
        "requests": g["requests"],
        "verdict": st["verdict"],
        "start_skew_us": None if ray.get("start_skew_max_s") is None else ray["start_skew_max_s"] * 1e6,
        "skew_bound_us": None if ray.get("start_skew_bound_max_s") is None else ray["start_skew_bound_max_s"] * 1e6,
        "host_cpu_us": [h["cpu_us_per_request"] for h in ray.get("hosts", [])],
        "offsets_us": [round((h.get("clock_offset_s") or 0) * 1e6, 1) for h in ray.get("hosts", [])],
    }


def run(cmd: list[str], env: dict[str, str]) -> None:
    print("$", " ".join(cmd[2:]), flush=True)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode not in (0, 1):
        raise SystemExit(f"exit {r.returncode}: {r.stdout[-2000:]} {r.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--rate", type=float, default=2000)
    ap.add_argument("--hold", type=float, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--port", type=int, default=18420)
    ap.add_argument("--skip-kill", action="store_true")
    ap.add_argument(
        "--generator-cpus",
        help="pin the generator processes (--generator-cpus of both kinds of run); Ray's daemons and the "
        "driver then stay where this script runs",
    )
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("RAY_ADDRESS", None)
    os.environ["PYTHONPATH"] = SRC  # the cluster's workers import this satpoint
    before = ray_pids()
    print(f"Ray-related processes before: {len(before)}")
    work = Path(tempfile.mkdtemp(prefix="ray-two-nodes-"))
    sim = subprocess.Popen(
        [
            "taskset",
            "-c",
            str(a.server_cpu),
            *satpoint_cmd("sim", "--port", str(a.port), "--slots", "64", "--service-ms", "2"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import ray
    from ray.cluster_utils import Cluster

    cluster = None
    try:
        time.sleep(2)
        t = time.monotonic()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        print(f"two-node cluster at {cluster.address} up in {time.monotonic() - t:.1f} s", flush=True)
        url = f"http://127.0.0.1:{a.port}"
        plan = ["-s", f"{a.rate:g}:2:{a.hold:g}"]
        common = ["run", "-u", url, "-m", "sim", *plan, "--no-html", "--timeout", "5", "--drain", "2"]
        if a.generator_cpus:
            common += ["--generator-cpus", a.generator_cpus]
        rows: dict[str, list[dict[str, Any]]] = {"procs2": [], "ray2": []}
        for i in range(a.repeats):
            for kind in ("procs2", "ray2"):
                out = work / f"{kind}-{i}"
                extra = ["--procs", "2"] if kind == "procs2" else ["--ray", cluster.address, "--ray-hosts", "2"]
                run(satpoint_cmd(*common, *extra, "--out", str(out)), env)
                rows[kind].append(figures(out))
                print(f"  {kind} #{i}: {json.dumps(rows[kind][-1])}", flush=True)
        print("\nmedians (same plan, alternating runs):")
        keys = [k for k in rows["procs2"][0] if isinstance(rows["procs2"][0][k], (int, float))]
        print(f"{'figure':22} {'--procs 2':>12} {'--ray (2 hosts)':>16}")
        for k in keys:
            med = []
            for kind in ("procs2", "ray2"):
                vals = [r[k] for r in rows[kind] if isinstance(r[k], (int, float))]
                med.append(f"{statistics.median(vals):.4g}" if vals else "-")
            print(f"{k:22} {med[0]:>12} {med[1]:>16}")
        skews = [r["start_skew_us"] for r in rows["ray2"]]
        print(f"start skew between the two hosts, µs (each run): {skews}")
        if not a.skip_kill:
            kill_run(cluster.address, common, work, env)
        ray.init(address=cluster.address, log_to_driver=False)
        from ray._private.state import state

        alive = [x["Name"] for x in state.actor_table(None).values() if x["State"] != "DEAD"]
        groups = [g["state"] for g in ray.util.placement_group_table().values()]
        print(f"\nwhile the cluster still runs: live actors {alive}, placement groups {groups}")
        ray.shutdown()
    finally:
        if cluster is not None:
            cluster.shutdown()
        sim.send_signal(signal.SIGTERM)
        sim.wait(timeout=10)
    time.sleep(2)
    left = {p: c for p, c in ray_pids().items() if p not in before}
    print(f"Ray-related processes after, not there before: {left or 'none'}")
    print(f"results under {work}")


def kill_run(address: str, common: list[str], work: Path, env: dict[str, str]) -> None:
    out = work / "killed"
    cmd = satpoint_cmd(*common, "--ray", address, "--ray-hosts", "2", "--out", str(out))
    print("\n$", " ".join(cmd[2:]), "   (host 1's actor killed 2 s into the hold)", flush=True)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    killed = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if killed is None and "(hold," in line and "t=" in line:
            secs = float(line.split("t=")[1].split("s")[0])
            if secs > 4.0:  # 2 s ramp + 2 s of hold
                actors = [
                    p for p in psutil.process_iter(["cmdline"]) if "ray::HostActor" in " ".join(p.info["cmdline"] or [])
                ]
                actors.sort(key=lambda p: p.create_time())
                victim = actors[-1]
                kids = [c.pid for c in victim.children(recursive=True)]
                os.kill(victim.pid, signal.SIGKILL)
                killed = (victim.pid, kids)
                print(f"  killed actor pid {victim.pid} (its generator processes: {kids})", flush=True)
    code = proc.wait(timeout=120)
    print(f"  exit code {code}")
    print("".join(ln for ln in lines if "lost" in ln or "verdict" in ln or "generator_limited" in ln or "WARN" in ln))
    s = json.loads((out / "summary.json").read_text())
    (st,) = s["stages"]
    r = json.loads((out / "results.json").read_text())
    hosts = r["segments"][0]["generator"]["ray"]["hosts"]
    print(
        f"  rows kept: {s['generator']['requests']} (host requests {[h['requests'] for h in hosts]}, planned "
        f"{[h['rows_planned'] for h in hosts]})"
    )
    print(f"  stage verdict: {st['verdict']}: {st['reasons']}")
    print(f"  warnings: {s['warnings']}")
    if killed is not None:
        still = [k for k in killed[1] if psutil.pid_exists(k)]
        print(f"  the killed actor's generator processes still running: {still or 'none'}")


if __name__ == "__main__":
    main()
