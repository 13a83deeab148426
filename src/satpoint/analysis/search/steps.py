"""The saturation search as a pure function of the stages measured so far.

``next_step(history, params)`` says which rate to hold next, or ``None`` when the answer is known to
the stated precision.  Two phases a person can follow:

1. **Staircase**: from the start rate, multiply by ``growth`` each stage (one monotonic sequence, each
   stage ramping from the previous target) until the first stage that is not stable.
2. **Refinement**: bisect geometrically between the highest stable rate ``L`` and the lowest
   unstable rate ``U`` until ``U / L - 1 <= precision``.  A midpoint above the last rate continues
   the current sequence upwards; a midpoint below it starts a new sequence after a cool-down (the
   server's queue drains, the ramp starts from zero), because targets within a sequence only rise.

3. **Confirmation** (when ``confirm_margin`` is set): the answer S is checked by holding the per-replica
   target S x (1 - margin) from idle, for longer.  If that stage is not stable, it is the new lowest
   unstable rate and the refinement continues below it: the search never reports a saturation point
   that its own measurements contradict.  The stages of the answer's profile (up to 100 %) count as
   measurements too: stable ones as they are, and one that is not stable with the verdict of the same
   rate measured again alone from idle (``saturation``'s recheck), which, when not stable either, sends
   the search further down the same way.

4. **Retest** of a contradiction: a staircase, refinement or confirmation stage that is not stable at a
   rate below one this search measured stable is measured once more, alone from idle after a cool-down that waits for
   the server's recovery (phase ``retest``), before it may become the lowest unstable rate; the retest's
   verdict replaces it.  Servers such as MLServer tip into a slow state under overload (CPU per request
   up by a third) and a stage right after an overload, or one hit by a passing stall near the capacity,
   can fail where the same rate held minutes before: one such failure must not decide the answer, since
   which rates a search happens to visit after an overload depends on its path (where it started, how it
   grew), and two searches of one server would then disagree by the luck of their paths.  For the same
   reason, once the bracket is tight, its lowest unstable rate is retested when that stage *collapsed*:
   it answered fewer requests per second than a rate the search held (``collapsed_bound``).  A retest
   does not simply replace the failure (that would only ever raise the answer: a rate that holds with
   probability p near the capacity would be accepted with 1 - (1 - p)^2): when the two measurements
   disagree, a third one decides, and the rate counts with the verdict of two of the three
   (``SearchParams.majority``; folders written before it replay with the retest replacing the failure).

A stage whose generator fell behind, or whose requests waited for the generator's own connections
while the server answered at low-load speed (``client_limited``), says nothing about the server: it is
measured once more (a passing hiccup such as a descheduled process), and if it is limited again at that
rate the search ends there, its answer a lower bound.  ``satpoint analyze`` replays this function on
recorded stages and must reproduce every decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from satpoint.analysis.search.rates import same_rate
from satpoint.analysis.search.verdicts import Verdict


@dataclass(frozen=True)
class SearchParams:
    start_rps: float = 10.0
    growth: float = 2.0
    precision: float = 0.05
    max_rps: float = 50_000.0
    min_rps: float = 0.5
    #: confirm the answer at saturation x (1 - margin) before accepting it (None: no confirmation)
    confirm_margin: float | None = None
    #: retest a contradicted or collapsed stage before it may lower the answer (rule 4; folders written
    #: before it existed replay without it)
    retest: bool = True
    #: a retest that disagrees with the stage it retests is followed by a third measurement, and the rate
    #: counts with the verdict of two of the three (folders written before it replay with the retest's
    #: verdict replacing the stage's)
    majority: bool = True


@dataclass(frozen=True)
class Measured:
    """What the search needs to know of a measured stage."""

    rate_rps: float
    verdict: str
    phase: str = ""  # the step that measured it ("staircase", "refine", "confirm", "retest"), or "profile"
    #: what the server answered per second in the stage's window (None: not known)
    throughput_rps: float | None = None


#: verdicts that say nothing about the server (the generator was the limit)
LIMITED = (Verdict.GENERATOR_LIMITED, Verdict.CLIENT_LIMITED)


@dataclass(frozen=True)
class Step:
    rate_rps: float
    phase: str  # "staircase" | "refine" | "confirm" | "retest"
    fresh: bool  # start a new monotonic sequence (cool down, ramp from zero)


@dataclass(frozen=True)
class Bracket:
    stable_rps: float | None  # highest stable rate below every unstable one
    unstable_rps: float | None  # lowest non-stable rate

    @property
    def ratio(self) -> float | None:
        if self.stable_rps is None or self.unstable_rps is None:
            return None
        return self.unstable_rps / self.stable_rps - 1.0


#: the phase of a contradicted stage measured again (``next_step`` rule 4)
RETEST = "retest"
#: the phases whose stages a contradiction may send to a retest (a profile stage has ``saturation``'s
#: recheck; a confirmation is always below the answer it checks, so one that fails is always retested)
RETESTED_PHASES = ("staircase", "refine", "confirm")


def _votes(history: list[Measured], rate_rps: float) -> list[Measured]:
    """The measurements of one rate that a retest decides between: the stage that was retested and its
    retests (limited ones say nothing about the server and do not vote)."""
    return [
        m
        for m in history
        if m.phase in (*RETESTED_PHASES, RETEST) and m.verdict not in LIMITED and same_rate(m.rate_rps, rate_rps)
    ]


def _majority(votes: list[Measured]) -> Measured:
    """One measurement for a retested rate: stable when more than half the votes are; else the last
    measurement that was not (a tie is not a majority: the rate is not shown to hold)."""
    held = sum(1 for m in votes if m.verdict == Verdict.STABLE)
    if 2 * held > len(votes):
        return next(m for m in reversed(votes) if m.verdict == Verdict.STABLE)
    return next(m for m in reversed(votes) if m.verdict != Verdict.STABLE)


def effective(history: list[Measured], majority: bool = True) -> list[Measured]:
    """The measurements the bracket counts: a stage measured again by a later retest of the same rate
    counts through its retest, in the retest's place: with ``majority``, with the verdict of most of the
    stage and its retests (``_majority``), else with the last retest's verdict alone."""
    out = []
    for i, m in enumerate(history):
        later = history[i + 1 :]
        if not majority:
            if m.phase in RETESTED_PHASES and any(
                r.phase == RETEST and same_rate(r.rate_rps, m.rate_rps) for r in later
            ):
                continue
        elif m.verdict not in LIMITED and m.phase in (*RETESTED_PHASES, RETEST):
            if any(r.phase == RETEST and r.verdict not in LIMITED and same_rate(r.rate_rps, m.rate_rps) for r in later):
                continue  # counted in the last retest's place
            if m.phase == RETEST:
                decided = _majority(_votes(history[: i + 1], m.rate_rps))
                m = Measured(m.rate_rps, decided.verdict, RETEST, decided.throughput_rps)
        out.append(m)
    return out


def undecided(history: list[Measured]) -> float | None:
    """The rate whose retest disagreed with the stage it retested, as many votes each way: a third
    measurement decides it (None: nothing is undecided)."""
    if not history or history[-1].phase != RETEST or history[-1].verdict in LIMITED:
        return None
    votes = _votes(history, history[-1].rate_rps)
    held = sum(1 for m in votes if m.verdict == Verdict.STABLE)
    return history[-1].rate_rps if 2 * held == len(votes) else None


def retests(history: list[Measured], rate_rps: float) -> tuple[int, int]:
    """(holds, failed holds) at ``rate_rps``: the stage measured there and its retests (limited ones
    not counted)."""
    votes = _votes(history, rate_rps)
    return len(votes), sum(1 for m in votes if m.verdict != Verdict.STABLE)


def contradicted(history: list[Measured]) -> bool:
    """The last stage is a staircase or refinement stage that was not stable (nor limited) at a rate below
    one this search measured stable, and it was not measured again yet: it must be retested."""
    if not history:
        return False
    last = history[-1]
    if last.phase not in RETESTED_PHASES or last.verdict == Verdict.STABLE or last.verdict in LIMITED:
        return False
    return any(m.verdict == Verdict.STABLE and m.rate_rps > last.rate_rps for m in history[:-1])


def collapsed_bound(history: list[Measured], b: Bracket, params: SearchParams) -> Measured | None:
    """The stage that set the lowest unstable rate of a converged bracket, when it collapsed and was not
    measured again: it answered fewer requests per second than a rate this search measured stable (by more
    than the precision).  A server that is merely past its capacity answers at about its capacity; one that
    answers far less was tipped into a slow state (by an overload before it, or a passing stall), and
    whether that happens at a rate just above the answer is the luck of the path: it is retested once."""
    if b.unstable_rps is None:
        return None
    counted = effective(history, params.majority)
    top = next(
        (m for m in reversed(counted) if same_rate(m.rate_rps, b.unstable_rps) and m.verdict != Verdict.STABLE), None
    )
    if top is None or top.phase not in RETESTED_PHASES or top.throughput_rps is None:
        return None
    held = max((m.rate_rps for m in counted if m.verdict == Verdict.STABLE), default=None)
    if held is None or top.throughput_rps * (1 + params.precision) >= held:
        return None
    return top


def held_at(history: list[Measured], rate_rps: float, majority: bool = True) -> Measured | None:
    """The confirmation's measurement at ``rate_rps`` that counts: the confirm there, or when it was
    retested, the retests' decision (``effective``)."""
    return next(
        (
            m
            for m in reversed(effective(history, majority))
            if m.phase in ("confirm", RETEST) and same_rate(m.rate_rps, rate_rps)
        ),
        None,
    )


def bracket(history: list[Measured], majority: bool = True) -> Bracket:
    """Highest stable and lowest unstable rate; generator- or client-limited stages tell nothing either way,
    and a retested stage counts with its retests' decision (``effective``)."""
    counted = effective(history, majority)
    bad = [m.rate_rps for m in counted if m.verdict != Verdict.STABLE and m.verdict not in LIMITED]
    unstable = min(bad) if bad else None
    good = [m.rate_rps for m in counted if m.verdict == Verdict.STABLE and (unstable is None or m.rate_rps < unstable)]
    return Bracket(max(good) if good else None, unstable)


def bracketed_answer(history: list[Measured], majority: bool = True) -> float | None:
    """The search's answer when it bracketed the capacity: a rate above it was not stable, and the search
    did not end on a limited stage (None: no answer, or only a lower bound, which nothing may take for a
    capacity)."""
    b = bracket(history, majority)
    if b.stable_rps is None or b.unstable_rps is None or (history and history[-1].verdict in LIMITED):
        return None
    return b.stable_rps


def precise(b: Bracket, precision: float) -> bool:
    """The bracket is as tight as asked (``ratio <= precision``)."""
    return b.ratio is not None and b.ratio <= precision + 1e-9


def counted(brackets: dict[int, Bracket], precision: float) -> list[int]:
    """Which of several bracketed searches (``find --repeats``) the answer is the lowest of: those that reached
    the precision.  A search cut before it did (its budget) holds a coarse bracket whose stable rate can lie
    far below the capacity (stable 200, unstable 400 for a capacity of 300): it counts only when its unstable
    rate lies at or below the lowest precise answer, which it then contradicts.  Without a precise search,
    every one counts."""
    fine = [k for k, b in brackets.items() if precise(b, precision)]
    if not fine:
        return sorted(brackets)
    top = min(brackets[k].stable_rps or 0.0 for k in fine)
    return sorted(k for k, b in brackets.items() if k in fine or (b.unstable_rps or 0.0) <= top * (1 + 1e-9))


def published(brackets: dict[int, Bracket], precision: float) -> int | None:
    """The search whose answer ``find`` publishes: the lowest of those ``counted`` (None: none bracketed)."""
    keys = counted(brackets, precision)
    return min(keys, key=lambda k: brackets[k].stable_rps or 0.0) if keys else None


def published_answer(histories: dict[int, list[Measured]], precision: float) -> tuple[int, float] | None:
    """(search, answer) that ``find`` publishes of the searches measured so far (``published``; None: none
    bracketed the capacity, which a lower bound never is)."""
    brackets = {k: bracket(h) for k, h in histories.items() if bracketed_answer(h) is not None}
    k = published(brackets, precision)
    if k is None:
        return None
    sat = brackets[k].stable_rps
    assert sat is not None
    return k, sat


def next_step(history: list[Measured], params: SearchParams) -> Step | None:
    if not history:
        return Step(_clip(params.start_rps, params), "staircase", fresh=True)
    last = history[-1].rate_rps
    if params.retest and contradicted(history):  # measured again, alone from idle, before it may lower the answer
        return Step(last, RETEST, fresh=True)
    if params.retest and params.majority and (tied := undecided(history)) is not None:
        return Step(tied, RETEST, fresh=True)  # the retest disagreed: a third measurement decides
    if history[-1].verdict in LIMITED:
        tries = sum(1 for m in history if m.verdict in LIMITED and m.rate_rps == last)
        phase = history[-1].phase if history[-1].phase in ("confirm", RETEST) else _phase(history)
        return Step(last, phase, fresh=phase in ("confirm", RETEST)) if tries < 2 else None
    b = bracket(history, params.majority)
    if b.unstable_rps is None:  # still climbing
        nxt = last * params.growth
        if last >= params.max_rps:
            return None
        return Step(min(nxt, params.max_rps), "staircase", fresh=False)
    if b.stable_rps is None:  # even the lowest rate tried was too much: go down
        nxt = b.unstable_rps / (params.growth * 2)
        if nxt < params.min_rps:
            return None
        return Step(nxt, "staircase", fresh=True)
    ratio = b.ratio
    assert ratio is not None
    if ratio <= params.precision:
        collapse = collapsed_bound(history, b, params) if params.retest else None
        if collapse is not None:  # the stage that decides the answer collapsed: measured again first
            return Step(collapse.rate_rps, RETEST, fresh=True)
        return _confirmation(history, b.stable_rps, params)
    mid = math.sqrt(b.stable_rps * b.unstable_rps)
    return Step(mid, "refine", fresh=mid < last or history[-1].verdict != Verdict.STABLE)


def confirm_rate(saturation_rps: float, params: SearchParams) -> float | None:
    """The rate that confirms an answer: the per-replica target (None: no confirmation)."""
    return None if params.confirm_margin is None else saturation_rps * (1 - params.confirm_margin)


def _confirmation(history: list[Measured], saturation_rps: float, params: SearchParams) -> Step | None:
    """Hold the per-replica target once the bracket is tight, unless that was done (and held)."""
    target = confirm_rate(saturation_rps, params)
    if target is None:
        return None
    done = any(m.phase == "confirm" and abs(m.rate_rps - target) <= 1e-9 * target for m in history)
    return None if done else Step(target, "confirm", fresh=True)


def _phase(history: list[Measured]) -> str:
    return "refine" if any(m.verdict != Verdict.STABLE and m.verdict not in LIMITED for m in history) else "staircase"


def _clip(rate: float, params: SearchParams) -> float:
    return min(max(rate, params.min_rps), params.max_rps)


def replay(history: list[Measured], params: SearchParams) -> list[Step | None]:
    """The decision taken after each prefix of ``history`` (for offline verification)."""
    return [next_step(history[:k], params) for k in range(len(history) + 1)]


def hold_for(rate_rps: float, min_requests: int = 2000, min_s: float = 6.0, max_s: float = 15.0) -> float:
    """A hold long enough for a meaningful p99 (``min_requests`` in the steady window), within bounds."""
    return min(max(min_requests / max(rate_rps, 1e-9) * 1.25, min_s), max_s)


def budget_stop_line(
    budget_s: float, left_s: float, measured: int, rate_rps: float, hold_s: float, need_s: float, profile_next: bool
) -> str:
    """Why the search stops on its budget: after ``measured`` stages (the profile may come next), or
    before the first one, with what that stage and the profile would have needed."""
    if measured:
        return f"budget of {budget_s:g} s reached: stopping the search" + (
            " (the profile comes next)" if profile_next else ""
        )
    return (
        f"budget of {budget_s:g} s ({left_s:.0f} s left) cannot hold the first stage, {rate_rps:.1f} rps for "
        f"{hold_s:.0f} s, and the profile: about {need_s:.0f} s; give a larger --budget-s, or a smaller "
        "--min-requests or --max-hold"
    )
