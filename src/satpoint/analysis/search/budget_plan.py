"""What ``satpoint find``'s budget must hold, planned before the first stage.

Every option that adds work grows the budget: ``--repeats N`` (each search must be able to bracket the
capacity on its own, so each gets about what one typical search costs), the profile, ``--flamegraph``'s
stage, ``--hysteresis``'s sequence and ``--baseline``'s hold.  Without ``--budget-s`` the budget is
planned: ``FindOptions.budget_s`` (270 s: one search and its profile, or what a typical search and its profile
take when that is more) plus one typical search per further repeat plus each extra (never less than
``need_s``).  With ``--budget-s`` (``FindOptions.budget_given``) a budget that cannot hold the
work asked for is refused before the first stage, with the budget it needs (one search with no extra is
never refused: it ends on its budget as before, its answer a lower bound when it did not bracket).

A typical search (``typical_search_s``) follows the path of the search's rules from the first rate: a
staircase of ``STAIRCASE_STAGES`` (doubling), ``REFINE_STAGES`` bisections near the top, ``RETEST_STAGES``
retests (a contradiction decided by 2 of 3) and the confirmation (held twice as long), each stage its
ramp, hold and segment overhead, the fresh ones a cool-down of at least ``RECOVERY_S``.  It errs long:
the budget is a cap, and a search that needs less ends sooner.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from satpoint.analysis.search.holds import (
    FLAMEGRAPH_OVERHEAD_S,
    RECOVERY_S,
    Budget,
    flamegraph_stage,
    profile_stages,
    stage_hold,
)
from satpoint.analysis.search.hysteresis import hysteresis_stages
from satpoint.config import FindOptions
from satpoint.plan import Stage

#: the typical path of one search: stages of the staircase (the last one not stable; the probe's first rate is a
#: quarter of one worker's, so a server of a few workers takes five or six) ...
STAIRCASE_STAGES = 6
#: ... bisections near the top (5 % from a factor of 2 takes four) ...
REFINE_STAGES = 4
#: ... retests of a contradiction (a second and a third measurement) ...
RETEST_STAGES = 2
#: the longest wait a cool-down before the baseline's hold plans for (``target_hold.MAX_COOLDOWN_S`` waits
#: at most a minute; a search that ended stable leaves an idle server)
HOLD_COOLDOWN_S = 10.0


@dataclass(frozen=True)
class BudgetPlan:
    """The budget ``find`` runs with and what it was planned for (seconds)."""

    budget_s: float
    given: bool  # --budget-s was given (else planned)
    repeats: int
    search_s: float  # one typical search
    profile_s: float
    flamegraph_s: float
    hysteresis_s: float
    hold_s: float  # --baseline's hold of the baseline's per-replica target

    @property
    def need_s(self) -> float:
        """Every search its typical cost, plus the profile and every extra."""
        return self.repeats * self.search_s + self.profile_s + self.extras_s

    @property
    def extras_s(self) -> float:
        return self.flamegraph_s + self.hysteresis_s + self.hold_s

    def later_searches_s(self, repeat: int) -> float:
        """What search ``repeat`` leaves in the budget for the searches after it."""
        return max(0, self.repeats - repeat - 1) * self.search_s

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: round(v, 1) if isinstance(v, float) else v for k, v in asdict(self).items()}
        out["need_s"] = round(self.need_s, 1)
        return out

    def parts(self) -> str:
        items = [
            f"{self.repeats} searches of about {self.search_s:.0f} s each"
            if self.repeats > 1
            else f"a search of about {self.search_s:.0f} s"
        ]
        if self.profile_s:
            items.append(f"the profile ({self.profile_s:.0f} s)")
        if self.flamegraph_s:
            items.append(f"the flame graph's stage ({self.flamegraph_s:.0f} s)")
        if self.hysteresis_s:
            items.append(f"the hysteresis sequence ({self.hysteresis_s:.0f} s)")
        if self.hold_s:
            items.append(f"the baseline's hold ({self.hold_s:.0f} s)")
        return ", ".join(items)

    def line(self) -> str:
        """The plan in one line, said before the first stage."""
        how = "--budget-s" if self.given else "planned"
        return f"budget {self.budget_s:.0f} s ({how}) for {self.parts()}"

    def refusal(self) -> str | None:
        """Why a given budget is refused (None: it holds the work asked for, or nothing was added to a
        single search)."""
        if not self.given or not self.adds_work or self.budget_s >= self.need_s:
            return None
        need = math.ceil(self.need_s / 10) * 10
        return (
            f"--budget-s {self.budget_s:g} cannot hold {self.parts()}: give --budget-s {need:.0f} or more, or leave "
            "--budget-s out to have the budget planned"
        )

    @property
    def adds_work(self) -> bool:
        return self.repeats > 1 or self.extras_s > 0


def _cost(budget: Budget, stages: list[Stage], cooldown_s: float = 0.0) -> float:
    return budget.stage_cost(stages) + cooldown_s


def typical_search_s(opts: FindOptions, budget: Budget, first_rps: float, latency_s: float | None) -> float:
    """What one search typically costs from ``first_rps`` (see the module's docstring)."""
    g = opts.growth
    rates = [first_rps * g**k for k in range(STAIRCASE_STAGES)]
    top = rates[-2] * math.sqrt(g)
    rest = max(opts.cooldown_s, RECOVERY_S) if opts.cooldown_s > 0 else 0.0

    def stage(rate: float, confirm: bool = False) -> Stage:
        hold = stage_hold(opts, rate, latency_s)
        return Stage(rate, opts.ramp_s, max(hold, min(2 * hold, 2 * opts.max_hold_s)) if confirm else hold)

    total = sum(_cost(budget, [stage(r)]) for r in rates)
    total += (REFINE_STAGES + RETEST_STAGES) * _cost(budget, [stage(top)], rest)
    if opts.confirm:
        total += _cost(budget, [stage(top * (1 - opts.margin), confirm=True)], rest)
    return total


def plan_budget(
    opts: FindOptions,
    budget: Budget,
    first_rps: float,
    latency_s: float | None,
    hold_rps: float | None = None,
    profile_rps: float | None = None,
) -> BudgetPlan:
    """The budget for ``opts`` (``opts.budget_s`` as given, or planned from it), what it holds, priced at the
    first rate (the lowest a saturation point is likely to be: lower rates hold longer)."""
    search_s = typical_search_s(opts, budget, first_rps, latency_s)
    sat = profile_rps or first_rps
    profile_s = _cost(budget, profile_stages(opts, sat, latency_s), opts.cooldown_s) if opts.profile else 0.0
    flame_s = 0.0
    if opts.flamegraph:
        flame_s = _cost(budget, [flamegraph_stage(opts, sat, latency_s)], opts.cooldown_s) + FLAMEGRAPH_OVERHEAD_S
    hyst_s = _cost(budget, hysteresis_stages(opts, sat, latency_s), opts.cooldown_s) if opts.hysteresis else 0.0
    hold_s = 0.0
    if hold_rps is not None:
        hold = stage_hold(opts, hold_rps, latency_s)
        hold_stage = Stage(hold_rps, opts.ramp_s, max(hold, min(2 * hold, 2 * opts.max_hold_s)))
        hold_s = _cost(budget, [hold_stage], max(opts.cooldown_s, HOLD_COOLDOWN_S))
    plan = BudgetPlan(opts.budget_s, opts.budget_fixed, opts.repeats, search_s, profile_s, flame_s, hyst_s, hold_s)
    if opts.budget_fixed:
        return plan
    # planned: budget_s holds one search and its profile (or what a typical one and its profile take, when that
    # is more: a planned budget never holds less than it was planned for, else the first search is cut before
    # it confirms its answer); every further search and every extra comes on top
    first = max(opts.budget_s, search_s + profile_s)
    grown = first + (opts.repeats - 1) * search_s + plan.extras_s
    if grown <= opts.budget_s:
        return plan  # one search and its profile fit budget_s as it is
    return BudgetPlan(math.ceil(grown / 10) * 10, False, opts.repeats, search_s, profile_s, flame_s, hyst_s, hold_s)
