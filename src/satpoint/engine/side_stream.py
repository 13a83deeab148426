"""A small open-loop stream at one model, on a thread of its own, stopped at a moment the caller learns
only later: ``satpoint coldstart`` sends it at a model while the model loads and stops it when the load
answers (no request intended after that is sent).  Each request is intended at ``t0 + i / rate`` and keeps
its row (``Records``, raw ``perf_counter`` times) with the transport's outcome; a request that finds every
connection busy waits (``waited``) and leaves when one frees.  Over REST it is a ``RestPool``; any other
recipe (gRPC's ``GrpcFactoryBuilder``) builds its own transport, its first payload sent each time."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np
import uvloop

from satpoint.endpoints.rest import RestFactoryBuilder
from satpoint.errors import TargetUnreachable
from satpoint.metrics.records import Outcome, Records
from satpoint.transports.base import HotTransport, TransportFactory
from satpoint.transports.rest.pool import RestPool

perf = time.perf_counter


class SideStream:
    """A small open-loop stream at one model, on a thread of its own, from ``t0`` until ``stop_at``: each
    request intended at ``t0 + i / rate``; none intended after ``stop_at`` is sent.  Rows keep raw
    ``perf_counter`` times."""

    def __init__(
        self,
        builder: RestFactoryBuilder | Callable[[], TransportFactory],
        rate_rps: float,
        horizon_s: float,
        timeout_s: float,
    ) -> None:
        self._builder = builder
        self._rate = rate_rps
        self._timeout_s = timeout_s
        n = int(rate_rps * horizon_s) + 1
        self.rec = Records.empty(np.zeros(n))
        self.sent_rows = 0
        self.t0 = 0.0
        self.stop_at: float | None = None
        self.error: BaseException | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="side-stream", daemon=True)

    def start(self, lead_s: float = 0.05) -> float:
        """Start the stream; returns its ``t0`` (a ``perf_counter`` value: call the load then)."""
        self._lead_s = lead_s
        self._thread.start()
        if not self._started.wait(30):
            raise TargetUnreachable("the side stream could not connect within 30 s")
        if self.error is not None:
            raise self.error
        return self.t0

    def finish(self, stop_at: float) -> Records:
        """Stop sending at ``stop_at``; wait for the requests sent (at most the request timeout); its rows."""
        self.stop_at = stop_at
        self._thread.join(self._timeout_s + 10)
        rec = self.rec.select(np.arange(len(self.rec)) < self.sent_rows)
        return rec

    def _main(self) -> None:
        loop = uvloop.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._run())
        except BaseException as e:  # reported to the caller
            self.error = e
            self._started.set()
        finally:
            loop.close()
            asyncio.set_event_loop(None)

    async def _run(self) -> None:
        backlog: deque[int] = deque()
        pool: HotTransport

        def on_free() -> None:
            while backlog and pool.try_send(backlog[0], 0):
                backlog.popleft()

        b = self._builder
        if isinstance(b, RestFactoryBuilder):
            ssl_context = b.tls.context() if b.tls is not None else None  # the target's TLS, as the load's
            hostname = b.tls.server_hostname if b.tls is not None else None
            pool = RestPool(self.rec, on_free, b.host, b.port, b.requests[:1], b.max_inflight, ssl=ssl_context,
                            server_hostname=hostname)  # fmt: skip
        else:
            pool = b()(self.rec, on_free)
        await pool.prepare(2)
        self.t0 = perf() + self._lead_s
        self._started.set()
        i, n = 0, len(self.rec)
        while i < n:
            due = self.t0 + i / self._rate
            wait = due - perf()
            if wait > 0:
                await asyncio.sleep(wait)
            if self.stop_at is not None and due > self.stop_at:
                break
            self.rec.intended[i] = due
            if backlog or not pool.try_send(i, 0):
                backlog.append(i)
                self.rec.waited[i] = True
            i += 1
        self.sent_rows = i
        end = perf() + self._timeout_s
        while (pool.inflight() or backlog) and perf() < end:
            await asyncio.sleep(0.01)
            pool.expire(perf(), self._timeout_s)
        pool.abort_all(Outcome.UNFINISHED)
        for idx in backlog:
            self.rec.done[idx] = perf()
        await pool.close()
