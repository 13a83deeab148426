"""Stage verdicts: a pure function of a stage's steady-window metrics.

Order matters: requests the generator could not send for want of its own descriptors or buffers
first (``generator_limited``, whatever the error rate: these failures are not the server's), then
errors (``failing``), then the generator's own health (``generator_limited``: a generator that fell
behind produces numbers that are not the server's; ``client_limited``: requests
waited for one of the generator's connections while the server kept answering as fast as at low load,
so the in-flight cap, not the server, set the pace), then the server's queue (``saturated``), then the
optional latency objective (``slo_violated``), else ``stable``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from satpoint.analysis.search.thresholds import STREAM_METRICS, stream_value
from satpoint.config import VerdictRules
from satpoint.metrics.records import ERROR_NAMES, Outcome
from satpoint.metrics.stats import StageMetrics

#: the error class of requests the generator could not send for want of its own resources
GENERATOR_RESOURCES_CLASS = ERROR_NAMES[Outcome.GENERATOR_RESOURCES]


class Verdict(StrEnum):
    """A stage's verdict (a ``str``, so it compares and serialises as its value)."""

    STABLE = "stable"
    SATURATED = "saturated"
    GENERATOR_LIMITED = "generator_limited"
    CLIENT_LIMITED = "client_limited"
    FAILING = "failing"
    SLO_VIOLATED = "slo_violated"
    #: interrupted before its steady window held enough to judge (see ``analysis.summary.build.cut_stage_metrics``)
    INCOMPLETE = "incomplete"


def judge(m: StageMetrics, rules: VerdictRules) -> tuple[Verdict, list[str]]:
    reasons: list[str] = []
    window = m.window_end_s - m.window_start_s
    if m.requests == 0:
        return Verdict.FAILING, ["no requests fell in the steady window"]
    starved = m.errors.get(GENERATOR_RESOURCES_CLASS, 0)
    if starved:  # before the error rate: these failures are the generator's, not the server's
        return Verdict.GENERATOR_LIMITED, [
            f"{starved} of {m.requests} requests could not open a connection: the generator ran out of file "
            "descriptors or socket buffers (EMFILE, ENFILE or ENOBUFS); these numbers are not the server's. "
            "Raise the open-files limit (`ulimit -n`), or lower --max-inflight"
        ]
    if m.error_rate > rules.max_error_rate:
        top = ", ".join(f"{k}={v}" for k, v in sorted(m.errors.items(), key=lambda kv: -kv[1])[:3])
        return Verdict.FAILING, [f"error rate {m.error_rate:.1%} > {rules.max_error_rate:.1%} ({top})"]
    glag = m.generator_lag_ms.get("p99")
    # a slow server's answers take seconds: a send a few tens of ms late (a descheduled generator) changes
    # nothing of what is measured, so the limit grows with the latency
    lag_limit = max(rules.generator_lag_p99_ms, rules.generator_lag_latency_frac * (m.latency_ms.get("p50") or 0.0))
    if glag is not None and glag > lag_limit:
        return Verdict.GENERATOR_LIMITED, [
            f"the generator fell behind its schedule: p99 send lag {glag:.1f} ms with free connections "
            f"(limit {lag_limit:g} ms); these numbers are not the server's"
        ]
    if m.waited_fraction > rules.waited_frac:
        limited = _client_limited(m, rules)
        if limited:
            return Verdict.CLIENT_LIMITED, [limited]
    growth_limit = max(rules.queue_growth_frac * m.offered_rps, rules.queue_growth_min / max(window, 1e-9))
    p50_now = m.latency_ms.get("p50") or 0.0
    latency_rise_ms = m.latency_trend_ms_per_s * window
    rise_floor_ms = max(rules.queue_trend_frac * p50_now, rules.queue_trend_floor_ms)
    # the latency must rise by more than its own noise (a slow server's window holds few requests, and a
    # heavy tail makes a rise of a tenth of the p50 as likely as not)
    trend_sure = m.latency_trend_ms_per_s > rules.queue_trend_sigmas * m.latency_trend_se_ms_per_s
    if m.queue_growth_rps > growth_limit and latency_rise_ms >= rise_floor_ms and trend_sure:
        reasons.append(
            f"queue growing by {m.queue_growth_rps:.1f} req/s (limit {growth_limit:.1f}); "
            f"latency trend {m.latency_trend_ms_per_s:+.1f} ms/s"
        )
    trend_s = m.latency_trend_ms_per_s / 1000  # seconds of latency per second of due time
    if (
        m.requests >= rules.trend_min_requests
        and trend_s > rules.trend_frac
        and m.latency_trend_ms_per_s > rules.trend_sigmas * m.latency_trend_se_ms_per_s
        and m.queue_growth_rps > 0
    ):
        reasons.append(
            f"the requests due in the window were answered at {m.offered_rps / (1 + trend_s):.2f}/s, slower than "
            f"the {m.offered_rps:.2f}/s they were due: their latency rose {m.latency_trend_ms_per_s:+.1f} ms "
            f"per second (± {m.latency_trend_se_ms_per_s:.1f})"
        )
    if m.due_finished_rps < rules.completion_frac * m.offered_rps:
        # like with like: the requests due in the window, followed past its end until they finished (the
        # completions counted inside a window a few latencies long lag the requests due in it even when the
        # server keeps up)
        reasons.append(
            f"requests due in the window finished at {m.due_finished_rps:.1f}/s of {m.offered_rps:.1f}/s due: "
            "the rest were still unanswered when the run gave up on them"
        )
    if m.waited_fraction > rules.waited_frac:
        reasons.append(
            f"{m.waited_fraction:.1%} of requests waited for a free connection: the in-flight cap is full "
            "of unanswered requests"
        )
    p50 = m.latency_ms.get("p50")
    if rules.baseline_p50_ms is not None and p50 is not None:
        knee = rules.knee_factor * rules.baseline_p50_ms + rules.knee_floor_ms
        if p50 > knee:
            reasons.append(
                f"p50 latency {p50:.1f} ms is above {knee:.1f} ms ({rules.knee_factor:g}x the low-load "
                f"{rules.baseline_p50_ms:.2f} ms + {rules.knee_floor_ms:g} ms): queueing has set in"
            )
    if reasons:
        return Verdict.SATURATED, reasons
    for key, limit in rules.slo_ms.items():
        stream_key = key in STREAM_METRICS
        got = stream_value(m.stream, key) if stream_key else m.latency_ms.get(key)
        if got is None or got > limit:
            reasons.append(f"{'' if stream_key else 'latency '}{key} {got} ms > SLO {limit:g} ms")
    if reasons:
        return Verdict.SLO_VIOLATED, reasons
    return Verdict.STABLE, []


def _client_limited(m: StageMetrics, rules: VerdictRules) -> str | None:
    """Why the generator's in-flight cap, not the server, limited this stage (None: it did not, or it
    cannot be told without a low-load service time)."""
    base = rules.baseline_service_ms
    svc = m.service_ms.get("p50")
    if base is None or svc is None:
        return None
    limit = rules.client_service_factor * base + rules.client_service_floor_ms
    if svc > limit:
        return None  # the server's own answer time grew: it queues, it is saturated
    needed = m.offered_rps * svc / 1000  # Little: in flight at the server = rate x its answer time
    return (
        f"{m.waited_fraction:.1%} of requests waited for a free connection while the server answered in "
        f"{svc:.1f} ms (low-load {base:.1f} ms): the generator's in-flight cap, not the server, was the limit; "
        f"raise --max-inflight (this rate needs about {needed:.0f} requests in flight)"
    )


def judge_fd_limit(m: StageMetrics, generator: dict[str, Any], rules: VerdictRules) -> StageMetrics:
    """Amend a judged stage whose requests waited for a connection under an in-flight cap that a generator
    process's open-files limit lowered (``generator.max_inflight_fd_limited``): the generator's limit set
    the pace, not the server (``generator_limited``), unless the stage is failing anyway."""
    limited = generator.get("max_inflight_fd_limited")
    if not isinstance(limited, dict) or m.waited_fraction <= rules.waited_frac:
        return m
    if m.verdict not in (Verdict.CLIENT_LIMITED, Verdict.SATURATED, Verdict.SLO_VIOLATED, Verdict.STABLE):
        return m  # failing anyway, already the generator's, or not judged (interrupted too early)
    m.verdict = Verdict.GENERATOR_LIMITED
    m.reasons = [
        f"{m.waited_fraction:.1%} of requests waited for a free connection under an in-flight cap of "
        f"{limited.get('kept_per_proc')} per generator process, lowered from {limited.get('asked_per_proc')} by "
        f"its open-files limit ({limited.get('fd_limit')}): these numbers are not the server's; raise the hard "
        "limit (`ulimit -Hn`) or use more generator processes"
    ]
    return m


def apply(m: StageMetrics, rules: VerdictRules) -> StageMetrics:
    if m.verdict != Verdict.INCOMPLETE:  # an interrupted stage too short to judge stays so
        m.verdict, m.reasons = judge(m, rules)
    return m
