"""Replicas behind an HPA-like rule, in virtual time (no I/O, no clock): the slots of every ready replica fed by
one queue, a decision every sync period, and each new replica's slots joining a fixed delay after it.

The rule is Kubernetes HPA's: at every sync the utilisation is the requests that arrived over the last sync
period divided by what the ready replicas can serve in it (``ready x slots / service_s x sync_s``; it passes 1
when overloaded, as ``infer_rps`` over a per-replica target does); the recommendation is
``ceil(ready x utilisation / target)`` within ``[min, max]``, no change when ``utilisation / target`` is within
the tolerance of 1; a scale-up applies at once, a scale-down only as far as the highest recommendation of the
last ``down_window_s`` allows.  There is no scale-up rate limit.  A replica removed takes no new requests; the
ones it holds finish (a graceful drain).  Every change is an event with its exact virtual time.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

from satpoint.servers.sim.autoscale.spec import AutoscaleSpec
from satpoint.servers.sim.model import Admission, SimConfig, SlotScheduler, _draws_and_pauses


@dataclass(frozen=True)
class ScaleEvent:
    """One change: ``kind`` ``desired`` (a decision), ``ready`` (a replica serves), ``removed`` (one stops taking
    requests) or ``cancelled`` (a replica not ready yet is no longer wanted), at ``at_s`` (virtual time), with the
    counts after it and the utilisation the decision saw."""

    kind: str
    at_s: float
    desired: int
    ready: int
    utilisation: float | None = None


class ScaledScheduler(SlotScheduler):
    """``SlotScheduler`` whose slots are the ready replicas' (``config.slots`` each), scaled by ``spec``'s rule."""

    def __init__(self, config: SimConfig, spec: AutoscaleSpec, origin_s: float) -> None:
        service, errors, pauses = _draws_and_pauses(config, origin_s)
        super().__init__(
            slots=config.slots * spec.min_replicas, service=service, errors=errors, pauses=pauses, origin_s=origin_s
        )
        self.spec = spec
        self.origin_s = origin_s
        self._per_replica = config.slots
        self.replica_rps = config.capacity_rps
        self.ready = spec.min_replicas
        self.desired = spec.min_replicas
        self._pending: list[float] = []  # ready times of replicas asked for and not ready yet (sorted)
        self._next_sync_s = origin_s + spec.sync_s
        self._arrived = 0  # since the last sync
        self._recommendations: deque[tuple[float, int]] = deque()
        self.events: list[ScaleEvent] = []

    def admit(self, arrival_s: float, service_s: float | None = None) -> Admission:
        self.advance(arrival_s)
        self._arrived += 1
        return super().admit(arrival_s, service_s)

    def advance(self, now_s: float) -> None:
        """Apply every sync and readiness due at or before ``now_s``, in time order."""
        while True:
            ready_at = self._pending[0] if self._pending else math.inf
            if min(ready_at, self._next_sync_s) > now_s:
                return
            if ready_at <= self._next_sync_s:
                self._pending.pop(0)
                self._add_replica(ready_at)
            else:
                at_s = self._next_sync_s
                self._next_sync_s += self.spec.sync_s
                self._sync(at_s)

    def _add_replica(self, at_s: float) -> None:
        for _ in range(self._per_replica):
            heapq.heappush(self._free_at_s, at_s)
        self.ready += 1
        self.events.append(ScaleEvent("ready", at_s, self.desired, self.ready))

    def _remove_replica(self, at_s: float) -> None:
        kept = sorted(self._free_at_s)[: len(self._free_at_s) - self._per_replica]  # the busiest slots drain
        heapq.heapify(kept)
        self._free_at_s[:] = kept
        self.ready -= 1
        self.events.append(ScaleEvent("removed", at_s, self.desired, self.ready))

    def utilisation(self, arrived: int) -> float:
        return arrived / (self.spec.sync_s * self.ready * self.replica_rps)

    def _sync(self, at_s: float) -> None:
        spec = self.spec
        u = self.utilisation(self._arrived)
        self._arrived = 0
        ratio = u / spec.target
        recommended = self.desired
        if abs(ratio - 1.0) > spec.tolerance:
            recommended = min(spec.max_replicas, max(spec.min_replicas, math.ceil(self.ready * ratio - 1e-9)))
        window = self._recommendations
        window.append((at_s, recommended))
        while window and window[0][0] < at_s - spec.down_window_s:
            window.popleft()
        new = recommended
        if recommended < self.desired:  # a scale-down: no lower than any recommendation in the window
            new = min(self.desired, max(r for _, r in window))
        if new == self.desired:
            return
        old, self.desired = self.desired, new
        self.events.append(ScaleEvent("desired", at_s, new, self.ready, round(u, 4)))
        if new > old:
            self._pending.extend([at_s + spec.delay_s] * (new - old))
            return
        drop = old - new
        while drop and self._pending:
            self._pending.pop()
            drop -= 1
            self.events.append(ScaleEvent("cancelled", at_s, new, self.ready))
        for _ in range(drop):
            self._remove_replica(at_s)
