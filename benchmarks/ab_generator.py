"""A/B of the REST generator's cost between two versions of satpoint, interleaved on the same machine.

Runs each version's own ``benchmarks/generator_bench.py`` (one rate, one repeat, no scan, no wrk)
alternately: A, B, A, B, ... (``--new-first``: B, A, B, A, ...) for ``--pairs`` pairs, so machine
noise hits both alike.  Each call starts its own nginx pinned to core 0 and its generator pinned to
core 1, and stops both by their PIDs.  A is "old" (``--old-bench`` run by ``--old-python``, e.g. a git
worktree of the previous commit installed in its own venv), B is "new" (this checkout's script run by
this Python).

Prints per-pair figures and ratios (new / old) and medians as Markdown; raw results go to ``--json``.

    git worktree add /tmp/satpoint-old 0069e20
    python3 -m venv /tmp/venv-old && /tmp/venv-old/bin/pip install -e /tmp/satpoint-old
    python benchmarks/ab_generator.py --old-python /tmp/venv-old/bin/python \\
        --old-bench /tmp/satpoint-old/benchmarks/generator_bench.py --pairs 6 --rate 5000 --hold 8

Without venvs, source trees side by side: ``--old-pythonpath OLD/src --new-pythonpath NEW/src`` (both
with this Python, ``--old-python python``).

``--new-args "--wake-window-ms 0.5"`` passes extra ``generator_bench.py`` arguments to one side (run both
sides with this checkout's script and ``--old-pythonpath OLD/src`` when the old script lacks them);
``--hog DUTY`` runs a busy loop pinned to core 1 (busy ``DUTY`` of every ``--hog-period`` s) during every
call: the generator's core shared with another process.

Loopback only; each call is bounded in time (``--hold`` + ``--max-wait`` + 90 s).
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


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


def one(python: str, bench: str, args: argparse.Namespace, env: dict[str, str], extra: list[str]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [python, bench, "--rates", f"{args.rate:g}", "--repeats", "1", "--hold", f"{args.hold:g}"]
    cmd += ["--no-scan", "--no-wrk", "--max-wait", f"{args.max_wait:g}", "--load-limit", f"{args.load_limit:g}"]
    cmd += ["--json", out, *extra]
    hog = None
    if args.hog > 0:  # another process sharing the generator's core for the whole call
        hog_cmd = ["taskset", "-c", "1", sys.executable, "-c", HOG, str(args.hog), str(args.hog_period)]
        hog = subprocess.Popen(hog_cmd)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.hold + args.max_wait + 90)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr}")
        doc = json.loads(Path(out).read_text())
    finally:
        if hog is not None:
            os.kill(hog.pid, signal.SIGKILL)
            hog.wait()
        os.unlink(out)
    res: dict[str, Any] = doc["fixed"][str(float(args.rate))][0]
    res["satpoint_version"] = doc["facts"]["versions"].get("satpoint")
    return res


def med_range(v: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old-python", required=True, help="the Python that runs the old version")
    p.add_argument("--old-bench", required=True, help="the old version's generator_bench.py")
    p.add_argument("--old-pythonpath", default=None, help="PYTHONPATH for the old version (instead of a venv)")
    p.add_argument("--new-bench", default=str(HERE / "generator_bench.py"))
    p.add_argument("--new-pythonpath", default=None, help="PYTHONPATH for the new version (default: none)")
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("--rate", type=float, default=5000)
    p.add_argument("--hold", type=float, default=8.0)
    p.add_argument("--load-limit", type=float, default=0.6)
    p.add_argument("--max-wait", type=float, default=20.0)
    p.add_argument("--new-first", action="store_true", help="run B before A in every pair (order effects)")
    p.add_argument("--old-args", default="", help="extra generator_bench.py arguments for the old version")
    p.add_argument("--new-args", default="", help="extra generator_bench.py arguments for the new version")
    p.add_argument("--hog", type=float, default=0.0, help="busy share of a loop pinned to core 1 (0: none)")
    p.add_argument("--hog-period", type=float, default=0.02, help="the busy loop's period, s")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    env_new = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env_old = dict(env_new)
    if args.old_pythonpath:
        env_old["PYTHONPATH"] = args.old_pythonpath
    if args.new_pythonpath:
        env_new["PYTHONPATH"] = args.new_pythonpath
    pairs: list[dict[str, Any]] = []
    for i in range(args.pairs):
        if args.new_first:
            new = one(sys.executable, args.new_bench, args, env_new, args.new_args.split())
            old = one(args.old_python, args.old_bench, args, env_old, args.old_args.split())
        else:
            old = one(args.old_python, args.old_bench, args, env_old, args.old_args.split())
            new = one(sys.executable, args.new_bench, args, env_new, args.new_args.split())
        pairs.append({"old": old, "new": new})
        print(
            f"  pair {i + 1}: old {old['cpu_us_per_req']} µs/req (hold {old['cpu_us_per_req_hold']}), "
            f"p99 lag {old['lag_p99_ms']} ms, load {old['load1']:.2f} | new {new['cpu_us_per_req']} µs/req "
            f"(hold {new['cpu_us_per_req_hold']}), p99 lag {new['lag_p99_ms']} ms, load {new['load1']:.2f}",
            file=sys.stderr,
            flush=True,
        )

    keys = [
        ("cpu_us_per_req", "CPU µs/req (segment)", "{:.1f}"),
        ("cpu_us_per_req_hold", "CPU µs/req (hold)", "{:.1f}"),
        ("lag_p99_ms", "send lag p99 ms", "{:.3f}"),
    ]
    print("| pair | version | " + " | ".join(k[1] for k in keys) + " | errors | core 1 other | load1 |")
    print("|---" * (len(keys) + 5) + "|")
    for i, pr in enumerate(pairs, 1):
        for v in ("old", "new"):
            r = pr[v]
            vals = " | ".join(fmt.format(r[k]) if r[k] is not None else "-" for k, _, fmt in keys)
            print(
                f"| {i} | {v} | {vals} | {sum(r['errors'].values())} | {100 * r.get('core1_other', 0):.0f} % "
                f"| {r['load1']:.2f} |"
            )
        ratios = " | ".join(
            f"{pr['new'][k] / pr['old'][k]:.3f}" if pr["new"][k] and pr["old"][k] else "-" for k, _, _ in keys
        )
        print(f"| {i} | new/old | {ratios} | | | |")
    print()
    print("| figure | old: median (range) | new: median (range) | new/old per pair: median (range) |")
    print("|---|---|---|---|")
    summary: dict[str, Any] = {}
    for k, label, fmt in keys:
        o = [pr["old"][k] for pr in pairs if pr["old"][k] is not None]
        n = [pr["new"][k] for pr in pairs if pr["new"][k] is not None]
        rs = [pr["new"][k] / pr["old"][k] for pr in pairs if pr["new"][k] and pr["old"][k]]
        summary[k] = {"old": o, "new": n, "ratios": rs}
        print(f"| {label} | {med_range(o, fmt)} | {med_range(n, fmt)} | {med_range(rs, '{:.3f}')} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "pairs": pairs, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
