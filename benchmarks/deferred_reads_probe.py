"""Would reading answers only at send wake-ups, timed by the kernel, halve the cost of exact pacing?

A measurement to choose the next step of the generator's hot path, not part of satpoint.  With exact pacing at
5 000 requests/s each request costs two wake-ups of the event loop (its send, its answer; ~8 µs of CPU each on
a 2-core VM, ``wakeup_floor.py``).  This probe keeps the send wake-up (satpoint's ``WakeTimer`` on uvloop) and
drops the answer's: the connections are plain non-blocking sockets that the loop does not watch, each with
``SO_TIMESTAMPNS`` on, and at every send wake-up the connections with a request in flight are read with
``recvmsg(MSG_DONTWAIT)``; an answer's done time is the kernel's receive timestamp of its data (converted from
``CLOCK_REALTIME`` to the run clock with the offset sampled at that wake-up), so reading it late does not make
it late.  It also stamps each answer the usual way (``perf_counter`` when it is read) to show the difference.

Runs nginx (``generator_bench.Nginx``) on core 0 and itself on core 1 at ``--rate`` for ``--seconds``, with
``--conns`` keep-alive connections, constant arrivals, and prints CPU per request (over the whole schedule),
p99 send lag, kernel-stamped vs read-time-stamped latency, and the answers read per wake-up.

    python benchmarks/deferred_reads_probe.py --rate 5000 --seconds 8 --repeats 3

Loopback only; bounded (``--seconds`` + 10 s per repeat); nginx is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generator_bench as gb  # (beside this script)

from satpoint.engine.timer import WakeTimer

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_SCM_TIMESTAMPNS = _SO_TIMESTAMPNS
_TS = struct.Struct("@ll")
BODY = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def one(port: int, rate: float, seconds: float, conns: int, watched: bool) -> dict[str, Any]:
    req = (
        f"POST /v2/models/{gb.MODEL}/infer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    n = int(rate * seconds)
    intended = np.arange(n, dtype=np.float64) / rate
    sent = np.full(n, np.nan)
    done_kernel = np.full(n, np.nan)
    done_read = np.full(n, np.nan)
    per_wake: list[int] = []
    socks: list[socket.socket] = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        s.setblocking(False)
        socks.append(s)
    free = list(range(conns))
    busy: dict[int, int] = {}  # connection -> row
    bufs: dict[int, bytes] = {}
    cpu: dict[str, float] = {}

    def read_answers(offset: float, only: int = -1) -> int:
        got = 0
        for c in list(busy) if only < 0 else [only]:
            s = socks[c]
            try:
                data, anc, _, _ = s.recvmsg(65536, 64, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            now = time.perf_counter()
            buf = bufs.get(c, b"") + data
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if not sep:
                bufs[c] = buf
                continue
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(rest) < length:
                bufs[c] = buf
                continue
            bufs.pop(c, None)
            row = busy.pop(c)
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == _SCM_TIMESTAMPNS:
                    sec, nsec = _TS.unpack_from(value)
                    done_kernel[row] = sec + nsec * 1e-9 - offset
            done_read[row] = now
            free.append(c)
            got += 1
        return got

    async def main() -> None:
        loop = asyncio.get_running_loop()
        finished = loop.create_future()
        t0 = time.perf_counter() + 0.2
        due = intended + t0
        state = {"i": 0}

        def readable(c: int) -> None:  # --watched: an answer wakes the loop (what satpoint does today)
            if c in busy:
                read_answers(time.time() - time.perf_counter(), c)
            else:
                socks[c].recv(65536)  # nothing is expected: drain (a close, or a stray answer)

        if watched:
            for c, sk in enumerate(socks):
                loop.add_reader(sk.fileno(), readable, c)

        def fire() -> float | None:
            if not watched:
                offset = time.time() - time.perf_counter()  # CLOCK_REALTIME - the run clock, now
                per_wake.append(read_answers(offset))
            i = state["i"]
            now = time.perf_counter()
            while i < n and due[i] <= now:
                if not free:
                    break  # (not expected at these rates: --conns is ample)
                c = free.pop()
                busy[c] = i
                sent[i] = time.perf_counter()
                socks[c].send(req)
                i += 1
            state["i"] = i
            if i >= n:
                if not finished.done():
                    finished.set_result(None)
                return None
            return float(due[i])

        timer = WakeTimer(loop, fire)
        c0 = _cpu()
        timer.arm(float(due[0]))
        await finished
        cpu["s"] = _cpu() - c0
        timer.close()
        deadline = time.perf_counter() + 5.0
        while busy and time.perf_counter() < deadline:  # the last answers (not in the CPU figure)
            read_answers(time.time() - time.perf_counter())
            await asyncio.sleep(0.001)
        for sk in socks:
            if watched:
                loop.remove_reader(sk.fileno())
            sk.close()
        sent[:] -= t0
        done_kernel[:] -= t0
        done_read[:] -= t0

    uvloop.run(main())
    lag_ms = (sent - intended) * 1e3
    lat_k = (done_kernel - intended) * 1e3
    lat_r = (done_read - intended) * 1e3
    ok = ~np.isnan(lat_k)
    return {
        "mode": "watched" if watched else "deferred",
        "rate": rate,
        "requests": n,
        "answered": int(ok.sum()),
        "cpu_us_per_req": cpu["s"] / n * 1e6,
        "lag_p50_ms": float(np.nanpercentile(lag_ms, 50)),
        "lag_p99_ms": float(np.nanpercentile(lag_ms, 99)),
        "latency_kernel_p50_ms": float(np.nanpercentile(lat_k, 50)),
        "latency_kernel_p99_ms": float(np.nanpercentile(lat_k, 99)),
        "latency_read_p50_ms": float(np.nanpercentile(lat_r, 50)),
        "latency_read_p99_ms": float(np.nanpercentile(lat_r, 99)),
        "kernel_before_send": int(np.sum(done_kernel[ok] < sent[ok])),  # must be 0: a clock mix-up otherwise
        "answers_per_wake": float(np.mean(per_wake)) if per_wake else 0.0,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=5000.0)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--conns", type=int, default=16)
    a = p.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"watched": [], "deferred": []}
    with gb.Nginx() as ng:
        os.sched_setaffinity(0, {gb.GEN_CORE})
        for _ in range(max(1, min(a.repeats, 10))):  # interleaved: watched, deferred, watched, ...
            for watched in (True, False):
                r = one(ng.port, a.rate, min(a.seconds, 60.0), a.conns, watched)
                print(json.dumps(r), flush=True)
                runs[r["mode"]].append(r)
    for mode, rs in runs.items():
        med = statistics.median(r["cpu_us_per_req"] for r in rs)
        print(f"{mode} at {a.rate:g}/s: {med:.2f} µs CPU per request (median of {len(rs)})")
    ratios = [d["cpu_us_per_req"] / w["cpu_us_per_req"] for w, d in zip(runs["watched"], runs["deferred"], strict=True)]
    print(f"deferred/watched per pair: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
