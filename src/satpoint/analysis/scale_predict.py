"""``scale-test --predict``: the same load through a discrete-event model of the replicas and the HPA rule, and its
seconds over the objective beside the measured ones.

The model is ``sim --autoscale``'s (``servers.sim.autoscale.hpa``): every replica one server of ``S`` rps (its
queue, not its latency profile), fed by one queue; a decision every sync period on the requests that arrived in
it (``desired = ceil(ready x utilisation / target)``, 10 % tolerance, the scale-down window); a new replica serves
``delay_s`` after the decision.  The arrivals are the measured run's intended send times; the model starts with
the replicas measured before the step.  The sync ticks' phase against the step is unknown in a cluster: the
prediction is the mean over four phases, with their range.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from satpoint.analysis.scale import F64, ScalePhases, timeline
from satpoint.servers.sim.autoscale.hpa import ScaledScheduler
from satpoint.servers.sim.autoscale.spec import AutoscaleSpec
from satpoint.servers.sim.model import SimConfig

_PHASES = 4


def predict(
    intended: F64,
    phases: ScalePhases,
    metric: str,
    limit_ms: float,
    *,
    capacity_rps: float,
    replicas_before: int,
    max_replicas: int,
    target: float,
    delay_s: float,
    sync_s: float,
    down_window_s: float,
) -> dict[str, Any]:
    """Predicted seconds over the objective (all, and in the peak) for the policy given."""
    spec = AutoscaleSpec(replicas_before, max(replicas_before, max_replicas), delay_s, target, sync_s, down_window_s)
    config = SimConfig(slots=1, service_ms=1000.0 / capacity_rps, autoscale=spec)
    order = np.sort(intended)
    overs: list[int] = []
    peaks: list[int] = []
    readies: list[float | None] = []
    for k in range(_PHASES):
        origin = -sync_s * k / _PHASES
        sched = ScaledScheduler(config, spec, origin)
        lat = np.array([sched.admit(a).finish_s - a for a in order.tolist()])
        rows = timeline(order, lat, metric, limit_ms / 1e3, phases.end_s, [])
        overs.append(sum(1 for r in rows if r["over"]))
        peaks.append(sum(1 for r in rows if r["over"] and phases.step_s <= r["t_s"] < phases.down_s))
        ups = [e.at_s for e in sched.events if e.kind == "ready" and e.at_s >= phases.step_s]
        readies.append(max(ups) - phases.step_s if ups else None)
    known = [r for r in readies if r is not None]
    return {
        "target": target,
        "delay_s": round(delay_s, 3),
        "sync_s": sync_s,
        "down_window_s": down_window_s,
        "capacity_rps": capacity_rps,
        "min_replicas": replicas_before,
        "max_replicas": spec.max_replicas,
        "seconds_over_slo": round(float(np.mean(overs)), 2),
        "seconds_over_slo_range": [min(overs), max(overs)],
        "seconds_over_slo_peak": round(float(np.mean(peaks)), 2),
        "time_to_replicas_s": round(float(np.mean(known)), 3) if known else None,
    }
