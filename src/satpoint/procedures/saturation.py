"""The saturation search driven against a target, one measured stage at a time (``satpoint find``).

Each measured stage is its own results segment, written as soon as it ends.  A stage that continues
the current monotonic sequence ramps from the previous target; a fresh sequence waits for the
server's queue to drain (a cool-down) and ramps from zero.  After the search, a profile sequence holds
50 %, 80 %, 90 % and 100 % of the saturation point to report the latency users will see there, and,
with ``--flamegraph``, one more stage holds 95 % of it while py-spy records the server.  Last, with
``--hysteresis``, one segment tips the server over and steps the load down (``analysis.search.hysteresis``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from satpoint.analysis.search.budget_plan import plan_budget
from satpoint.analysis.search.holds import (
    FLAMEGRAPH_FRACTION,
    FLAMEGRAPH_OVERHEAD_S,
    Budget,
    cooldown_max_s,
    flamegraph_reserve,
    flamegraph_stage,
    profile_reserve,
    profile_stages,
    recovery_s,
    segment_overhead_s,
    slow_budget_line,
    slow_drain_s,
    stage_hold,
    start_rate_from_probe,
)
from satpoint.analysis.search.hysteresis import HYSTERESIS_PURPOSE
from satpoint.analysis.search.steps import (
    RETEST,
    Measured,
    SearchParams,
    Step,
    bracket,
    budget_stop_line,
    confirm_rate,
    next_step,
    published_answer,
)
from satpoint.analysis.search.summary import PROFILE_FRACTIONS, RECHECK_PURPOSE
from satpoint.analysis.search.target_lost import stopped_answering_at
from satpoint.analysis.search.verdicts import Verdict
from satpoint.analysis.summary.build import segment_stage_metrics
from satpoint.config import FindOptions, LoadOptions, RunConfig, VerdictRules
from satpoint.endpoints.prepare import prepare, probe_service_s, wait_until_idle
from satpoint.endpoints.spec import Target
from satpoint.engine.overload import overload_rule as overload_rule  # re-exported: the benchmarks use it
from satpoint.errors import ConfigError
from satpoint.metrics.results import Segment, write_header
from satpoint.metrics.stats import StageMetrics
from satpoint.observe.observer import Observer
from satpoint.plan import Stage
from satpoint.procedures.progress import OnEvent, say
from satpoint.procedures.saturation_hysteresis import hysteresis_reserve, run_hysteresis
from satpoint.procedures.search_run import (
    Cooldown as Cooldown,
)
from satpoint.procedures.search_run import (
    Measure as Measure,
)
from satpoint.procedures.search_run import (
    SearchRun as SearchRun,
)
from satpoint.procedures.session import LOST_ERRORS, Fleet, Session, announce_target

FLAMEGRAPH_PURPOSE = "flamegraph"


def search_params(opts: FindOptions, start_rps: float) -> SearchParams:
    return SearchParams(
        start_rps=start_rps,
        growth=opts.growth,
        precision=opts.precision,
        max_rps=opts.max_rps,
        confirm_margin=opts.margin if opts.confirm else None,
        retest=opts.retest,
    )


def run_search(
    run: SearchRun,
    rules: VerdictRules,
    start_rps: float,
    repeat: int = 0,
    history: list[Measured] | None = None,
) -> list[Measured]:
    """Measure stages until the search is done, the budget is spent (leaving room for the profile),
    ``stop`` is set or the target stops answering.  ``history`` resumes search ``repeat`` with what it
    measured so far.  Holds last at least ``SLOW_HOLD_LATENCIES`` probe latencies: the steady window
    of a slow server must start after its pipeline has filled (about one latency after the ramp)."""
    opts, budget, log = run.opts, run.spend, run.log
    params = search_params(opts, start_rps)
    history = list(history or [])
    prev_rate = 0.0
    while not run.stop.is_set():
        step = next_step(history, params)
        if step is None:
            break
        hold = stage_hold(opts, step.rate_rps, run.latency_hint_s)
        if step.phase == "confirm":  # the answer is checked from idle, for longer (never shorter)
            hold = max(hold, min(2 * hold, 2 * opts.max_hold_s))
        stage = Stage(step.rate_rps, opts.ramp_s, hold)
        cools = step.fresh and bool(history)
        # after an overloaded stage, and before a retest, the server gets longer to recover
        rest_s = recovery_s(opts, step.phase, history[-1].verdict if history else None)
        best = bracket(history).stable_rps
        # a stage that turns out stable may raise the saturation point: reserve the profile at the lower
        # of the two, which is the longer profile
        reserve = profile_reserve(opts, budget, best, run.latency_hint_s) + hysteresis_reserve(
            opts, budget, best, run.latency_hint_s
        )
        if run.plan is not None:  # the later searches' shares, and the baseline's hold after them all
            reserve += run.plan.later_searches_s(repeat) + run.plan.hold_s
        spare = budget.left() - budget.stage_cost([stage]) - reserve
        if spare < (rest_s if cools else 0.0):
            need, profile_next = budget.stage_cost([stage]) + reserve, bool(opts.profile and best)
            log(
                budget_stop_line(opts.budget_s, budget.left(), len(history), stage.target_rps, hold, need, profile_next)
            )
            break
        try:
            if cools:
                what = "measuring it again" if step.phase == RETEST else "new sequence"
                log(f"{what} at {step.rate_rps:.1f} rps: cooling down {rest_s:g} s so queues drain")
                run.cooldown(rest_s, spare)
            start = 0.0 if step.fresh else prev_rate
            seg = run.measure([stage], start, len(run.results.segments), step.phase)
        except LOST_ERRORS as e:
            run.lost(f"after stage {len(history)}" if history else "before the first stage", e)
            break
        run.append(seg, repeat)
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
            run.results.config = run.results.config.with_rules(rules)
            write_header(run.out_dir, run.results)
        history.append(Measured(step.rate_rps, m.verdict, step.phase, m.throughput_rps))
        log(_describe(step, m.verdict, m.throughput_rps, m.latency_ms.get("p99"), bracket(history).ratio))
        prev_rate = step.rate_rps
    return history


def _describe(step: Step, verdict: str, tp: float, p99: float | None, ratio: float | None) -> str:
    p = f"{p99:.1f} ms" if p99 is not None else "-"
    r = f", bracket ±{ratio:.1%}" if ratio is not None else ""
    return f"{step.phase:9s} {step.rate_rps:9.1f} rps → {verdict:17s} (throughput {tp:.1f}/s, p99 {p}{r})"


def run_profile(run: SearchRun, saturation_rps: float, repeat: int = 0) -> Segment | None:
    """One monotonic sequence at 50/80/90/100 % of the saturation point (skipped, and said so, when what
    is left of the budget cannot hold it); returns it, or None when it was not measured."""
    if run.stop.is_set():
        return None
    opts, budget = run.opts, run.spend
    stages = profile_stages(opts, saturation_rps, run.latency_hint_s)
    spare = (
        budget.left() - budget.stage_cost(stages) - flamegraph_reserve(opts, budget, saturation_rps, run.latency_hint_s)
    )
    if spare < opts.cooldown_s:
        need = opts.cooldown_s + budget.stage_cost(stages)
        run.log(f"no profile: it needs about {need:.0f} s and {max(0.0, budget.left()):.0f} s of the budget is left")
        return None
    run.log(f"profile: latency at {', '.join(f'{f:.0%}' for f in PROFILE_FRACTIONS)} of {saturation_rps:.1f} rps")
    try:
        run.cooldown(opts.cooldown_s, spare)
        seg = run.measure(stages, 0.0, len(run.results.segments), "profile")
    except LOST_ERRORS as e:
        run.lost("before the profile", e)
        return None
    run.append(seg, repeat)
    if stopped_answering_at(seg.records) is not None:
        run.log("the target stopped answering during the profile")
    return seg


def run_find(
    run: SearchRun, rules: VerdictRules, start_rps: float, profile_rps: float | None = None
) -> dict[int, list[Measured]]:
    """``opts.repeats`` searches, then the latency profile of the answer (the lowest of them), all within
    the budget; returns each search's measurements.

    When the search confirms its answers, a profile stage (at most the answer) that is not stable is
    measured again, alone from idle and held as a confirmation (one stage of a sequence is one marginal
    measurement); when that is not stable either, it counts against the search that gave the answer: it
    continues below it, and the profile is measured again for the new answer.  ``profile_rps`` profiles
    that rate instead (and only once)."""
    opts = run.opts
    params = search_params(opts, start_rps)
    histories: dict[int, list[Measured]] = {}

    def search(k: int) -> None:
        rules_now = run.results.config.rules if rules.baseline_p50_ms is None else rules  # the baseline learnt
        histories[k] = run_search(run, rules_now, start_rps, repeat=k, history=histories.get(k))

    for k in range(opts.repeats):
        if run.stop.is_set() or run.target_gone():
            break
        if opts.repeats > 1:
            run.log(f"search {k + 1} of {opts.repeats}")
        search(k)
    if profile_rps is not None:
        if opts.profile and not run.stop.is_set() and not run.target_gone():
            run_profile(run, profile_rps)
        return histories
    profiled: float | None = None
    while opts.profile and not run.stop.is_set() and not run.target_gone():
        # a search that did not bracket the capacity is a lower bound: never the answer, never profiled (nor
        # one the budget cut before its precision, unless it contradicts those that reached it)
        chosen = published_answer(histories, params.precision)
        if chosen is None:
            if any(bracket(h).stable_rps is not None for h in histories.values()):
                run.log("no profile: no search bracketed the capacity, so the answer is a lower bound")
            break
        k, sat = chosen
        if sat == profiled:
            break
        profiled = sat
        seg = run_profile(run, sat, repeat=k)
        if seg is None or seg.interrupted or run.target_gone():
            break
        evidence = _profile_evidence(segment_stage_metrics(seg, run.results.config.rules), sat, params)
        if all(m.verdict == Verdict.STABLE for m in evidence):
            break
        # one profile stage is a single measurement within a sequence: it overturns a bracketed answer
        # only when the same rate, measured again from idle and held as a confirmation, is not stable either
        checked = [m if m.verdict == Verdict.STABLE else _recheck(run, m, k) for m in evidence]
        kept = [m for m in checked if m is not None]
        if all(m.verdict == Verdict.STABLE for m in kept):
            break
        run.log("a profile stage was not stable, twice: the search continues below it")
        histories[k] = histories[k] + kept
        search(k)
    return histories


def _recheck(run: SearchRun, m: Measured, repeat: int) -> Measured | None:
    """Measure a profile stage's rate again, alone, from idle and held as a confirmation (purpose
    ``RECHECK_PURPOSE``); its verdict is what the search counts (None: not measured, for want of budget,
    or the run stopped)."""
    if run.stop.is_set() or run.target_gone():
        return None
    opts, budget = run.opts, run.spend
    hold = stage_hold(opts, m.rate_rps, run.latency_hint_s)
    stage = Stage(m.rate_rps, opts.ramp_s, max(hold, min(2 * hold, 2 * opts.max_hold_s)))
    spare = budget.left() - budget.stage_cost([stage])
    if spare < opts.cooldown_s:
        run.log(
            f"the profile stage at {m.rate_rps:.1f} rps was {m.verdict}, and the {budget.stage_cost([stage]):.0f} s "
            "to measure it again are not left in the budget: the answer stands, unconfirmed by its profile"
        )
        return None
    run.log(f"the profile stage at {m.rate_rps:.1f} rps was {m.verdict}: measuring it again from idle")
    try:
        run.cooldown(opts.cooldown_s, spare)
        seg = run.measure([stage], 0.0, len(run.results.segments), RECHECK_PURPOSE)
    except LOST_ERRORS as e:
        run.lost("before measuring a profile stage again", e)
        return None
    run.append(seg, repeat)
    judged = segment_stage_metrics(seg, run.results.config.rules)
    if seg.interrupted or not judged or stopped_answering_at(seg.records) is not None:
        return None
    run.log(f"recheck   {m.rate_rps:9.1f} rps → {judged[0].verdict}")
    return Measured(m.rate_rps, judged[0].verdict, "profile", judged[0].throughput_rps)


def run_flamegraph(
    run: SearchRun, histories: dict[int, list[Measured]], not_recorded: Callable[[str], None]
) -> Segment | None:
    """After the search: hold ``FLAMEGRAPH_FRACTION`` of the saturation point (the lowest answer of the
    searches) while py-spy records the server (``measure`` with purpose ``flamegraph``).  When it
    cannot be held, ``not_recorded`` gets why."""
    if run.stop.is_set():
        not_recorded("the run was interrupted before the flame graph's stage")
        return None
    if run.target_gone():
        not_recorded("the target stopped answering: no stage to record")
        return None
    chosen = published_answer(histories, run.opts.precision)
    if chosen is None:
        not_recorded("no search bracketed the saturation point: there is no stage near it to record")
        return None
    opts, budget = run.opts, run.spend
    stage = flamegraph_stage(opts, chosen[1], run.latency_hint_s)
    need = opts.cooldown_s + budget.stage_cost([stage]) + FLAMEGRAPH_OVERHEAD_S
    if budget.left() < need:
        not_recorded(f"its stage needs about {need:.0f} s and {max(0.0, budget.left()):.0f} s of the budget is left")
        return None
    run.log(
        f"flame graph: holding {stage.target_rps:.1f} rps ({FLAMEGRAPH_FRACTION:.0%} of the saturation point) "
        "while py-spy records the server"
    )
    try:
        run.cooldown(opts.cooldown_s, budget.left() - need + opts.cooldown_s)
        seg = run.measure([stage], 0.0, len(run.results.segments), FLAMEGRAPH_PURPOSE)
    except LOST_ERRORS as e:
        run.lost("before the flame graph's stage", e)
        return None
    run.append(seg, 0)
    return seg


def _profile_evidence(judged: list[StageMetrics], saturation_rps: float, params: SearchParams) -> list[Measured]:
    """Profile stages the confirming search counts: all of them, up to the saturation point itself (a
    stage there that is not stable, twice, contradicts the answer as a refinement stage would)."""
    if confirm_rate(saturation_rps, params) is None:
        return []
    return [
        Measured(m.target_rps, m.verdict, "profile", m.throughput_rps)
        for m in judged
        if m.target_rps <= saturation_rps * (1 + 1e-9)
    ]


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
    observer: Observer | None = None,
    fleet: Fleet | None = None,
    hold_rps: float | None = None,
) -> Session:
    """Prepare a target, run the search (and the profile) into ``out_dir``; returns the session.

    ``profile_rps`` profiles at fractions of that rate instead of the search's own answer (used to
    compare configurations at equal offered loads).  ``fopts.budget_s`` covers everything after the
    pre-flight checks: stages, drains, cool-downs, the profile and every extra, planned before the first
    stage (``analysis.search.budget_plan``: grown for ``--repeats`` and the extras, or, given and too small for
    them, refused with ``ConfigError``); ``hold_rps`` is ``--baseline``'s hold after it, planned in."""
    stop = stop or threading.Event()
    announce_target(spec, on_event)
    prepared = prepare(spec, load.max_inflight, seed=load.seed, grpc_connections=load.grpc_connections)
    first = fopts.start_rps
    svc = probe_service_s(prepared)
    if first is None:
        first = start_rate_from_probe(svc) if svc else 10.0
        said = f"probe: one request takes {svc * 1000:.2f} ms → first stage {first:g} rps" if svc else None
        say(on_event, said or "probe unavailable: first stage 10 rps")
    drain = slow_drain_s(load, svc)
    if drain > load.drain_s:
        say(on_event, f"a slow server: each segment drains for up to {drain:.0f} s so its last requests finish")
        load = replace(load, drain_s=drain)
    scrapes = observer is not None and bool(observer.options.metrics_urls)
    overhead = segment_overhead_s(load, scrapes)
    plan = plan_budget(fopts, Budget(fopts.budget_s, 0.0, overhead_s=overhead), first, svc, hold_rps, profile_rps)
    refused = plan.refusal()
    if refused:
        raise ConfigError(refused)
    fopts = replace(fopts, budget_s=plan.budget_s, budget_given=fopts.budget_fixed)
    say(on_event, plan.line())
    budget = Budget(fopts.budget_s, time.monotonic(), overhead_s=overhead)
    slow = slow_budget_line(fopts, budget, first, svc)
    if slow:
        say(on_event, slow)
    if svc:  # the server's answer time at low load: tells a client-side cap from a saturated server
        rules = replace(rules, baseline_service_ms=round(svc * 1000, 4))
        prepared.latency_hint_s = svc
    described = {**fopts.describe(first, rules.slo_ms), "budget_plan": plan.to_dict()}
    config = RunConfig(kind="find", load=load, rules=rules, thresholds=thresholds, find=described)
    session = Session(
        prepared, config, out_dir, on_event=on_event, stop=stop, server_info=server_info, observer=observer, fleet=fleet
    )
    say(on_event, f"searching (precision {fopts.precision:.0%}, budget {fopts.budget_s:g} s); results in {out_dir}")

    def cooldown(min_s: float, max_s: float) -> None:
        waited = wait_until_idle(prepared, min_s, svc, max_wait_s=cooldown_max_s(min_s, max_s, svc), stop=stop)
        say(on_event, f"cool-down: {waited:.1f} s until the server answered at low-load speed again")

    def log(text: str) -> None:
        say(on_event, text)

    run = SearchRun(session.results, session.out_dir, _measure(session), fopts, stop, log, cooldown, budget, svc, plan)
    histories = run_find(run, rules, first, profile_rps)
    if fopts.flamegraph:
        run_flamegraph(run, histories, session.flamegraph_not_recorded)
    if fopts.hysteresis:  # last: it tips the server over, which nothing after it should see
        run_hysteresis(run, histories)
    return session


def profile_session(session: Session, fopts: FindOptions, rate_rps: float) -> None:
    """Add a profile sequence at 50/80/90/100 % of ``rate_rps`` to a search's results."""
    svc = probe_service_s(session.prepared)

    def cooldown(min_s: float, max_s: float) -> None:
        wait_until_idle(session.prepared, min_s, svc, max_wait_s=cooldown_max_s(min_s, max_s, svc), stop=session.stop)

    def log(text: str) -> None:
        say(session.on_event, text)

    run = SearchRun(session.results, session.out_dir, _measure(session), fopts, session.stop, log, cooldown)
    run_profile(run, rate_rps)


def _measure(session: Session) -> Measure:
    def measure(stages: list[Stage], start: float, index: int, purpose: str) -> Segment:
        baseline = session.config.rules.baseline_p50_ms
        held = ("profile", FLAMEGRAPH_PURPOSE, HYSTERESIS_PURPOSE)
        return session.measure(
            stages,
            purpose=purpose,
            start_rps=start,
            # the profile's, the flame graph's and the hysteresis sequence's stages are held whatever
            # happens (the flame graph should show the server at its limit, for the whole hold, even if
            # 95 % turns out too much; the hysteresis sequence overloads the server on purpose)
            abort_when=overload_rule(baseline) if purpose not in held else None,
            append=False,  # run_search and run_profile append what they measure
            flamegraph_stage=0 if purpose == FLAMEGRAPH_PURPOSE else None,
            descending=purpose == HYSTERESIS_PURPOSE,  # its steps go down: satpoint's own sequence
        )

    return measure
