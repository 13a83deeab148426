"""The saturation search driven against a target, one measured stage at a time (``satpoint find``).

Each measured stage is its own results segment, written as soon as it ends.  A stage that continues
the current monotonic sequence ramps from the previous target; a fresh sequence waits for the
server's queue to drain (a cool-down) and ramps from zero.  After the search, a profile sequence holds
50 %, 80 %, 90 % and 100 % of the saturation point to report the latency users will see there.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from satpoint.analysis.search import Measured, SearchParams, Step, bracket, hold_for, next_step
from satpoint.analysis.search_summary import PROFILE_FRACTIONS
from satpoint.analysis.summary import build_summary, segment_stage_metrics
from satpoint.analysis.target_lost import HEADER_KEY, stopped_answering_at
from satpoint.analysis.verdicts import Verdict
from satpoint.config import FindOptions, LoadOptions, RunConfig, VerdictRules
from satpoint.endpoints.prepare import prepare, probe_service_s, wait_until_idle
from satpoint.endpoints.spec import Target
from satpoint.engine.live import WINDOW_S, LiveSnapshot
from satpoint.metrics.results import Results, Segment, append_segment, write_header
from satpoint.plan import Stage
from satpoint.progress import OnEvent, say
from satpoint.session import LOST_ERRORS, Session

#: (stages, start_rps, segment index, purpose) -> measured segment
Measure = Callable[[list[Stage], float, int, str], Segment]
#: (at least, at most) seconds: wait until the server has drained what the last stage left
Cooldown = Callable[[float, float], None]


def search_params(opts: FindOptions, start_rps: float) -> SearchParams:
    return SearchParams(start_rps=start_rps, growth=opts.growth, precision=opts.precision, max_rps=opts.max_rps)


def overload_rule(baseline_p50_ms: float | None) -> Callable[[LiveSnapshot], bool]:
    """When to stop a stage early as clearly saturated: more than half a second of requests waits for a
    free connection (the in-flight cap is full of unanswered requests), or recent latency is far beyond
    the low-load baseline.  Queueing further only fills the server with work it must drain later."""

    def rule(s: LiveSnapshot) -> bool:
        if s.backlog >= max(50, 0.5 * s.due_recent / WINDOW_S):
            return True
        if baseline_p50_ms is not None and len(s.latency_sample_s) >= 20:
            p50_ms = float(np.median(s.latency_sample_s)) * 1000
            return p50_ms > 50 * baseline_p50_ms + 1000
        return False

    return rule


def start_rate_from_probe(service_s: float) -> float:
    """A quarter of what one worker serving one request at a time would sustain, at least 5 rps."""
    return max(5.0, round(0.25 / max(service_s, 1e-4), 1))


def _sleep(min_s: float, max_s: float) -> None:
    """The cool-down without a target to probe: sleep ``min_s`` (at most ``max_s``)."""
    time.sleep(max(0.0, min(min_s, max_s)))


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


def profile_stages(opts: FindOptions, saturation_rps: float) -> list[Stage]:
    """The profile sequence: 50/80/90/100 % of the saturation point."""
    out = []
    for frac in PROFILE_FRACTIONS:
        rate = saturation_rps * frac
        out.append(Stage(rate, opts.ramp_s, hold_for(rate, opts.min_requests, opts.min_hold_s, opts.max_hold_s)))
    return out


def _profile_reserve(opts: FindOptions, budget: Budget, best_stable_rps: float | None) -> float:
    """What the profile will cost at most, given the best stable rate so far (the saturation point can
    only be at or above it, and higher rates hold shorter): reserved while the search runs."""
    if not opts.profile:
        return 0.0
    if best_stable_rps is None:  # nothing stable yet: the longest holds
        stages = [Stage(1.0, opts.ramp_s, opts.max_hold_s) for _ in PROFILE_FRACTIONS]
    else:
        stages = profile_stages(opts, best_stable_rps)
    return opts.cooldown_s + budget.stage_cost(stages)


def _lost(results: Results, out_dir: Path, when: str, error: BaseException, log: Callable[[str], None]) -> None:
    """Record that the target stopped answering between stages (nothing in the rows shows it)."""
    results.header[HEADER_KEY] = {"when": when, "error": str(error) or type(error).__name__}
    write_header(out_dir, results)
    log(f"the target stopped answering ({when}): {error}; stopping the search")


def run_search(
    results: Results,
    out_dir: Path,
    measure: Measure,
    opts: FindOptions,
    rules: VerdictRules,
    start_rps: float,
    stop: threading.Event | None = None,
    log: Callable[[str], None] = lambda s: None,
    cooldown: Cooldown = _sleep,
    clock: Callable[[], float] = time.monotonic,
    budget: Budget | None = None,
) -> list[Measured]:
    """Measure stages until the search is done, the budget is spent (leaving room for the profile),
    ``stop`` is set or the target stops answering."""
    stop = stop or threading.Event()
    budget = budget or Budget(opts.budget_s, clock(), clock)
    params = search_params(opts, start_rps)
    history: list[Measured] = []
    prev_rate = 0.0
    while not stop.is_set():
        step = next_step(history, params)
        if step is None:
            break
        hold = hold_for(step.rate_rps, opts.min_requests, opts.min_hold_s, opts.max_hold_s)
        stage = Stage(step.rate_rps, opts.ramp_s, hold)
        cools = step.fresh and bool(history)
        best = bracket(history).stable_rps
        # a stage that turns out stable may raise the saturation point: reserve the profile at the lower
        # of the two, which is the longer profile
        reserve = _profile_reserve(opts, budget, best)
        spare = budget.left() - budget.stage_cost([stage]) - reserve
        if spare < (opts.cooldown_s if cools else 0.0):
            after = " (the profile comes next)" if opts.profile and best else ""
            log(f"budget of {opts.budget_s:g} s reached: stopping the search{after}")
            break
        try:
            if cools:
                log(f"new sequence at {step.rate_rps:.1f} rps: cooling down {opts.cooldown_s:g} s so queues drain")
                cooldown(opts.cooldown_s, spare)
            start = 0.0 if step.fresh else prev_rate
            seg = measure([stage], start, len(results.segments), step.phase)
        except LOST_ERRORS as e:
            _lost(results, out_dir, f"after stage {len(history)}" if history else "before the first stage", e, log)
            break
        append_segment(out_dir, results, seg)
        if seg.interrupted:
            break
        if stopped_answering_at(seg.records) is not None:
            n = len(history) + 1
            log(f"the target stopped answering during stage {n} ({step.rate_rps:.1f} rps): stopping the search")
            break
        judged = segment_stage_metrics(seg, rules)
        if not judged:
            break
        m = judged[0]
        if rules.baseline_p50_ms is None and m.verdict == Verdict.STABLE and m.latency_ms.get("p50") is not None:
            # the first stable stage's p50 is the low-load baseline for the latency-knee rule
            rules = replace(rules, baseline_p50_ms=m.latency_ms["p50"])
            results.config = results.config.with_rules(rules)
            write_header(out_dir, results)
        history.append(Measured(step.rate_rps, m.verdict))
        log(_describe(step, m.verdict, m.throughput_rps, m.latency_ms.get("p99"), bracket(history).ratio))
        prev_rate = step.rate_rps
    return history


def _describe(step: Step, verdict: str, tp: float, p99: float | None, ratio: float | None) -> str:
    p = f"{p99:.1f} ms" if p99 is not None else "-"
    r = f", bracket ±{ratio:.1%}" if ratio is not None else ""
    return f"{step.phase:9s} {step.rate_rps:9.1f} rps → {verdict:17s} (throughput {tp:.1f}/s, p99 {p}{r})"


def run_profile(
    results: Results,
    out_dir: Path,
    measure: Measure,
    opts: FindOptions,
    saturation_rps: float,
    stop: threading.Event | None = None,
    log: Callable[[str], None] = lambda s: None,
    cooldown: Cooldown = _sleep,
    budget: Budget | None = None,
) -> None:
    """One monotonic sequence at 50/80/90/100 % of the saturation point (skipped, and said so, when what
    is left of ``budget`` cannot hold it)."""
    if stop is not None and stop.is_set():
        return
    stages = profile_stages(opts, saturation_rps)
    spare = math.inf
    if budget is not None:
        spare = budget.left() - budget.stage_cost(stages)
        if spare < opts.cooldown_s:
            need = opts.cooldown_s + budget.stage_cost(stages)
            log(f"no profile: it needs about {need:.0f} s and {max(0.0, budget.left()):.0f} s of the budget is left")
            return
    log(f"profile: latency at {', '.join(f'{f:.0%}' for f in PROFILE_FRACTIONS)} of {saturation_rps:.1f} rps")
    try:
        cooldown(opts.cooldown_s, spare)
        seg = measure(stages, 0.0, len(results.segments), "profile")
    except LOST_ERRORS as e:
        _lost(results, out_dir, "before the profile", e, log)
        return
    append_segment(out_dir, results, seg)
    if stopped_answering_at(seg.records) is not None:
        log("the target stopped answering during the profile")


def search_and_profile(
    results: Results,
    out_dir: Path,
    measure: Measure,
    opts: FindOptions,
    rules: VerdictRules,
    start_rps: float,
    budget: Budget,
    stop: threading.Event | None = None,
    log: Callable[[str], None] = lambda s: None,
    cooldown: Cooldown = _sleep,
    profile_rps: float | None = None,
) -> None:
    """The search, then (unless stopped, or the target was lost) the profile, all within ``budget``."""
    stop = stop or threading.Event()
    run_search(results, out_dir, measure, opts, rules, start_rps, stop, log, cooldown, budget.clock, budget)
    summary = build_summary(results)
    sat = profile_rps or summary.get("saturation_rps")
    if opts.profile and sat and not stop.is_set() and summary.get("target_lost") is None:
        run_profile(results, out_dir, measure, opts, sat, stop, log, cooldown, budget)


def search_target(
    spec: Target,
    load: LoadOptions,
    fopts: FindOptions,
    rules: VerdictRules,
    out_dir: Path,
    *,
    stop: threading.Event | None = None,
    on_event: OnEvent | None = None,
    server_info: dict[str, Any] | None = None,
    thresholds: tuple[str, ...] = (),
    profile_rps: float | None = None,
) -> Session:
    """Prepare a target, run the search (and the profile) into ``out_dir``; returns the session.

    ``profile_rps`` profiles at fractions of that rate instead of the search's own answer (used to
    compare configurations at equal offered loads).  ``fopts.budget_s`` covers everything after the
    pre-flight checks: stages, drains, cool-downs and the profile."""
    stop = stop or threading.Event()
    prepared = prepare(spec, load.max_inflight, seed=load.seed)
    first = fopts.start_rps
    svc = probe_service_s(prepared)
    if first is None:
        first = start_rate_from_probe(svc) if svc else 10.0
        say(
            on_event,
            f"probe: one request takes {svc * 1000:.2f} ms → first stage {first:g} rps"
            if svc
            else "probe unavailable: first stage 10 rps",
        )
    budget = Budget(fopts.budget_s, time.monotonic(), overhead_s=segment_overhead_s(load))
    config = RunConfig(
        kind="find", load=load, rules=rules, thresholds=thresholds, find=fopts.describe(first, rules.slo_ms)
    )
    session = Session(prepared, config, out_dir, on_event=on_event, stop=stop, server_info=server_info)
    say(on_event, f"searching (precision {fopts.precision:.0%}, budget {fopts.budget_s:g} s); results in {out_dir}")

    def cooldown(min_s: float, max_s: float) -> None:
        waited = wait_until_idle(prepared, min_s, svc, max_wait_s=max(min_s, min(60.0, max_s)))
        say(on_event, f"cool-down: {waited:.1f} s until the server answered at low-load speed again")

    def log(text: str) -> None:
        say(on_event, text)

    search_and_profile(
        session.results,
        session.out_dir,
        _measure(session),
        fopts,
        rules,
        first,
        budget,
        stop,
        log,
        cooldown,
        profile_rps,
    )
    return session


def segment_overhead_s(load: LoadOptions) -> float:
    """A segment's cost beyond its ramps and holds: the generator's start (spawned processes take a
    couple of seconds), the drain after the last due time, writing the rows."""
    return (2.0 if load.procs > 1 else 0.2) + load.drain_s + 0.5


def profile_session(session: Session, fopts: FindOptions, rate_rps: float) -> None:
    """Add a profile sequence at 50/80/90/100 % of ``rate_rps`` to a search's results."""
    svc = probe_service_s(session.prepared)

    def cooldown(min_s: float, max_s: float) -> None:
        wait_until_idle(session.prepared, min_s, svc, max_wait_s=max(min_s, min(60.0, max_s)))

    run_profile(
        session.results,
        session.out_dir,
        _measure(session),
        fopts,
        rate_rps,
        session.stop,
        log=lambda text: say(session.on_event, text),
        cooldown=cooldown,
    )


def _measure(session: Session) -> Measure:
    def measure(stages: list[Stage], start: float, index: int, purpose: str) -> Segment:
        baseline = session.config.rules.baseline_p50_ms
        return session.measure(
            stages,
            purpose=purpose,
            start_rps=start,
            abort_when=overload_rule(baseline) if purpose != "profile" else None,
            append=False,  # run_search and run_profile append what they measure
        )

    return measure
