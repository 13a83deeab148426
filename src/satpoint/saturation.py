"""The saturation search driven against a target, one measured stage at a time (``satpoint find``).

Each measured stage is its own results segment, written as soon as it ends.  A stage that continues
the current monotonic sequence ramps from the previous target; a fresh sequence waits for the
server's queue to drain (a cool-down) and ramps from zero.  After the search, a profile sequence holds
50 %, 80 %, 90 % and 100 % of the saturation point to report the latency users will see there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from satpoint.analysis.search import (
    LIMITED,
    Measured,
    SearchParams,
    Step,
    bracket,
    confirm_rate,
    hold_for,
    next_step,
)
from satpoint.analysis.search_summary import PROFILE_FRACTIONS
from satpoint.analysis.summary import segment_stage_metrics
from satpoint.analysis.verdicts import Verdict
from satpoint.config import FindOptions, LoadOptions, RunConfig, VerdictRules
from satpoint.endpoints.prepare import prepare, probe_service_s, wait_until_idle
from satpoint.endpoints.spec import Target
from satpoint.engine.live import WINDOW_S, LiveSnapshot
from satpoint.metrics.results import Results, Segment, append_segment, write_header
from satpoint.metrics.stats import StageMetrics
from satpoint.plan import Stage
from satpoint.progress import OnEvent, say
from satpoint.session import Session, announce_target

#: stop a stage early when more requests are in flight than this many times what the low-load latency
#: needs at the current rate, plus the floor (the automatic cap is generous, so the cap rarely stops it)
OVERLOAD_INFLIGHT_FACTOR = 20.0
OVERLOAD_INFLIGHT_FLOOR = 200

#: a hold lasts at least this many probe latencies (slow servers: fill-up, then a window to judge)
SLOW_HOLD_LATENCIES = 4.0

#: (stages, start_rps, segment index, purpose) -> measured segment
Measure = Callable[[list[Stage], float, int, str], Segment]


def search_params(opts: FindOptions, start_rps: float) -> SearchParams:
    return SearchParams(
        start_rps=start_rps,
        growth=opts.growth,
        precision=opts.precision,
        max_rps=opts.max_rps,
        confirm_margin=opts.margin if opts.confirm else None,
    )


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


def start_rate_from_probe(service_s: float) -> float:
    """A quarter of what one worker serving one request at a time would sustain, at least 5 rps."""
    return max(5.0, round(0.25 / max(service_s, 1e-4), 1))


def run_search(
    results: Results,
    out_dir: Path,
    measure: Measure,
    opts: FindOptions,
    rules: VerdictRules,
    start_rps: float,
    stop: threading.Event | None = None,
    log: Callable[[str], None] = lambda s: None,
    cooldown: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    latency_hint_s: float | None = None,
    repeat: int = 0,
    history: list[Measured] | None = None,
    started_at: float | None = None,
) -> list[Measured]:
    """Measure stages until the search is done, the budget is spent or ``stop`` is set.

    ``latency_hint_s`` (a probe's answer time) lengthens holds for slow servers: the steady window must
    start after the pipeline has filled (about one latency after the ramp).  ``history`` resumes a
    search (of ``repeat``) with what it measured so far; the budget counts from ``started_at``."""
    stop = stop or threading.Event()
    params = search_params(opts, start_rps)
    history = list(history or [])
    t_start = clock() if started_at is None else started_at
    prev_rate = 0.0
    while not stop.is_set():
        step = next_step(history, params)
        if step is None:
            break
        hold = hold_for(step.rate_rps, opts.min_requests, opts.min_hold_s, opts.max_hold_s)
        if latency_hint_s:
            hold = max(hold, SLOW_HOLD_LATENCIES * latency_hint_s)
        if step.phase == "confirm":  # the answer is checked from idle, for longer
            hold = min(2 * hold, 2 * opts.max_hold_s)
        ramp = opts.ramp_s
        cost = ramp + hold + (opts.cooldown_s if step.fresh else 0.0)
        if clock() - t_start + cost > opts.budget_s:
            log(f"budget of {opts.budget_s:g} s reached: stopping the search")
            break
        if step.fresh and history:
            log(f"new sequence at {step.rate_rps:.1f} rps: cooling down {opts.cooldown_s:g} s so queues drain")
            cooldown(opts.cooldown_s)
        start = 0.0 if step.fresh else prev_rate
        seg = measure([Stage(step.rate_rps, ramp, hold)], start, len(results.segments), step.phase)
        seg.repeat = repeat
        append_segment(out_dir, results, seg)
        if seg.interrupted:
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
        history.append(Measured(step.rate_rps, m.verdict, step.phase))
        log(_describe(step, m.verdict, m.throughput_rps, m.latency_ms.get("p99"), bracket(history).ratio))
        prev_rate = step.rate_rps
    return history


def run_find(
    results: Results,
    out_dir: Path,
    measure: Measure,
    opts: FindOptions,
    rules: VerdictRules,
    start_rps: float,
    stop: threading.Event | None = None,
    log: Callable[[str], None] = lambda s: None,
    cooldown: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    latency_hint_s: float | None = None,
) -> dict[int, list[Measured]]:
    """``opts.repeats`` searches, then the latency profile of the answer (the lowest of them).

    When the search confirms its answers, profile stages at or below the per-replica target that are
    not stable count against the search that gave the answer: it continues below, and the profile is
    measured again for the new answer.  Returns each repeat's measurements."""
    stop = stop or threading.Event()
    t0 = clock()
    params = search_params(opts, start_rps)
    histories: dict[int, list[Measured]] = {}

    def search(k: int) -> None:
        histories[k] = run_search(
            results, out_dir, measure, opts, rules_now(), start_rps, stop, log, cooldown, clock,
            latency_hint_s=latency_hint_s, repeat=k, history=histories.get(k), started_at=t0,
        )  # fmt: skip

    def rules_now() -> VerdictRules:  # the baseline learnt by the first search applies to the next ones
        return results.config.rules if rules.baseline_p50_ms is None else rules

    for k in range(opts.repeats):
        if stop.is_set():
            break
        if opts.repeats > 1:
            log(f"search {k + 1} of {opts.repeats}")
        search(k)
    profiled: float | None = None
    while opts.profile and not stop.is_set():
        answers = {k: b for k, h in histories.items() if (b := bracket(h).stable_rps) is not None}
        if not answers:
            break
        k = min(answers, key=lambda i: answers[i])
        sat = answers[k]
        if sat == profiled or _limited_end(histories[k]):
            break
        cost = sum(st.duration_s for st in profile_stages(opts, sat)) + opts.cooldown_s
        if clock() - t0 + cost > opts.budget_s:
            log(f"budget of {opts.budget_s:g} s reached: no latency profile")
            break
        profiled = sat
        seg = run_profile(results, out_dir, measure, opts, sat, stop, log=log, cooldown=cooldown, repeat=k)
        if seg is None or seg.interrupted:
            break
        evidence = _profile_evidence(segment_stage_metrics(seg, results.config.rules), sat, params)
        if all(m.verdict == Verdict.STABLE for m in evidence):
            break
        log("a profile stage at or below the per-replica target was not stable: the search continues below it")
        histories[k] = histories[k] + evidence
        search(k)
    return histories


def _limited_end(history: list[Measured]) -> bool:
    """The search ended because the generator (or its connection cap) was the limit twice."""
    return bool(history) and history[-1].verdict in LIMITED


def _profile_evidence(judged: list[StageMetrics], saturation_rps: float, params: SearchParams) -> list[Measured]:
    """Profile stages the confirming search counts (those at or below the per-replica target)."""
    target = confirm_rate(saturation_rps, params)
    if target is None:
        return []
    return [Measured(m.target_rps, m.verdict, "profile") for m in judged if m.target_rps <= target * (1 + 1e-9)]


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
    cooldown: Callable[[float], None] = time.sleep,
    repeat: int = 0,
) -> Segment | None:
    """One monotonic sequence at 50/80/90/100 % of the saturation point; returns it (None if stopped)."""
    if stop is not None and stop.is_set():
        return None
    stages = profile_stages(opts, saturation_rps)
    log(f"profile: latency at {', '.join(f'{f:.0%}' for f in PROFILE_FRACTIONS)} of {saturation_rps:.1f} rps")
    cooldown(opts.cooldown_s)
    seg = measure(stages, 0.0, len(results.segments), "profile")
    seg.repeat = repeat
    append_segment(out_dir, results, seg)
    return seg


def profile_stages(opts: FindOptions, saturation_rps: float) -> list[Stage]:
    rates = [saturation_rps * frac for frac in PROFILE_FRACTIONS]
    return [Stage(r, opts.ramp_s, hold_for(r, opts.min_requests, opts.min_hold_s, opts.max_hold_s)) for r in rates]


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
    compare configurations at equal offered loads)."""
    stop = stop or threading.Event()
    announce_target(spec, on_event)
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
    if svc:  # the server's answer time at low load: tells a client-side cap from a saturated server
        rules = replace(rules, baseline_service_ms=round(svc * 1000, 4))
        prepared.latency_hint_s = svc
    config = RunConfig(
        kind="find", load=load, rules=rules, thresholds=thresholds, find=fopts.describe(first, rules.slo_ms)
    )
    session = Session(prepared, config, out_dir, on_event=on_event, stop=stop, server_info=server_info)
    say(on_event, f"searching (precision {fopts.precision:.0%}, budget {fopts.budget_s:g} s); results in {out_dir}")

    def cooldown(min_s: float) -> None:
        waited = wait_until_idle(prepared, min_s, svc)
        say(on_event, f"cool-down: {waited:.1f} s until the server answered at low-load speed again")

    def log(text: str) -> None:
        say(on_event, text)

    measure = _measure(session)
    run_find(
        session.results,
        session.out_dir,
        measure,
        replace(fopts, profile=fopts.profile and profile_rps is None),
        session.config.rules,
        first,
        stop,
        log=log,
        cooldown=cooldown,
        latency_hint_s=svc,
    )
    if fopts.profile and profile_rps and not stop.is_set():
        run_profile(session.results, session.out_dir, measure, fopts, profile_rps, stop, log=log, cooldown=cooldown)
    return session


def profile_session(session: Session, fopts: FindOptions, rate_rps: float) -> None:
    """Add a profile sequence at 50/80/90/100 % of ``rate_rps`` to a search's results."""
    svc = probe_service_s(session.prepared)

    def cooldown(min_s: float) -> None:
        wait_until_idle(session.prepared, min_s, svc)

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
