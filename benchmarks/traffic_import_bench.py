"""Speed and memory of the traffic importers and of the queue prediction (benchmarks/RESULTS.md).

    python benchmarks/traffic_import_bench.py gen /tmp/envoy10m.log 10000000 [text|json]
    /usr/bin/time -v python benchmarks/traffic_import_bench.py envoy /tmp/envoy10m.log [times|records]
    python benchmarks/traffic_import_bench.py queue 1000000

``gen`` writes a log as Envoy would: Poisson starts at 1 000 rps, exponential durations (mean 20 ms),
lines in completion order (so most lines start before the latest start already written), ms timestamps.
"""

from __future__ import annotations

import resource
import sys
import time

import numpy as np


def gen(path: str, n: int, fmt: str) -> None:
    rng = np.random.default_rng(1)
    start = 1_796_334_000.0
    block = 100_000
    with open(path, "w") as f:
        for b in range(0, n, block):
            m = min(block, n - b)
            st = start + np.cumsum(rng.exponential(1 / 1000, m))
            start = float(st[-1])
            dur = rng.exponential(0.02, m)
            order = np.argsort(st + dur, kind="stable")
            ms = np.round(st[order] * 1000).astype(np.int64)
            stamps = np.datetime_as_string(ms.astype("datetime64[ms]"), unit="ms")
            dms = (dur[order] * 1000).astype(np.int64)
            if fmt == "text":
                f.writelines(
                    f'[{s}Z] "POST /v2/models/iris/infer HTTP/1.1" 200 - 154 0 {d} {d} "10.0.35.28" '
                    f'"python-requests/2.31" "c2f1c9b0-6a4e-4f3e-9b1e-{b + i:012d}" "iris.seldon" "10.0.2.1:9000"\n'
                    for i, (s, d) in enumerate(zip(stamps, dms, strict=True))
                )
            else:
                f.writelines(
                    f'{{"start_time":"{s}Z","method":"POST","path":"/v2/models/iris/infer","protocol":"HTTP/1.1",'
                    f'"response_code":"200","duration":"{d}","upstream_host":"10.0.2.1:9000"}}\n'
                    for s, d in zip(stamps, dms, strict=True)
                )


def envoy(path: str, what: str) -> None:
    from satpoint.traffic.envoy_log import EnvoyLogStats, iter_envoy_records, iter_envoy_times

    st = EnvoyLogStats()
    t0 = time.perf_counter()
    n, last = 0, -np.inf
    if what == "records":
        for c in iter_envoy_records(path, stats=st):
            n += len(c.times_s)
            assert c.times_s[0] >= last
            last = c.times_s[-1]
    else:
        for t in iter_envoy_times(path, stats=st):
            n += len(t)
            assert t[0] >= last
            last = t[-1]
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{what}: {st.lines} lines, {n} arrivals in {dt:.1f} s = {st.lines / dt / 1e6:.2f} M lines/s; "
        f"max RSS {rss:.0f} MiB; out of order {st.out_of_order} (max {st.max_disorder_s * 1000:.0f} ms), "
        f"malformed {st.malformed}, other {st.other_lines}"
    )


def queue(n: int) -> None:
    from satpoint.traffic.queue_sim import predict_percentiles

    rng = np.random.default_rng(0)
    a = 1_796_334_000.0 + np.cumsum(rng.exponential(1 / 350, n))
    measured = rng.lognormal(np.log(0.01), 0.3, 5000)  # a sample of low-load service times, mean ~10.5 ms
    cases = [
        ("1 slot x 2.5 ms constant (Lindley)", np.float64(0.0025), 1),
        ("4 slots x 10 ms constant (interleaved)", np.float64(0.01), 4),
        ("4 slots, empirical sample (heap)", measured, 4),
        ("40 slots, empirical x 10 (heap)", measured * 10, 40),
    ]
    for name, service, slots in cases:
        t0 = time.perf_counter()
        p = predict_percentiles(a, service, slots, (50, 99), seed=1)
        dt = time.perf_counter() - t0
        print(f"{n} arrivals at 350 rps, {name}: {dt:.2f} s; p50 {p[50] * 1000:.2f} ms, p99 {p[99] * 1000:.2f} ms")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "gen":
        gen(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "text")
    elif cmd == "envoy":
        envoy(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "times")
    else:
        queue(int(sys.argv[2]))
