"""``satpoint diff``'s verdict on one metric, and the typed ``diff.json`` (``DiffDoc``).

- figures sampled from rows (``rule`` "bootstrap", ``judge_change``): the interval of the change new/base (new −
  base for the error rate) from a block bootstrap of both sides (``diff_bootstrap``), its p-value for "no change"
  Holm-adjusted across the diff (``holm``, in ``make_doc``).  ``regression`` / ``improvement``: the adjusted
  p-value below ``ALPHA`` in the worse / better direction **and** the change beyond the tolerance; ``no_change``:
  the whole 95 % interval within ± the tolerance (equivalence; overall only when every metric is); else
  ``inconclusive``, with the reason;
- ranges (``judge``): a sweep's figures at ``--at-rps`` (``rule`` "ranges", ``strict``): apart, with a change
  beyond the tolerance; ``no_change`` only when every change the ranges allow is within it.  Search brackets
  (the saturation point, ``rule`` "brackets"): apart (the sweep's tie rule) with a change beyond the tolerance;
  ``no_change`` when the change is within it;
- otherwise ``inconclusive`` (a lower bound open upwards, a side without a figure): never ``no_change``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, computed_field, model_validator

from satpoint.analysis.diff.bootstrap import LEVEL, Estimate, change_of
from satpoint.analysis.diff.spread import DEFAULT_RUN_SPREAD as DEFAULT_RUN_SPREAD
from satpoint.analysis.diff.target import TargetHold
from satpoint.analysis.diff.tolerances import DEFAULT_TAIL_TOLERANCE
from satpoint.analysis.search import brackets

Outcome = Literal["regression", "improvement", "no_change", "inconclusive"]
Better = Literal["higher", "lower"]
#: the family-wise level of the Holm-adjusted regression/improvement verdicts
ALPHA = 1 - LEVEL
DIFF_FILE = "diff.json"
DIFF_SCHEMA_VERSION = 1


_CONFIG = ConfigDict(frozen=True, extra="allow")


class Side(BaseModel):
    """One side's figure: its central value and range, and how many measurements stand behind it."""

    model_config = _CONFIG
    value: float | None  # the central value (median of the answers, or the pooled figure)
    low: float | None  # the range; ``high`` None = open upwards (a lower bound)
    high: float | None
    n: int  # measurements (searches, stages or sweep measurements)
    blocks: int | None = None  # blocks behind a bootstrap interval
    detail: str = ""  # the measurements in words
    rows: int | None = None  # rows behind a bootstrap interval (requests, gaps, or throughput bins)
    block_rows: int | None = None  # rows per block (the longest stage's), chosen from the rows' correlation


class MetricDiff(BaseModel):
    """One metric at one point: the verdict and its evidence (``diff.json`` ``metrics[]``)."""

    model_config = _CONFIG
    metric: str  # saturation_rps, latency_p50_ms, ..., service_p50_ms, error_rate, throughput_rps, ttfc_p50_ms, ...
    point: str  # what was matched: "search", "300 rps", a sweep point's label
    verdict: Outcome
    unit: str  # rps, ms, fraction
    better: Better
    base: Side
    new: Side
    change: float | None  # relative (absolute for error_rate) change of the central values
    gap: float | None  # how far apart the ranges are (0: they overlap), same scale as ``change``
    tolerance: float
    absolute: bool  # change, gap and tolerance in the metric's units (error_rate), else relative
    #: True: sampled figures (judged by the interval of their change, or by ranges with equivalence for
    #: ``no_change``); False: search brackets (``rule``)
    strict: bool = True
    single: bool  # one measurement on each side
    method: str
    text: str
    #: "bootstrap" (the interval of the change, ``judge_change``), "ranges" or "brackets" (``judge``)
    rule: str = "ranges"
    #: the change's 95 % interval (bootstrap rule; same scale as ``change``)
    change_low: float | None = None
    change_high: float | None = None
    #: the p-value of "no change" and the same Holm-adjusted across the diff's bootstrap metrics
    p_value: float | None = None
    p_adjusted: float | None = None
    #: the change a figure resting on one run a side must exceed besides the tolerance (the between-run spread,
    #: ``DiffDoc.run_spread``, scaled by the queueing at that rate for latency); None or 0: the tolerance alone
    allowance: float | None = None
    #: why the figure cannot be judged: the machine was busy or changed speed (``diff_busy``); inconclusive always
    busy: str | None = None

    @property
    def worse_undecided(self) -> bool:
        """A change for the worse beyond the tolerance left without a verdict (within the run spread, ranges that
        overlap, a lower bound): the gate does not pass on it.  Sampled figures: only a real one (Holm-adjusted)."""
        c = self.change
        if self.verdict != "inconclusive" or self.busy or c is None or abs(c) <= self.tolerance:
            return False
        real = self.rule != "bootstrap" or (self.p_adjusted is not None and self.p_adjusted <= ALPHA)
        return real and (c > 0) == (self.better == "lower")


class DiffDoc(BaseModel):
    """``diff.json``: what ``satpoint diff`` concluded."""

    model_config = _CONFIG
    schema_version: int
    tool_version: str
    kind: str  # "diff"
    compared: str  # find, run or sweep
    base: dict[str, Any]  # {dir, kind, point?}
    new: dict[str, Any]
    tolerance: float  # saturation point, p50, service p50, throughput
    error_tolerance: float
    verdict: Outcome  # the worst: regression > inconclusive > improvement > no_change
    counts: dict[str, int]
    metrics: list[MetricDiff]
    notes: list[str]
    #: ``--calibrate``: the two folders are an A/A pair (one configuration twice), see ``calibrated``
    calibration: dict[str, Any] | None = None
    #: the tolerance of tail latency (``TAIL_METRICS``); None in a diff.json written before it existed
    tail_tolerance: float | None = None
    #: ``find --baseline``: the hold at the baseline's per-replica target (``analysis.diff.target``); not held
    #: is a regression (``verdict``), not judged inconclusive
    target_hold: TargetHold | None = None
    #: streamed answers (``--stream``) of a run or find diff: ``{base, new, compared}`` (whether each side
    #: streamed; ``compared``: both did, so ``ttfc_*``/``gap_*`` metrics are judged); None: neither streamed
    stream: dict[str, bool] | None = None
    #: ``--run-spread``: how far one run's figures move between runs (``DEFAULT_RUN_SPREAD``); None in a
    #: diff.json written before it existed
    run_spread: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _computed_not_read(cls, data: Any) -> Any:  # ``unjudged`` is computed: read back, it is not set twice
        return {k: v for k, v in data.items() if k != "unjudged"} if isinstance(data, dict) else data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unjudged(self) -> int:
        """Figures the gate cannot pass on (exit 1): held back by the machine (busy, speed changed: ``busy``, the
        target's hold too), or a change for the worse left undecided (``worse_undecided``)."""
        hold = self.target_hold is not None and bool(self.target_hold.busy)
        return sum(1 for m in self.metrics if m.busy or m.worse_undecided) + int(hold)

    @property
    def regressed(self) -> bool:
        return any(m.verdict == "regression" for m in self.metrics) or (
            self.target_hold is not None and self.target_hold.held is False
        )

    @property
    def inconclusive(self) -> bool:
        return any(m.verdict == "inconclusive" for m in self.metrics) or (
            self.target_hold is not None and self.target_hold.held is None
        )

    def with_target_hold(self, hold: TargetHold | None) -> DiffDoc:
        """This diff with the target's hold: the overall verdict a regression when it did not hold (and
        inconclusive, unless already worse, when it was not judged)."""
        if hold is None:
            return self
        verdict: Outcome = self.verdict
        notes = self.notes
        if not self.metrics and hold.held is not None:  # the hold is the one thing compared (run vs a find)
            verdict, notes = "no_change", [n for n in notes if n != NOTHING_COMPARED]
        if hold.held is False:
            verdict = "regression"
        elif hold.held is None and verdict in ("improvement", "no_change"):
            verdict = "inconclusive"
        return self.model_copy(update={"target_hold": hold, "verdict": verdict, "notes": notes})


# the rule -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Judgement:
    verdict: Outcome
    change: float | None
    gap: float | None
    why: str


def judge(base: Side, new: Side, tolerance: float, better: Better, absolute: bool = False, strict: bool = True,
          allowance: float = 0.0) -> Judgement:  # fmt: skip
    """The verdict on two ranges (see the module's docstring): apart, with a change beyond the tolerance, is a
    change; ``strict`` (sampled figures): ``no_change`` only when every change the ranges allow is within it.
    ``allowance``: a change within it (the between-run spread of one run a side) is ``inconclusive``, not a
    change (``within_run_spread``)."""
    if base.value is None or new.value is None or base.low is None or new.low is None:
        return Judgement("inconclusive", None, None, "a side has no figure")
    scale = 1.0 if absolute else base.value
    if scale <= 0:
        return Judgement("inconclusive", None, None, "the base's figure is zero: no relative change")
    change = (new.value - base.value) / scale
    b_hi = math.inf if base.high is None else base.high
    n_hi = math.inf if new.high is None else new.high
    if brackets.ranges_tie(base.low, base.high, new.low, new.high):
        gap, moved = 0.0, ""
    elif n_hi < base.low:
        gap, moved = (base.low - n_hi) / scale, "down"
    else:
        gap, moved = (new.low - b_hi) / scale, "up"
    open_range = base.high is None or new.high is None
    agrees = (moved == "down" and change < 0) or (moved == "up" and change > 0)
    if moved and agrees and abs(change) > tolerance:
        if abs(change) <= allowance:
            return within_run_spread(change, gap, allowance)
        worse = (moved == "down") == (better == "higher")
        return Judgement("regression" if worse else "improvement", change, gap,
                         "the ranges do not overlap and the change is larger")  # fmt: skip
    if open_range:
        why = "a lower bound's range is open upwards (its capacity was not reached): no change can be ruled out"
        return Judgement("inconclusive", change, gap, why)
    # strict (sampled figures): no_change only when every change the two ranges allow is within the tolerance
    widest = max(abs(n_hi - base.low), abs(b_hi - new.low)) / scale if absolute else max(
        abs(n_hi / base.low - 1) if base.low > 0 else math.inf, abs(new.low / b_hi - 1)
    )  # fmt: skip
    if abs(change) <= tolerance and (not strict or widest <= tolerance):
        how = "the ranges overlap" if not moved else "the ranges do not overlap (a real difference)"
        return Judgement("no_change", change, gap, f"{how}, but the change is within")
    if abs(change) <= tolerance:
        return Judgement(
            "inconclusive", change, gap, "the change is within the tolerance, but the ranges allow more than"
        )
    return Judgement("inconclusive", change, gap, "the ranges overlap, but the change is larger than")


def within_run_spread(change: float, gap: float | None, allowance: float) -> Judgement:
    """A change beyond the tolerance but within what an unchanged server moves between runs: not a verdict."""
    return Judgement("inconclusive", change, gap, (
        f"the change is larger than the tolerance, but within the {allowance * 100:.0f} % an unchanged server "
        "moves between runs here (--run-spread: its light-load jitter and, at a loaded rate, its queueing): "
        "repeat both runs (find --repeats 3), or measure your setup's with A/A pairs (diff --calibrate) and give "
        "--run-spread"))  # fmt: skip


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def format_figure(v: float | None, unit: str) -> str:
    """A figure in its unit, as every diff output shows it (``-`` when there is none)."""
    if v is None:
        return "-"
    if unit == "fraction":
        return f"{v * 100:.2f} %"
    if unit == "ms":
        return f"{v:.2f} ms"
    return f"{v:.1f} rps"


def _range(s: Side, unit: str) -> str:
    if s.low is None:
        return "-"
    hi = "∞ (a lower bound)" if s.high is None else format_figure(s.high, unit)
    return f"{format_figure(s.low, unit)}–{hi}"


def metric_diff(
    metric: str,
    point: str,
    unit: str,
    better: Better,
    base: Side,
    new: Side,
    tolerance: float,
    method: str,
    absolute: bool = False,
    caveat: str = "",
    strict: bool = True,
    allowance: float = 0.0,
) -> MetricDiff:
    """Judge one metric and say why in plain words."""
    j = judge(base, new, tolerance, better, absolute, strict, allowance)
    single = base.n == 1 and new.n == 1
    tol = f"{tolerance * 100:.2g} percentage points" if absolute else f"{tolerance * 100:.2g} %"
    parts = [
        f"{metric} @ {point}: base {format_figure(base.value, unit)} "
        f"(range {_range(base, unit)}, {base.detail or base.n}), "
        f"new {format_figure(new.value, unit)} (range {_range(new, unit)}, {new.detail or new.n})"
    ]
    if j.change is not None:
        ch = f"{j.change * 100:+.2f} percentage points" if absolute else _pct(j.change)
        apart = "overlap" if not j.gap else f"are {j.gap * 100:.1f}{' points' if absolute else ' %'} apart"
        parts.append(f"change {ch}; the ranges {apart}; tolerance {tol}")
    verdict_text = {
        "regression": f"regression: {j.why} than the tolerance, {'higher' if better == 'lower' else 'lower'} is worse",
        "improvement": f"improvement: {j.why} than the tolerance",
        "no_change": f"no change: {j.why} the tolerance",
        "inconclusive": f"inconclusive: {j.why}"
        + (" the tolerance (more measurements would decide)" if j.why.endswith("than") else ""),
    }[j.verdict]
    parts.append(verdict_text)
    if single:
        within = " (its interval is the noise within one run, not between runs)" if "bootstrap" in method else ""
        parts.append("this rests on one measurement each" + within)
    if caveat:
        parts.append(caveat)
    return MetricDiff(
        metric=metric,
        point=point,
        verdict=j.verdict,
        unit=unit,
        better=better,
        base=base,
        new=new,
        change=None if j.change is None else round(j.change, 6),
        gap=None if j.gap is None else round(j.gap, 6),
        tolerance=tolerance,
        absolute=absolute,
        strict=strict,
        single=single,
        method=method,
        text="; ".join(parts),
        rule="ranges" if strict else "brackets",
        allowance=round(allowance, 6) if allowance else None,
    )


# the bootstrap rule -------------------------------------------------------------------------------------
def judge_change(change: float, low: float, high: float, p_adjusted: float, tolerance: float, better: Better,
                 allowance: float = 0.0) -> Judgement:  # fmt: skip
    """The verdict on the interval of a change (see the module's docstring); a change within ``allowance``
    (the between-run spread of one run a side) is ``inconclusive`` (``within_run_spread``)."""
    real = p_adjusted <= ALPHA
    if real and abs(change) > tolerance and abs(change) <= allowance:
        return within_run_spread(change, None, allowance)
    if real and abs(change) > tolerance:
        worse = (change > 0) == (better == "lower")
        return Judgement("regression" if worse else "improvement", change, None,
                         "the change's interval lies beyond no change and the change is larger")  # fmt: skip
    if -tolerance <= low and high <= tolerance:
        return Judgement("no_change", change, None, "the change's whole interval lies within")
    if real:
        return Judgement("inconclusive", change, None,
                         "a real change within the tolerance, but its interval reaches beyond it")  # fmt: skip
    return Judgement(
        "inconclusive", change, None, "the change's interval reaches beyond the tolerance: more rows would decide"
    )


def _side(est: Estimate, scale: float, detail: str) -> Side:
    ok = not est.why_not and math.isfinite(est.low)
    value = None if not math.isfinite(est.value) else round(est.value * scale, 6)
    low, high = (round(est.low * scale, 6), round(est.high * scale, 6)) if ok else (None, None)
    why = f": no interval, {est.why_not}" if est.why_not else ""
    return Side(value=value, low=low, high=high, n=0, blocks=est.blocks, detail=detail + why, rows=est.rows,
                block_rows=est.block_rows)  # fmt: skip


def sampled_diff(
    metric: str,
    point: str,
    unit: str,
    better: Better,
    base: Estimate,
    new: Estimate,
    details: tuple[str, str] | list[str],
    scale: float,
    tolerance: float,
    method: str,
    stages: tuple[int, int] = (1, 1),
    absolute: bool = False,
    caveat: str = "",
    allowance: float = 0.0,
) -> MetricDiff:
    """A figure sampled from rows, judged on the interval of its change (before the Holm adjustment, which
    ``make_doc`` applies across the diff: ``p_adjusted`` is the raw p-value until then)."""
    b, n = _side(base, scale, details[0]), _side(new, scale, details[1])
    b, n = b.model_copy(update={"n": stages[0]}), n.model_copy(update={"n": stages[1]})
    m = MetricDiff(metric=metric, point=point, verdict="inconclusive", unit=unit, better=better, base=b, new=n,
                   change=None, gap=None, tolerance=tolerance, absolute=absolute, strict=True,
                   single=stages == (1, 1), method=method, text="", rule="bootstrap",
                   allowance=round(allowance, 6) if allowance else None)  # fmt: skip
    if b.value is None or n.value is None:
        return _with_verdict(m, Judgement("inconclusive", None, None, "a side has no figure"), caveat)
    gap = judge(b, n, tolerance, better, absolute).gap if b.low is not None and n.low is not None else None
    m = m.model_copy(update={"gap": None if gap is None else round(gap, 6)})
    why = "; ".join(f"{name}: {e.why_not}" for name, e in (("base", base), ("new", new)) if e.why_not)
    if why:
        return _with_verdict(m, Judgement("inconclusive", None, gap, why), caveat)
    if not absolute and base.value <= 0:
        return _with_verdict(m, Judgement("inconclusive", None, gap, "the base's figure is zero: no relative change"),
                             caveat)  # fmt: skip
    if not absolute and new.value <= 0:  # nothing answered (throughput 0): all of it gone, no log ratio
        m = m.model_copy(update={"change": -1.0})
        worse = better == "higher"
        return _with_verdict(m, Judgement("regression" if worse else "inconclusive", -1.0, gap,
                                          "the new figure is zero" + (", the base's is not: all of it lost, more"
                                                                      if worse else ": no relative change")),
                             caveat)  # fmt: skip
    c = change_of(base, new, absolute)
    up = {"change": round(c.change, 6), "change_low": round(c.low, 6), "change_high": round(c.high, 6)}
    m = m.model_copy(update={**up, "p_value": c.p_value, "p_adjusted": c.p_value})
    return rejudge(m, c.p_value, caveat)


def rejudge(m: MetricDiff, p_adjusted: float, caveat: str = "") -> MetricDiff:
    """A bootstrap metric judged again with its Holm-adjusted p-value."""
    assert m.change is not None and m.change_low is not None and m.change_high is not None
    j = judge_change(m.change, m.change_low, m.change_high, p_adjusted, m.tolerance, m.better, m.allowance or 0.0)
    if m.busy:
        j = Judgement("inconclusive", j.change, j.gap, m.busy)
    return _with_verdict(m.model_copy(update={"p_adjusted": p_adjusted}), j, caveat or _caveat_of(m))


_NOTE = "; note: "


def _caveat_of(m: MetricDiff) -> str:
    return m.text.split(_NOTE, 1)[1] if _NOTE in m.text else ""


def _with_verdict(m: MetricDiff, j: Judgement, caveat: str) -> MetricDiff:
    unit, tol = m.unit, (f"{m.tolerance * 100:.2g} percentage points" if m.absolute else f"{m.tolerance * 100:.2g} %")
    parts = [
        f"{m.metric} @ {m.point}: base {format_figure(m.base.value, unit)} (range {_range(m.base, unit)}, "
        f"{m.base.detail}), new {format_figure(m.new.value, unit)} (range {_range(m.new, unit)}, {m.new.detail})"
    ]
    if m.change is not None and m.change_low is not None and m.change_high is not None:
        f = (lambda x: f"{x * 100:+.2f} percentage points") if m.absolute else _pct
        p = f"p {m.p_value:.2g}" + (f", Holm-adjusted {m.p_adjusted:.2g}" if m.p_adjusted != m.p_value else "")
        parts.append(
            f"change {f(m.change)} (95 % interval {f(m.change_low)} to {f(m.change_high)}; {p}); tolerance {tol}"
        )
    worse = "higher" if m.better == "lower" else "lower"
    parts.append({
        "regression": f"regression: {j.why} than the tolerance, {worse} is worse",
        "improvement": f"improvement: {j.why} than the tolerance",
        "no_change": f"no change: {j.why} ± the tolerance",
        "inconclusive": f"inconclusive: {j.why}",
    }[j.verdict])  # fmt: skip
    if m.single:
        parts.append("this rests on one measurement each (its interval is the noise within one run, not between runs)")
    text = "; ".join(parts) + (f"{_NOTE}{caveat}" if caveat else "")
    return m.model_copy(update={"verdict": j.verdict, "text": text})


def holm(metrics: list[MetricDiff]) -> list[MetricDiff]:
    """Every bootstrap metric judged again with its p-value Holm-adjusted across all of them (step-down:
    the i-th smallest of m p-values times m − i + 1, never below the one before, at most 1)."""
    tested = sorted((m.p_value, i) for i, m in enumerate(metrics) if m.p_value is not None)
    out, running = list(metrics), 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        out[i] = rejudge(metrics[i], running)
    return out


#: the note of a diff without a metric
NOTHING_COMPARED = "nothing could be compared"


def make_doc(
    compared: str,
    base: dict[str, Any],
    new: dict[str, Any],
    tolerance: float,
    error_tolerance: float,
    metrics: list[MetricDiff],
    notes: list[str],
    tool_version: str,
    tail_tolerance: float = DEFAULT_TAIL_TOLERANCE,
    run_spread: float | None = None,
) -> DiffDoc:
    metrics = holm(metrics)
    order: tuple[Outcome, ...] = ("regression", "inconclusive", "improvement", "no_change")
    counts: dict[str, int] = {v: sum(m.verdict == v for m in metrics) for v in order}
    overall: Outcome = next((v for v in order if counts[v]), "no_change")
    if not metrics:
        overall = "inconclusive"
        notes = [*notes, NOTHING_COMPARED]
    return DiffDoc(
        schema_version=DIFF_SCHEMA_VERSION,
        tool_version=tool_version,
        kind="diff",
        compared=compared,
        base=base,
        new=new,
        tolerance=tolerance,
        error_tolerance=error_tolerance,
        tail_tolerance=tail_tolerance,
        run_spread=run_spread,
        verdict=overall,
        counts=counts,
        metrics=metrics,
        notes=notes,
    )
