"""What every step of one ``find`` shares (``SearchRun``): the results being written, how a stage is measured and
cooled down, the budget."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from satpoint.analysis.search.budget_plan import BudgetPlan
from satpoint.analysis.search.holds import (
    Budget,
)
from satpoint.analysis.search.target_lost import HEADER_KEY, stopped_answering_at
from satpoint.config import FindOptions
from satpoint.engine.overload import overload_rule as overload_rule  # re-exported: the benchmarks use it
from satpoint.metrics.results import Results, Segment, append_segment, write_header
from satpoint.plan import Stage

#: (stages, start_rps, segment index, purpose) -> measured segment
Measure = Callable[[list[Stage], float, int, str], Segment]


#: (at least, at most) seconds: wait until the server has drained what the last stage left
Cooldown = Callable[[float, float], None]


def _sleep(min_s: float, max_s: float) -> None:
    """The cool-down without a target to probe: sleep ``min_s`` (at most ``max_s``)."""
    time.sleep(max(0.0, min(min_s, max_s)))


def _quiet(_: str) -> None:
    return None


@dataclass
class SearchRun:
    """What every step of one ``find`` shares: the results being written and where, how a stage is
    measured, the search's options, the stop event, what it says, how it cools down, its budget, and
    the latency a probe saw before the run (slow servers get longer holds)."""

    results: Results
    out_dir: Path
    measure: Measure
    opts: FindOptions
    stop: threading.Event = field(default_factory=threading.Event)
    log: Callable[[str], None] = _quiet
    cooldown: Cooldown = _sleep
    budget: Budget | None = None
    latency_hint_s: float | None = None
    #: what the budget was planned for: each search leaves the later searches' share (None: no shares)
    plan: BudgetPlan | None = None

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = Budget(self.opts.budget_s, time.monotonic())

    @property
    def spend(self) -> Budget:
        assert self.budget is not None
        return self.budget

    def target_gone(self) -> bool:
        """The target stopped answering: recorded between stages, or visible in the last segment's rows."""
        if self.results.header.get(HEADER_KEY) is not None:
            return True
        segs = self.results.segments
        return bool(segs) and stopped_answering_at(segs[-1].records) is not None

    def append(self, seg: Segment, repeat: int) -> None:
        seg.repeat = repeat
        append_segment(self.out_dir, self.results, seg)

    def lost(self, when: str, error: BaseException) -> None:
        """Record that the target stopped answering between stages (nothing in the rows shows it)."""
        self.results.header[HEADER_KEY] = {"when": when, "error": str(error) or type(error).__name__}
        write_header(self.out_dir, self.results)
        self.log(f"the target stopped answering ({when}): {error}; stopping the search")
