"""How long the stages of ``satpoint find`` hold, drain and cool down, and the rate it starts at: fitted to
the rate (requests enough for a p99) and to the server's latency (a slow server fills its pipeline for
about one latency, and a queue growing by a few percent shows only over a window of several); and what
they cost of ``--budget-s``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from satpoint.analysis.search.steps import hold_for
from satpoint.analysis.search.summary import PROFILE_FRACTIONS
from satpoint.config import FindOptions, LoadOptions
from satpoint.engine.lead import start_lead_s
from satpoint.observe.agent import SCRAPE_ROUND_S
from satpoint.plan import Stage

#: a hold lasts at least this many probe latencies (slow servers: fill-up, then a window to judge) ...
SLOW_HOLD_LATENCIES = 6.0
#: ... and, when the requests ``hold_for`` asks for do not fit in ``--max-hold``, up to this many latencies
#: (at most twice ``--max-hold``): a slow server's window holds few requests, and a queue that grows by a
#: few percent of the rate shows in their latency trend only over enough of them
SLOW_HOLD_MAX_LATENCIES = 12.0
#: a slow server's segments drain for at least this many probe latencies (at most the timeout), so that
#: the requests due at the end of a window are followed until they finish
SLOW_DRAIN_LATENCIES = 3.0
#: the first stage holds about this many requests in flight at the probe's latency when 5 rps would be
#: more (a slow server: 5 rps at 8 s a request is 40 requests in flight, past many servers' capacity)
START_INFLIGHT = 8.0
#: the flame graph's stage holds this fraction of the saturation point: the server as busy as it gets
#: while still stable (at 100 % a queue may build and the profile would show a server that waits)
FLAMEGRAPH_FRACTION = 0.95


def start_rate_from_probe(service_s: float) -> float:
    """A quarter of what one worker serving one request at a time would sustain, at least 5 rps, or, for
    a slow server, at least ``START_INFLIGHT`` requests in flight (Little's law) when that is less."""
    service_s = max(service_s, 1e-4)
    return max(min(5.0, round(START_INFLIGHT / service_s, 2)), round(0.25 / service_s, 1))


def stage_hold(opts: FindOptions, rate_rps: float, latency_s: float | None) -> float:
    """How long a stage at ``rate_rps`` holds: ``hold_for`` (enough requests for a p99, within the hold
    bounds), and for a server whose answers take ``latency_s`` (the probe), at least
    ``SLOW_HOLD_LATENCIES`` of them (the pipeline fills for about one latency, then the window), and up
    to ``SLOW_HOLD_MAX_LATENCIES`` of them (at most twice ``--max-hold``) when the requests asked for do not
    fit in ``--max-hold``."""
    hold = hold_for(rate_rps, opts.min_requests, opts.min_hold_s, opts.max_hold_s)
    if latency_s:
        hold = max(hold, SLOW_HOLD_LATENCIES * latency_s)
        if hold_for(rate_rps, opts.min_requests, opts.min_hold_s, math.inf) > hold:
            hold = max(hold, min(SLOW_HOLD_MAX_LATENCIES * latency_s, 2 * opts.max_hold_s))
    return hold


def slow_drain_s(load: LoadOptions, latency_s: float | None) -> float:
    """The drain a segment needs to follow its last requests until they finish (a slow server's latency
    can exceed ``--drain``), at most the timeout."""
    if not latency_s:
        return load.drain_s
    return max(load.drain_s, min(load.timeout_s, SLOW_DRAIN_LATENCIES * latency_s))


def profile_stages(opts: FindOptions, saturation_rps: float, latency_s: float | None = None) -> list[Stage]:
    """The profile sequence: 50/80/90/100 % of the saturation point, held as search stages."""
    return [
        Stage(saturation_rps * frac, opts.ramp_s, stage_hold(opts, saturation_rps * frac, latency_s))
        for frac in PROFILE_FRACTIONS
    ]


def flamegraph_stage(opts: FindOptions, saturation_rps: float, latency_s: float | None = None) -> Stage:
    """The stage py-spy records: ``FLAMEGRAPH_FRACTION`` of the saturation point, held as a search stage."""
    rate = saturation_rps * FLAMEGRAPH_FRACTION
    return Stage(rate, opts.ramp_s, stage_hold(opts, rate, latency_s))


def cooldown_max_s(min_s: float, max_s: float, latency_s: float | None) -> float:
    """How long a cool-down may probe for an idle server: a minute, or for a slow server ten of its
    latencies (a queue of a few hundred requests drains in a few of them), within what the budget spares."""
    return max(min_s, min(max(60.0, 10 * (latency_s or 0.0)), max_s))


#: the least a cool-down waits after a stage that was not stable, and before a retest: MLServer stays slow
#: for a while after an overload (benchmarks/RESULTS.md, "One server, one answer")
RECOVERY_S = 5.0


def recovery_s(opts: FindOptions, phase: str, last_verdict: str | None) -> float:
    """The least a cool-down waits before a fresh stage of ``phase``: ``--cooldown``, and at least
    ``RECOVERY_S`` before a retest or after a stage that was not stable (an overload)."""
    if phase == "retest" or (last_verdict is not None and last_verdict != "stable"):
        return max(opts.cooldown_s, RECOVERY_S) if opts.cooldown_s > 0 else 0.0
    return opts.cooldown_s


#: what a flame graph stage costs beyond its ramp and hold: py-spy writing its file, the SVG
FLAMEGRAPH_OVERHEAD_S = 3.0


@dataclass(frozen=True)
class Budget:
    """``--budget-s`` for the whole of ``find``: every stage's ramp, hold and drain, the cool-downs and
    the profile.  ``overhead_s`` is what a segment costs beyond its ramps and holds (the generator's
    start, the drain after the last due time, writing the segment)."""

    budget_s: float
    start: float  # clock() when find began
    clock: Callable[[], float] = time.monotonic
    overhead_s: float = 0.0

    def left(self) -> float:
        return self.budget_s - (self.clock() - self.start)

    def stage_cost(self, stages: list[Stage]) -> float:
        return sum(s.duration_s for s in stages) + self.overhead_s


def longest_hold(opts: FindOptions, latency_s: float | None) -> float:
    return stage_hold(opts, 1e-9, latency_s)  # the lowest rate holds longest


def flamegraph_reserve(
    opts: FindOptions, budget: Budget, best_stable_rps: float | None, latency_s: float | None
) -> float:
    if not opts.flamegraph:
        return 0.0
    if best_stable_rps is None:
        stage = Stage(1.0, opts.ramp_s, longest_hold(opts, latency_s))
    else:
        stage = flamegraph_stage(opts, best_stable_rps, latency_s)
    return opts.cooldown_s + budget.stage_cost([stage]) + FLAMEGRAPH_OVERHEAD_S


def profile_reserve(opts: FindOptions, budget: Budget, best_stable_rps: float | None, latency_s: float | None) -> float:
    """What the profile (and the flame graph's stage) will cost at most, given the best stable rate so
    far (the saturation point can only be at or above it, and higher rates hold shorter): reserved
    while the search runs."""
    flame = flamegraph_reserve(opts, budget, best_stable_rps, latency_s)
    if not opts.profile:
        return flame
    if best_stable_rps is None:  # nothing stable yet: the longest holds
        stages = [Stage(1.0, opts.ramp_s, longest_hold(opts, latency_s)) for _ in PROFILE_FRACTIONS]
    else:
        stages = profile_stages(opts, best_stable_rps, latency_s)
    return opts.cooldown_s + budget.stage_cost(stages) + flame


#: the stages a search typically measures (a staircase of three or four, five bisections at 5 %, the
#: confirmation): what the up-front estimate of a slow server's budget counts
TYPICAL_SEARCH_STAGES = 10


def slow_budget_line(opts: FindOptions, budget: Budget, first_rps: float, latency_s: float | None) -> str | None:
    """What a slow server's ``find`` needs, said up front when the budget is smaller (None: not a slow
    server, whose holds its latency lengthens, or the budget is enough)."""
    plain = hold_for(first_rps, opts.min_requests, opts.min_hold_s, opts.max_hold_s)
    hold = stage_hold(opts, first_rps, latency_s)
    if not latency_s or hold <= plain:
        return None
    stage = Stage(first_rps, opts.ramp_s, hold)
    need = TYPICAL_SEARCH_STAGES * (budget.stage_cost([stage]) + opts.cooldown_s)
    need += profile_reserve(opts, budget, first_rps, latency_s)
    if opts.budget_s >= need:
        return None
    return (
        f"a slow server (one request takes {latency_s:.1f} s): its stages hold about {hold:.0f} s and a search "
        f"takes about {TYPICAL_SEARCH_STAGES} of them, with the profile about {need:.0f} s; the budget of "
        f"{opts.budget_s:g} s may end the search before its answer is bracketed and confirmed: give "
        f"--budget-s {math.ceil(need / 10) * 10:.0f}"
    )


def segment_overhead_s(load: LoadOptions, scrapes: bool = False) -> float:
    """A segment's cost beyond its ramps and holds: the generator's start (spawned processes take a
    couple of seconds; with Ray, the clock round trips and the start lead), the drain, writing the rows,
    and with ``scrapes`` (an observer scraping ``--metrics-url`` endpoints) its two marks, each a scrape
    round of at most ``SCRAPE_ROUND_S``."""
    start = load.ray.lead_s + 1.0 if load.ray else start_lead_s(load.procs)
    return start + load.drain_s + 0.5 + (2 * SCRAPE_ROUND_S if scrapes else 0.0)
