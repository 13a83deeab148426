"""The pipeline's figures predicted from its steps' own: capacity and bottleneck, critical path, sizing.

**Capacity.**  Every request visits every step of the DAG (``satpoint.pipeline.dag``: each step reads all its
inputs), and a fan-out sends the *whole* request to each branch: branches run in parallel in time, but they do
not share the load.  So each step carries the full rate, and the pipeline's capacity is the least capacity of
all its steps, ``min_i C_i``: on a chain the least of its steps, on a DAG the least over every step of every
branch (never a sum of branches).  This includes steps the answer does not wait for (a drift detector beside
the model): one slower than the rate does not slow the answers at first, but its backlog grows without end.
The bottleneck is the step with that least capacity (the first in the spec's order on a tie).

*Not modelled*: a conditional step (``triggers``) is counted as if every request took it, so the prediction
may be low when few do; ``any``/``outer`` joins are counted as ``inner`` (all inputs).  A step whose capacity is
a lower bound (its search never bracketed) can only be faster: the prediction is exact unless that step holds
the least figure, and then it is a lower bound too.

**Critical path.**  A step starts when the last of its inputs has answered, so the pipeline's latency is the
longest path, by the steps' latencies at one rate, from the request to an output step; that path is the critical
path, and the measured end-to-end latency minus its sum is what the pipeline machinery itself costs.  (A sum of
percentiles is not the percentile of a sum: use medians or means for the path, and compare like with like.)

**Sizing.**  For a target rate ``R`` with margin ``m``, step ``i`` needs ``ceil(R / (C_i (1 - m)))`` replicas
(``satpoint.analysis.search.capacity.recommend``, one step at a time), assuming replicas add capacity; the pipeline
then carries ``min_i r_i C_i``.  Without a target, the fastest step's own per-replica target
``max_i C_i (1 - m)``: the replicas that keep every step level with the fastest one.  No replicas from a lower
bound.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from satpoint.analysis.search.capacity import recommend
from satpoint.pipeline.dag import PipelineDag


def _capacities(dag: PipelineDag, capacity_rps: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in dag.names:
        value = capacity_rps.get(name)
        if value is None or not value > 0:
            raise ValueError(f"pipeline {dag.name}: no capacity for step {name}")
        out[name] = float(value)
    return out


@dataclass(frozen=True)
class CapacityPrediction:
    """The pipeline's predicted capacity, the step that sets it, and what the prediction assumes."""

    saturation_rps: float
    bottleneck: str
    #: the bottleneck's figure is a lower bound (its search never bracketed), so this one is too
    lower_bound: bool
    #: each step's capacity, in the spec's order
    steps: tuple[tuple[str, float], ...]
    #: steps with triggers, counted as if every request took them
    conditional: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "saturation_rps": self.saturation_rps,
            "bottleneck": self.bottleneck,
            "lower_bound": self.lower_bound,
            "steps": [
                {"step": s, "saturation_rps": c, "share": round(c / self.saturation_rps, 4)} for s, c in self.steps
            ],
        }
        if self.conditional:
            out["assumes"] = f"conditional steps ({', '.join(self.conditional)}) counted as if every request took them"
        return out


def predict_capacity(
    dag: PipelineDag, capacity_rps: Mapping[str, float], *, lower_bounds: Collection[str] = ()
) -> CapacityPrediction:
    """The pipeline's capacity from each step's (``capacity_rps``, every step of ``dag``; ``lower_bounds``: the
    steps whose figure is a lower bound): the least of them (see the module's doc)."""
    caps = _capacities(dag, capacity_rps)
    bottleneck = min(dag.names, key=lambda n: caps[n])  # min keeps the first of equals: the spec's order
    return CapacityPrediction(
        saturation_rps=caps[bottleneck],
        bottleneck=bottleneck,
        lower_bound=bottleneck in lower_bounds,
        steps=tuple(caps.items()),
        conditional=tuple(s.name for s in dag.steps if s.conditional),
    )


@dataclass(frozen=True)
class CriticalPath:
    """The slowest path from the request to an output step, and its summed latency."""

    steps: tuple[str, ...]
    latency_s: float

    def overhead_s(self, measured_latency_s: float) -> float:
        """What the pipeline adds to its steps: the measured end-to-end latency minus the path's sum."""
        return measured_latency_s - self.latency_s

    def to_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "latency_s": self.latency_s}


def critical_path(dag: PipelineDag, latency_s: Mapping[str, float]) -> CriticalPath:
    """The path, among ``dag.paths()`` (request to an output step), whose steps' ``latency_s`` sum the most (the
    first in the spec's order on a tie).  Every step on such a path needs a latency."""
    best: tuple[str, ...] = ()
    best_s = -1.0
    for path in dag.paths():
        missing = [n for n in path if n not in latency_s]
        if missing:
            raise ValueError(f"pipeline {dag.name}: no latency for step {missing[0]}")
        total = sum(latency_s[n] for n in path)
        if total > best_s:
            best, best_s = path, total
    return CriticalPath(steps=best, latency_s=best_s)


@dataclass(frozen=True)
class StepSizing:
    """One step's replicas for the pipeline's target: None when its capacity is a lower bound."""

    step: str
    saturation_rps: float
    target_rps_per_replica: float
    replicas: int | None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "step": self.step,
            "saturation_rps": self.saturation_rps,
            "target_rps_per_replica": self.target_rps_per_replica,
            "replicas": self.replicas,
        }
        if self.replicas is None:
            out["withheld"] = "its capacity is a lower bound (the search never bracketed it)"
        return out


@dataclass(frozen=True)
class PipelineSizing:
    """Replicas per step so that each carries ``target_rps`` with ``margin``, and the pipeline's capacity then
    (``saturation_rps``, its ``bottleneck``; None when a step's replicas are withheld)."""

    target_rps: float
    margin: float
    steps: tuple[StepSizing, ...]
    saturation_rps: float | None
    bottleneck: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_rps": self.target_rps,
            "margin": self.margin,
            "steps": [s.to_dict() for s in self.steps],
            "saturation_rps": self.saturation_rps,
            "bottleneck": self.bottleneck,
        }


def size_pipeline(
    dag: PipelineDag,
    capacity_rps: Mapping[str, float],
    target_rps: float | None = None,
    *,
    margin: float = 0.15,
    lower_bounds: Collection[str] = (),
) -> PipelineSizing:
    """Replicas per step for ``target_rps`` (default: the fastest step's per-replica target) with ``margin``
    (see the module's doc)."""
    caps = _capacities(dag, capacity_rps)
    target = target_rps if target_rps is not None else max(c * (1 - margin) for c in caps.values())
    if not target > 0:
        raise ValueError(f"pipeline {dag.name}: the target rate must be > 0, got {target}")
    sized: list[StepSizing] = []
    for name, cap in caps.items():
        rec = recommend(cap, margin, peak_rps=target)
        replicas = None if name in lower_bounds else rec.replicas
        sized.append(StepSizing(name, cap, rec.target_rps_per_replica, replicas))
    after: float | None = None
    bottleneck: str | None = None
    if all(s.replicas is not None for s in sized):
        bottleneck = min(sized, key=lambda s: s.saturation_rps * (s.replicas or 0)).step
        after = caps[bottleneck] * next(s.replicas or 0 for s in sized if s.step == bottleneck)
    return PipelineSizing(round(target, 3), margin, tuple(sized), after, bottleneck)
