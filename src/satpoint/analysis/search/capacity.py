"""Capacity planning: a pure function of the saturation point.

per-replica target = saturation x (1 - margin); replicas for a peak = ceil(peak / target);
minReplicas for a floor load = max(1, ceil(min / target)).  The margin (10-20 %, default 15 %) absorbs
load while new replicas start, as the Seldon Core 2 guide advises.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Recommendation:
    margin: float
    saturation_rps: float
    target_rps_per_replica: float
    peak_rps: float | None
    replicas: int | None
    min_rps: float | None
    min_replicas: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def recommend(
    saturation_rps: float, margin: float = 0.15, peak_rps: float | None = None, min_rps: float | None = None
) -> Recommendation:
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    target = saturation_rps * (1 - margin)
    replicas = math.ceil(peak_rps / target - 1e-9) if peak_rps and target > 0 else None
    min_replicas = max(1, math.ceil(min_rps / target - 1e-9)) if min_rps and target > 0 else None
    if replicas is not None and min_replicas is not None:
        replicas = max(replicas, min_replicas)
    return Recommendation(
        margin=margin,
        saturation_rps=saturation_rps,
        target_rps_per_replica=round(target, 3),
        peak_rps=peak_rps,
        replicas=replicas,
        min_rps=min_rps,
        min_replicas=min_replicas,
    )
