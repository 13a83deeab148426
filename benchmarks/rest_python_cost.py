"""The REST hot path's own Python and parsing per request, with no network and no sleeping: the share of a
request's cost that compiling or trimming satpoint's Python could ever remove.

Drives the real ``OpenLoopDispatcher._fire_due`` (``--batch`` rows due per wake-up, as a wake-up window sends
them), the real ``RestPool.try_send`` and ``_Conn.data_received`` (httptools parse, ``on_message_complete``,
the release and the dispatcher's ``_on_free``) over connections whose transport's ``write`` does nothing;
each answer is a complete nginx-like HTTP/1.1 200 with a 120-byte body.  Prints the process CPU per request
(median of ``--repeats``) and which files the dispatcher and the pool were loaded from (``.py``, or a compiled
module if one sits beside it on ``PYTHONPATH``).

    taskset -c 1 python benchmarks/rest_python_cost.py --requests 200000 --repeats 5

Set against ``generator_bench.py``'s CPU per request at the same batch (a 0.8 ms window at 5 000 rps sends
five rows per wake-up): what is left is the system calls, the event loop's wake-ups and dispatch, and the
caches a sleeping process finds cold.  No network, no child processes; bounded by ``--requests`` x
``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import uvloop

from satpoint.engine import dispatcher as dispatcher_mod
from satpoint.engine.dispatcher import DispatchOptions, OpenLoopDispatcher
from satpoint.transports.rest import pool as rest_mod
from satpoint.transports.rest.pool import RestPool

ANSWER = (
    b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Fri, 04 Dec 2026 12:00:00 GMT\r\n"
    b"Content-Type: application/json\r\nContent-Length: 120\r\nConnection: keep-alive\r\n\r\n" + b"x" * 120
)


class _NullTransport:
    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def one(requests: int, batch: int) -> float:
    """CPU seconds per request for ``requests`` rows, ``batch`` due per wake-up."""
    out: list[float] = []

    async def run() -> None:
        due = np.zeros(requests)  # every row's due time is in the past: each _fire_due sends what it may
        disp = OpenLoopDispatcher(due, time.perf_counter(), lambda rec, on_free: None, DispatchOptions())
        pool = RestPool(disp.rec, disp._on_free, "127.0.0.1", 80, [b"POST / HTTP/1.1\r\n\r\n"], batch)
        disp._send = pool.try_send
        conns = [pool.conn_type(pool) for _ in range(batch)]
        for c in conns:
            pool._all.add(c)
            c.connection_made(_NullTransport())  # type: ignore[arg-type]
        rounds = requests // batch
        c0 = time.process_time()
        for r in range(1, rounds + 1):
            disp._n = r * batch  # a wake-up: the next ``batch`` rows are due; _fire_due's loop sends them
            disp._fire_due()
            for c in conns:  # their answers, one read each (the release calls the dispatcher's _on_free)
                c.data_received(ANSWER)
        out.append((time.process_time() - c0) / (rounds * batch))

    uvloop.run(run())
    return out[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=5, help="rows sent per wake-up")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    runs = [one(a.requests, a.batch) * 1e6 for _ in range(a.repeats)]
    doc = {
        "us_per_request_median": round(statistics.median(runs), 3),
        "runs_us": [round(r, 3) for r in runs],
        "batch": a.batch,
        "dispatcher": dispatcher_mod.__file__,
        "rest": rest_mod.__file__,
    }
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
