"""What one idle wake-up of the generator's event loop costs, with nothing sent: the floor of exact pacing.

The dispatcher sleeps in ``epoll_pwait`` until its ``timerfd`` fires (``satpoint.engine.timer.WakeTimer``), runs
its callback, re-arms, and sleeps again.  At 5 000 requests/s with exact pacing that happens once per request
for the send (and once more for the answer).  This runs the same timer on a uvloop loop, re-armed every
``--period-us`` from the callback's return value (as the dispatcher does), for ``--seconds``, pinned to
``--cpu``, and prints the process CPU (user + system) per wake-up and the p50/p99 wake-up lateness.

    taskset -c 1 python benchmarks/wakeup_floor.py --period-us 200 --seconds 5 --repeats 3

No network, no child processes; bounded by ``--seconds`` x ``--repeats``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import time

import uvloop

from satpoint.engine.timer import WakeTimer


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def one(period_s: float, seconds: float) -> dict[str, float]:
    late: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        start = time.perf_counter() + 0.05
        end = start + seconds
        nxt = [start]

        def fire() -> float | None:
            now = time.perf_counter()
            late.append(now - nxt[0])
            nxt[0] += period_s
            if nxt[0] > end:
                done.set_result(None)
                return None
            return nxt[0]

        timer = WakeTimer(loop, fire)
        timer.arm(start)
        c0 = _cpu()
        await done
        timer.close()
        stats["cpu_s"] = _cpu() - c0

    stats: dict[str, float] = {}
    uvloop.run(main())
    late_us = sorted(x * 1e6 for x in late)
    n = len(late_us)
    return {
        "wakeups": n,
        "cpu_us_per_wakeup": stats["cpu_s"] / n * 1e6,
        "late_p50_us": late_us[n // 2],
        "late_p99_us": late_us[min(n - 1, int(n * 0.99))],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--period-us", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cpu", type=int, default=1, help="pin this process to this CPU (-1: leave it)")
    a = p.parse_args()
    if a.cpu >= 0:
        os.sched_setaffinity(0, {a.cpu})
    runs = [one(a.period_us / 1e6, min(a.seconds, 60.0)) for _ in range(max(1, min(a.repeats, 20)))]
    for r in runs:
        print(json.dumps(r))
    med = statistics.median(r["cpu_us_per_wakeup"] for r in runs)
    print(f"period {a.period_us:g} us: {med:.2f} us CPU per wake-up (median of {len(runs)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
