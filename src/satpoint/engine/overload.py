"""When ``find`` stops a stage early as clearly overloaded: a pure rule on the generator's live snapshot."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from satpoint.engine.live import WINDOW_S, LiveSnapshot

#: stop a stage early when more requests are in flight than this many times what the low-load latency
#: needs at the current rate, plus the floor (the automatic cap is generous, so the cap rarely stops it)
OVERLOAD_INFLIGHT_FACTOR = 20.0
OVERLOAD_INFLIGHT_FLOOR = 200


def overload_rule(baseline_p50_ms: float | None) -> Callable[[LiveSnapshot], bool]:
    """When to stop a stage early as clearly saturated: more than half a second of requests waits for a
    free connection (the in-flight cap is full of unanswered requests), far more requests are in flight
    than the low-load latency needs at this rate, or recent latency is far beyond the low-load baseline.
    Queueing further only fills the server with work it must drain later."""

    def rule(s: LiveSnapshot) -> bool:
        if s.backlog >= max(50, 0.5 * s.due_recent / WINDOW_S):
            return True
        if (
            baseline_p50_ms is not None
            and s.inflight
            > OVERLOAD_INFLIGHT_FACTOR * (s.due_recent / WINDOW_S * baseline_p50_ms / 1000) + OVERLOAD_INFLIGHT_FLOOR
        ):
            return True  # by Little's law, latency is far above the baseline: the queue is the server's
        if baseline_p50_ms is not None and len(s.latency_sample_s) >= 20:
            p50_ms = float(np.median(s.latency_sample_s)) * 1000
            return p50_ms > 50 * baseline_p50_ms + 1000
        return False

    return rule
