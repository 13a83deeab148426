"""``find``/``run --baseline DIR``: after the search (the run's stages), hold the baseline's per-replica target
alone, from idle.

One more segment of the folder (purpose ``analysis.diff.target.TARGET_HOLD_PURPOSE``, which the search's
replay ignores): a cool-down until the server answers at low-load speed again, a ramp from zero and a hold as
long as the search's confirmation of its own answer (``run``: the plan's first ramp and its longest hold,
``run_target_stage``).  ``satpoint diff`` judges it (``analysis.diff.target.judge_target_hold``).  It runs
after the search, outside its ``--budget-s``.
"""

from __future__ import annotations

from collections.abc import Sequence

from satpoint.analysis.diff.target import TARGET_HOLD_PURPOSE
from satpoint.analysis.search.holds import cooldown_max_s, stage_hold
from satpoint.analysis.search.target_lost import HEADER_KEY, stopped_answering_at
from satpoint.config import FindOptions
from satpoint.endpoints.prepare import wait_until_idle
from satpoint.metrics.results import Segment, write_header
from satpoint.plan import Stage
from satpoint.procedures.progress import say
from satpoint.procedures.session import LOST_ERRORS, Session

#: the longest cool-down before the hold (a search that ended overloading the server leaves a queue)
MAX_COOLDOWN_S = 60.0


def target_stage(opts: FindOptions, rate_rps: float, latency_s: float | None) -> Stage:
    """The hold at ``rate_rps``: ``find``'s ramp, and a hold as long as a confirmation (twice a stage's hold,
    within twice ``--max-hold``)."""
    hold = stage_hold(opts, rate_rps, latency_s)
    return Stage(rate_rps, opts.ramp_s, max(hold, min(2 * hold, 2 * opts.max_hold_s)))


def run_target_stage(plan: Sequence[Stage], rate_rps: float) -> Stage:
    """``run --baseline``: the hold at ``rate_rps`` as the run's own plan measures: its first stage's ramp and
    its longest hold."""
    return Stage(rate_rps, plan[0].ramp_s, max(s.hold_s for s in plan))


def hold_from_idle(session: Session, opts: FindOptions, rate_rps: float, stage: Stage | None = None) -> Segment | None:
    """Hold ``rate_rps`` from idle as one more segment of the session's folder (``stage``: this hold instead
    of ``target_stage``'s, ``run --baseline``); None when it was not measured (the run was stopped, or the
    target had gone away)."""
    if session.stop.is_set() or session.results.header.get(HEADER_KEY) is not None:
        say(session.on_event, f"the baseline's target of {rate_rps:.1f} rps was not held: the search did not finish")
        return None
    segments = session.results.segments
    if segments and stopped_answering_at(segments[-1].records) is not None:  # it died under the last stage
        say(session.on_event, f"the baseline's target of {rate_rps:.1f} rps was not held: the target stopped answering")
        return None
    prepared = session.prepared
    svc = prepared.latency_hint_s
    stage = stage or target_stage(opts, rate_rps, svc)
    say(session.on_event, f"holding the baseline's per-replica target, {rate_rps:.1f} rps, from idle")
    try:
        wait_until_idle(
            prepared, opts.cooldown_s, svc, max_wait_s=cooldown_max_s(opts.cooldown_s, MAX_COOLDOWN_S, svc),
            stop=session.stop,
        )  # fmt: skip
        if session.stop.is_set():
            return None
        return session.measure([stage], purpose=TARGET_HOLD_PURPOSE, start_rps=0.0, title="baseline target")
    except LOST_ERRORS as e:
        # recorded as the search records a target lost between stages: nothing in the rows may show it, and a
        # server that died here has no target to recommend, nor a pass to give
        session.results.header[HEADER_KEY] = {
            "when": "before the baseline's target",
            "error": str(e) or type(e).__name__,
        }
        write_header(session.out_dir, session.results)
        say(session.on_event, f"the baseline's target was not held: the target stopped answering ({e})")
        return None
