"""What ``sim --autoscale`` is asked for: the replica bounds, the delay before a new replica serves, and the rule's
target, sync period and scale-down window (Kubernetes HPA defaults where there is one: 15 s sync, 300 s window,
10 % tolerance)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from satpoint.errors import ConfigError

#: the HPA's defaults: its sync period, its scale-down stabilisation window and its tolerance
DEFAULT_SYNC_S = 15.0
DEFAULT_DOWN_WINDOW_S = 300.0
TOLERANCE = 0.1
DEFAULT_TARGET = 0.7
DEFAULT_DELAY_S = 30.0

AUTOSCALE_HELP = (
    "MIN:MAX: serve MIN to MAX replicas, each of --slots slots at --service-ms (C/S rps each), scaled by the HPA "
    "rule on the sim's own utilisation (requests arrived over the last --scale-sync-s over the ready replicas' "
    "capacity): desired = ceil(ready x utilisation / --scale-target), unchanged within 10 %, scale-down held by the "
    "highest recommendation of the last --scale-down-window-s; a new replica serves --scale-delay-s after the "
    "decision. GET /replicas (JSON), /replicas/ready, /replicas/desired (a number), /metrics (Prometheus text: "
    "satpoint_sim_replicas_ready, satpoint_sim_replicas_desired), /events (the decisions and readiness, JSON)"
)


@dataclass(frozen=True)
class AutoscaleSpec:
    """Replicas ``min_replicas``..``max_replicas`` (``min_replicas`` ready at start); a decision every ``sync_s``;
    a new replica ready ``delay_s`` after the decision that asked for it; ``target`` the utilisation aimed at;
    a scale-down takes the highest recommendation of the last ``down_window_s``."""

    min_replicas: int = 1
    max_replicas: int = 1
    delay_s: float = DEFAULT_DELAY_S
    target: float = DEFAULT_TARGET
    sync_s: float = DEFAULT_SYNC_S
    down_window_s: float = DEFAULT_DOWN_WINDOW_S
    tolerance: float = TOLERANCE

    def __post_init__(self) -> None:
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ConfigError(f"sim: --autoscale needs 1 <= MIN <= MAX, got {self.min_replicas}:{self.max_replicas}")
        for name, value, low in (
            ("--scale-delay-s", self.delay_s, 0.0),
            ("--scale-down-window-s", self.down_window_s, 0.0),
            ("tolerance", self.tolerance, 0.0),
        ):
            if not (math.isfinite(value) and value >= low):
                raise ConfigError(f"sim: {name} must be a number >= {low:g}, got {value}")
        if not (math.isfinite(self.sync_s) and self.sync_s > 0):
            raise ConfigError(f"sim: --scale-sync-s must be > 0, got {self.sync_s}")
        if not (math.isfinite(self.target) and 0 < self.target <= 1):
            raise ConfigError(f"sim: --scale-target is a utilisation in (0, 1], got {self.target}")


def parse_autoscale(
    text: str | None,
    *,
    delay_s: float = DEFAULT_DELAY_S,
    target: float = DEFAULT_TARGET,
    sync_s: float = DEFAULT_SYNC_S,
    down_window_s: float = DEFAULT_DOWN_WINDOW_S,
) -> AutoscaleSpec | None:
    """``--autoscale MIN:MAX`` with its options (None without ``--autoscale``; ``ConfigError`` if malformed)."""
    if text is None:
        return None
    low, sep, high = text.strip().partition(":")
    try:
        bounds = (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise ConfigError(f"sim: --autoscale expects MIN:MAX replicas, e.g. 1:4, got {text!r}") from None
    return AutoscaleSpec(bounds[0], bounds[1], delay_s, target, sync_s, down_window_s)
