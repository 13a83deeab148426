"""How long before its first due time a run starts its clock (its *lead*), in one place: the generator,
the flame graph's start, the observer's clock mapping and the search's budget all read it from here."""

from __future__ import annotations

#: one generator process, running in place: enough to build the transport and connect
LEAD_S = 0.2
#: spawned generator processes start up (imports, connections) before the clock starts
SPAWN_LEAD_S = 2.0


def start_lead_s(procs: int) -> float:
    """The lead of a run with ``procs`` generator processes on this machine."""
    return SPAWN_LEAD_S if procs > 1 else LEAD_S
