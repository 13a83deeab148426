"""``satpoint diff``: did capacity or latency change between two results folders, beyond the noise?

Pure functions of loaded results data (``summary.json`` or ``sweep.json`` and the recorded rows).  Every
metric gets one verdict, ``regression``, ``improvement``, ``no_change`` or ``inconclusive``, from two
*ranges* (one per side) and a *tolerance* (the change that matters), by one rule (``judge``):

- the ranges are apart by more than the tolerance (the gap between them, relative to the base's value):
  ``regression`` or ``improvement``, whichever way the new side moved;
- else, when the change of the central values is within the tolerance: ``no_change``;
- else (ranges that overlap or nearly do, with a change larger than the tolerance): ``inconclusive``;
  never reported as ``no_change``.

Where the ranges come from:

- **saturation point**: each search's bracket, from its answer (the highest stable rate) up to the
  next rate it found unstable (the search's own resolution, as the sweep's tie rule counts it), over
  all ``--repeats`` searches or a sweep point's measurements; a lower bound (the capacity was never
  reached) is open upwards.
- **latency at equal offered load** (p50, p90, p99, service time p50 and p99), error rate and
  throughput: the stages both sides ran at the same offered rate, each side's figure over the pooled
  rows of its stages at that rate, with a 95 % interval from a *block bootstrap over one-second blocks*
  of the steady window (``block_bootstrap``).  Neighbouring requests are correlated under queueing (a
  slow request delays the ones queued behind it), so resampling single requests would treat correlated
  rows as independent and give intervals that are too narrow; resampling whole seconds keeps each
  second's dependence intact.  That is valid when the correlation dies out well within a second (at a
  utilisation ρ a queue forgets its state in a few service times / (1 − ρ)², tens of milliseconds for
  a stable stage) and the window is stationary (the steady window of a stable stage); near saturation
  it is neither, and the evidence says so.  With one run per side the interval is the noise *within* a
  run, not between runs: the verdict says that it rests on one measurement each.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from satpoint.analysis.sweep import LOWER_BOUND_TEXT, lower_bound_reasons
from satpoint.metrics.records import Records

Outcome = Literal["regression", "improvement", "no_change", "inconclusive"]
Better = Literal["higher", "lower"]
#: the default tolerance: a change smaller than 5 % does not matter
DEFAULT_TOLERANCE = 0.05
#: error rates are compared in absolute terms: a change of less than 0.5 percentage points does not matter
DEFAULT_ERROR_TOLERANCE = 0.005
#: two stages are at the same offered load when their target rates are within 1 %
RATE_MATCH = 0.01
#: bootstrap resamples per figure, and the interval's level
N_BOOT = 400
LEVEL = 0.95
#: fewer one-second blocks than this give no interval (a bootstrap over 2 blocks says nothing)
MIN_BLOCKS = 3
DIFF_FILE = "diff.json"
DIFF_SCHEMA_VERSION = 1

F64 = npt.NDArray[np.float64]

_CONFIG = ConfigDict(frozen=True, extra="allow")


class Side(BaseModel):
    """One side's figure: its central value and range, and how many measurements stand behind it."""

    model_config = _CONFIG
    value: float | None  # the central value (median of the answers, or the pooled figure)
    low: float | None  # the range; ``high`` None = open upwards (a lower bound)
    high: float | None
    n: int  # measurements (searches, stages or sweep measurements)
    blocks: int | None = None  # one-second blocks behind a bootstrap interval
    detail: str = ""  # the measurements in words


class MetricDiff(BaseModel):
    """One metric at one point: the verdict and its evidence (``diff.json`` ``metrics[]``)."""

    model_config = _CONFIG
    metric: str  # saturation_rps, latency_p50_ms, ..., service_p50_ms, error_rate, throughput_rps
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
    single: bool  # one measurement on each side
    method: str
    text: str


class DiffDoc(BaseModel):
    """``diff.json``: what ``satpoint diff`` concluded."""

    model_config = _CONFIG
    schema_version: int
    tool_version: str
    kind: str  # "diff"
    compared: str  # find, run or sweep
    base: dict[str, Any]  # {dir, kind, point?}
    new: dict[str, Any]
    tolerance: float
    error_tolerance: float
    verdict: Outcome  # the worst: regression > inconclusive > improvement > no_change
    counts: dict[str, int]
    metrics: list[MetricDiff]
    notes: list[str]

    @property
    def regressed(self) -> bool:
        return any(m.verdict == "regression" for m in self.metrics)

    @property
    def inconclusive(self) -> bool:
        return any(m.verdict == "inconclusive" for m in self.metrics)


# the rule -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Judgement:
    verdict: Outcome
    change: float | None
    gap: float | None
    why: str


def judge(base: Side, new: Side, tolerance: float, better: Better, absolute: bool = False) -> Judgement:
    """The verdict on two ranges (see the module's docstring)."""
    if base.value is None or new.value is None or base.low is None or new.low is None:
        return Judgement("inconclusive", None, None, "a side has no figure")
    scale = 1.0 if absolute else base.value
    if scale <= 0:
        return Judgement("inconclusive", None, None, "the base's figure is zero: no relative change")
    change = (new.value - base.value) / scale
    b_hi = math.inf if base.high is None else base.high
    n_hi = math.inf if new.high is None else new.high
    if n_hi < base.low:
        gap, moved = (base.low - n_hi) / scale, "down"
    elif new.low > b_hi:
        gap, moved = (new.low - b_hi) / scale, "up"
    else:
        gap, moved = 0.0, ""
    if gap > tolerance:
        worse = (moved == "down") == (better == "higher")
        return Judgement("regression" if worse else "improvement", change, gap, "the ranges are apart by more")
    open_range = base.high is None or new.high is None
    if open_range:
        why = "a lower bound's range is open upwards (its capacity was not reached): no change can be ruled out"
        return Judgement("inconclusive", change, gap, why)
    if abs(change) <= tolerance:
        how = "overlap" if gap == 0 else "are apart by less than the tolerance"
        return Judgement("no_change", change, gap, f"the ranges {how} and the change is within")
    return Judgement("inconclusive", change, gap, "the ranges overlap, but the change is larger than")


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _num(v: float | None, unit: str) -> str:
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
    hi = "∞ (a lower bound)" if s.high is None else _num(s.high, unit)
    return f"{_num(s.low, unit)}–{hi}"


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
) -> MetricDiff:
    """Judge one metric and say why in plain words."""
    j = judge(base, new, tolerance, better, absolute)
    single = base.n == 1 and new.n == 1
    tol = f"{tolerance * 100:.2g} percentage points" if absolute else f"{tolerance * 100:.2g} %"
    parts = [
        f"{metric} at {point}: base {_num(base.value, unit)} (range {_range(base, unit)}, {base.detail or base.n}), "
        f"new {_num(new.value, unit)} (range {_range(new, unit)}, {new.detail or new.n})"
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
        single=single,
        method=method,
        text="; ".join(parts),
    )


# saturation ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """One search's answer: the highest stable rate and the next unstable one (None: open, a lower bound)."""

    saturation_rps: float
    unstable_rps: float | None


def find_answers(summary: Mapping[str, Any]) -> list[Answer]:
    """A ``find`` summary's searches (each ``--repeats`` search, or the one search) that found an answer."""
    open_ = bool(lower_bound_reasons(summary))
    reps = [r for r in (summary.get("search") or {}).get("repeats") or [] if r.get("saturation_rps") is not None]
    if reps:
        return [
            Answer(float(r["saturation_rps"]), None if open_ or r.get("unstable_rps") is None else r["unstable_rps"])
            for r in reps
        ]
    sat = summary.get("saturation_rps")
    if sat is None:
        return []
    unstable = summary.get("unstable_rps")
    return [Answer(float(sat), None if open_ or unstable is None else float(unstable))]


def saturation_side(answers: Sequence[Answer], what: str = "search") -> Side:
    """Each answer with its bracket: median of the answers, range from the lowest answer to the highest
    unstable rate (open when any search never found one)."""
    if not answers:
        return Side(value=None, low=None, high=None, n=0, detail=f"no {what} found a saturation point")
    sats = [a.saturation_rps for a in answers]
    high = None if any(a.unstable_rps is None for a in answers) else max(float(a.unstable_rps or 0) for a in answers)
    brackets = ", ".join(
        f"{a.saturation_rps:.1f}–{'∞' if a.unstable_rps is None else f'{a.unstable_rps:.1f}'}" for a in answers
    )
    n = len(answers)
    return Side(
        value=round(statistics.median(sats), 3),
        low=round(min(sats), 3),
        high=None if high is None else round(high, 3),
        n=n,
        detail=f"{n} {what}{'es' if what == 'search' and n > 1 else 's' if n > 1 else ''}: {brackets} rps",
    )


def saturation_diff(base: Side, new: Side, point: str, tolerance: float, reasons: Sequence[str] = ()) -> MetricDiff:
    caveat = ""
    if reasons:
        caveat = "lower bound: " + "; ".join(LOWER_BOUND_TEXT.get(r, r) for r in reasons)
    return metric_diff(
        "saturation_rps",
        point,
        "rps",
        "higher",
        base,
        new,
        tolerance,
        "search brackets: from each answer up to the next rate found unstable",
        caveat=caveat,
    )


# rows at equal offered load -----------------------------------------------------------------------------
@dataclass(frozen=True)
class StageRows:
    """The rows of one stage's steady window, each with its one-second block."""

    target_rps: float
    verdict: str
    throughput_rps: float
    blocks: int  # blocks of about one second tiling the window
    block_s: float
    latency_s: F64  # the latency rows (answered OK, or censored at the time they waited)
    latency_block: npt.NDArray[np.int64]
    service_s: F64  # OK rows
    service_block: npt.NDArray[np.int64]
    error: F64  # 1.0 for an error row, per row due in the window
    error_block: npt.NDArray[np.int64]
    ok_per_block: F64  # OK rows due per block, per second


def stage_rows(rec: Records, stage: Mapping[str, Any]) -> StageRows:
    """A stage of ``summary.json`` (``window_start_s``/``window_end_s`` on its segment's clock) and its rows."""
    w0, w1 = float(stage["window_start_s"]), float(stage["window_end_s"])
    win = max(w1 - w0, 1e-9)
    blocks = max(1, math.floor(win))
    width = win / blocks
    lo, hi = np.searchsorted(rec.intended, [w0, w1], side="left")
    part = rec.select(slice(int(lo), int(hi)))
    block = np.minimum(((part.intended - w0) / width).astype(np.int64), blocks - 1)
    lat_m = part.latency_mask()
    ok = part.ok_mask()
    fin = part.error_mask() | ok  # rows that got an answer (or a timeout): the error rate's denominator
    ok_counts = np.bincount(block[ok], minlength=blocks).astype(np.float64) / width
    return StageRows(
        target_rps=float(stage["target_rps"]),
        verdict=str(stage.get("verdict", "")),
        throughput_rps=float(stage.get("throughput_rps") or 0.0),
        blocks=blocks,
        block_s=width,
        latency_s=part.latency_s()[lat_m],
        latency_block=block[lat_m],
        service_s=part.service_s()[ok],
        service_block=block[ok],
        error=part.error_mask()[fin].astype(np.float64),
        error_block=block[fin],
        ok_per_block=ok_counts,
    )


def _groups(values: F64, block: npt.NDArray[np.int64], blocks: int) -> list[F64]:
    order = np.argsort(block, kind="stable")
    cuts = np.searchsorted(block[order], np.arange(1, blocks))
    return [np.asarray(g, dtype=np.float64) for g in np.split(values[order], cuts)]


def block_bootstrap(
    groups: Sequence[F64], stat: Callable[[F64], float], n_boot: int = N_BOOT, seed: int = 0
) -> tuple[float, float] | None:
    """A ``LEVEL`` percentile interval of ``stat`` over the rows of ``groups`` (one array per block),
    resampling whole blocks with replacement; None with fewer than ``MIN_BLOCKS`` blocks."""
    k = len(groups)
    if k < MIN_BLOCKS:
        return None
    rng = np.random.default_rng(seed)
    stats: list[float] = []
    for _ in range(n_boot):
        sample = np.concatenate([groups[i] for i in rng.integers(0, k, k)])
        if len(sample):
            stats.append(stat(sample))
    if not stats:
        return None
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(np.asarray(stats), [tail, 100 - tail])
    return float(lo), float(hi)


_BLOCK_OF = {"latency_s": "latency_block", "service_s": "service_block", "error": "error_block"}


def _pooled_groups(stages: Sequence[StageRows], field: str) -> tuple[F64, list[F64]]:
    values: list[F64] = []
    groups: list[F64] = []
    for st in stages:
        v: F64 = getattr(st, field)
        b: npt.NDArray[np.int64] = getattr(st, _BLOCK_OF[field])
        values.append(v)
        groups.extend(_groups(v, b, st.blocks))
    return (np.concatenate(values) if values else np.zeros(0)), groups


def _rows_side(stages: Sequence[StageRows], field: str, stat: Callable[[F64], float], scale: float, seed: int) -> Side:
    values, groups = _pooled_groups(stages, field)
    blocks = sum(st.blocks for st in stages)
    n = len(stages)
    detail = f"{n} stage{'s' if n > 1 else ''}, {len(values)} requests, {blocks} one-second blocks"
    if len(values) == 0:
        return Side(value=None, low=None, high=None, n=n, blocks=blocks, detail=detail)
    ci = block_bootstrap(groups, stat, seed=seed)
    value = stat(values) * scale
    if ci is None:
        return Side(value=round(value, 6), low=None, high=None, n=n, blocks=blocks, detail=detail + ": too few")
    return Side(
        value=round(value, 6), low=round(ci[0] * scale, 6), high=round(ci[1] * scale, 6), n=n, blocks=blocks,
        detail=detail,
    )  # fmt: skip


def _throughput_side(stages: Sequence[StageRows], seed: int) -> Side:
    groups = [np.asarray([v], dtype=np.float64) for st in stages for v in st.ok_per_block]
    n = len(stages)
    value = statistics.fmean(st.throughput_rps for st in stages)
    ci = block_bootstrap(groups, lambda x: float(np.mean(x)), seed=seed)
    detail = f"{n} stage{'s' if n > 1 else ''}, {len(groups)} one-second blocks"
    if ci is None:
        return Side(value=round(value, 3), low=None, high=None, n=n, blocks=len(groups), detail=detail + ": too few")
    # the interval of the per-second rate, centred on the stage's own figure (completions in its window)
    mean = statistics.fmean(float(g[0]) for g in groups)
    return Side(
        value=round(value, 3), low=round(ci[0] - mean + value, 3), high=round(ci[1] - mean + value, 3), n=n,
        blocks=len(groups), detail=detail,
    )  # fmt: skip


def _percentile(q: float) -> Callable[[F64], float]:
    return lambda x: float(np.percentile(x, q))


#: (metric, rows field, statistic, scale to the unit, unit, better)
_ROW_METRICS: tuple[tuple[str, str, Callable[[F64], float], float, str], ...] = (
    ("latency_p50_ms", "latency_s", _percentile(50), 1000.0, "ms"),
    ("latency_p90_ms", "latency_s", _percentile(90), 1000.0, "ms"),
    ("latency_p99_ms", "latency_s", _percentile(99), 1000.0, "ms"),
    ("service_p50_ms", "service_s", _percentile(50), 1000.0, "ms"),
    ("service_p99_ms", "service_s", _percentile(99), 1000.0, "ms"),
    ("error_rate", "error", lambda x: float(np.mean(x)), 1.0, "fraction"),
)

BOOTSTRAP_METHOD = (
    f"block bootstrap over one-second blocks of the steady window ({N_BOOT} resamples, {LEVEL:.0%} interval)"
)


def load_diffs(
    base: Sequence[StageRows], new: Sequence[StageRows], point: str, tolerance: float, error_tolerance: float
) -> list[MetricDiff]:
    """Latency, service time, error rate and throughput of two sets of stages at the same offered rate."""
    verdicts = f"stage verdicts: base {', '.join(s.verdict for s in base)}; new {', '.join(s.verdict for s in new)}"
    unstable = any(s.verdict != "stable" for s in (*base, *new))
    caveat = verdicts + (
        " (a stage that is not stable is not stationary: its interval is too narrow)" if unstable else ""
    )
    out = []
    for i, (metric, field, stat, scale, unit) in enumerate(_ROW_METRICS):
        is_err = metric == "error_rate"
        b = _rows_side(base, field, stat, scale, seed=2 * i)
        n = _rows_side(new, field, stat, scale, seed=2 * i + 1)
        tol = error_tolerance if is_err else tolerance
        out.append(metric_diff(metric, point, unit, "lower", b, n, tol, BOOTSTRAP_METHOD, is_err, caveat))
    b = _throughput_side(base, seed=100)
    n = _throughput_side(new, seed=101)
    out.append(metric_diff("throughput_rps", point, "rps", "higher", b, n, tolerance, BOOTSTRAP_METHOD, caveat=caveat))
    return out


def match_rates(
    base: Sequence[StageRows], new: Sequence[StageRows]
) -> list[tuple[float, list[StageRows], list[StageRows]]]:
    """Groups of stages at the same target rate on both sides (within ``RATE_MATCH``), rising; a rate is
    kept when at least one side held it stably (latency of two overloaded stages depends on their length)."""
    rates: list[float] = []
    for st in sorted(base, key=lambda s: s.target_rps):
        if not any(_same(st.target_rps, r) for r in rates):
            rates.append(st.target_rps)
    out = []
    for r in rates:
        b = [s for s in base if _same(s.target_rps, r)]
        n = [s for s in new if _same(s.target_rps, r)]
        if b and n and any(s.verdict == "stable" for s in (*b, *n)):
            out.append((r, b, n))
    return out


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= RATE_MATCH * max(a, b, 1e-9)


# folders ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Folder:
    """A loaded results folder: ``kind`` run, find or sweep; its summary (``summary.json`` recomputed, or
    ``sweep.json``); its rows per segment index (run and find)."""

    dir: str
    kind: str
    doc: Mapping[str, Any]
    rows: Mapping[int, Records]

    def stages(self) -> list[StageRows]:
        """Every judged stage with its rows (an ``incomplete`` stage has no steady window to compare)."""
        out = []
        for st in self.doc.get("stages") or []:
            rec = self.rows.get(int(st["segment"]))
            if rec is None or st.get("verdict") == "incomplete":
                continue
            out.append(stage_rows(rec, st))
        return out


def diff_folders(
    base: Folder,
    new: Folder,
    tolerance: float = DEFAULT_TOLERANCE,
    error_tolerance: float = DEFAULT_ERROR_TOLERANCE,
    tool_version: str = "",
) -> DiffDoc:
    """Compare two folders of the same kind (find, run or sweep)."""
    if base.kind != new.kind:
        raise ValueError(f"the folders are of different kinds: {base.kind} (base) and {new.kind} (new)")
    notes: list[str] = []
    metrics: list[MetricDiff] = []
    if base.kind == "sweep":
        metrics, notes = _sweep_diffs(base.doc, new.doc, tolerance)
    else:
        if base.kind == "find":
            reasons = sorted(set(lower_bound_reasons(base.doc)) | set(lower_bound_reasons(new.doc)))
            metrics.append(
                saturation_diff(
                    saturation_side(find_answers(base.doc)),
                    saturation_side(find_answers(new.doc)),
                    "search",
                    tolerance,
                    reasons,
                )
            )
        matched = match_rates(base.stages(), new.stages())
        for rate, b, n in matched:
            metrics.extend(load_diffs(b, n, f"{rate:g} rps", tolerance, error_tolerance))
        if not matched:
            notes.append(
                "no stage ran at the same offered rate on both sides: latency at equal load was not compared "
                "(run both with the same --stage rates, or sweep with --at-rps)"
            )
        notes.extend(_interrupted_notes(base, new))
    return make_doc(base.kind, {"dir": base.dir, "kind": base.kind}, {"dir": new.dir, "kind": new.kind},
                    tolerance, error_tolerance, metrics, notes, tool_version)  # fmt: skip


def _interrupted_notes(base: Folder, new: Folder) -> list[str]:
    return [
        f"the {name} run was interrupted: it compares what was measured until then"
        for name, f in (("base", base), ("new", new))
        if f.doc.get("interrupted")
    ]


def make_doc(
    compared: str,
    base: dict[str, Any],
    new: dict[str, Any],
    tolerance: float,
    error_tolerance: float,
    metrics: list[MetricDiff],
    notes: list[str],
    tool_version: str,
) -> DiffDoc:
    order: tuple[Outcome, ...] = ("regression", "inconclusive", "improvement", "no_change")
    counts: dict[str, int] = {v: sum(m.verdict == v for m in metrics) for v in order}
    overall: Outcome = next((v for v in order if counts[v]), "no_change")
    if not metrics:
        overall = "inconclusive"
        notes = [*notes, "nothing could be compared"]
    return DiffDoc(
        schema_version=DIFF_SCHEMA_VERSION,
        tool_version=tool_version,
        kind="diff",
        compared=compared,
        base=base,
        new=new,
        tolerance=tolerance,
        error_tolerance=error_tolerance,
        verdict=overall,
        counts=counts,
        metrics=metrics,
        notes=notes,
    )


# sweeps -------------------------------------------------------------------------------------------------
def sweep_point_side(row: Mapping[str, Any]) -> Side:
    """A sweep point's saturation: its measurements' answers, its range ``bracket_rps``."""
    answers = [
        Answer(float(r["saturation_rps"]), r.get("unstable_rps"))
        for r in row.get("repeats") or []
        if r.get("saturation_rps") is not None
    ]
    side = saturation_side(answers, "measurement")
    b = row.get("bracket_rps")
    if b and side.value is not None:  # the sweep's own range (open when the point is a lower bound)
        side = side.model_copy(update={"low": b[0], "high": b[1]})
    return side


def point_diffs(base: Mapping[str, Any], new: Mapping[str, Any], point: str, tolerance: float) -> list[MetricDiff]:
    """Two sweep points: saturation, and p50/p99 at ``--at-rps`` (the same offered load) when both have it."""
    reasons = sorted(set(base.get("lower_bound_reasons") or []) | set(new.get("lower_bound_reasons") or []))
    out = [saturation_diff(sweep_point_side(base), sweep_point_side(new), point, tolerance, reasons)]
    ba, na = base.get("at_rps") or {}, new.get("at_rps") or {}
    for key in ("p50_ms", "p99_ms"):
        b, n = ba.get(key), na.get(key)
        if not b or not n:
            continue
        bs, ns = (
            Side(value=s["median"], low=s["min"], high=s["max"], n=s["n"], detail=f"{s['n']} measurements")
            for s in (b, n)
        )
        method = "the range of the measurements' figures at --at-rps (each a find's profile stage)"
        out.append(metric_diff(f"latency_{key}", f"{point} at --at-rps", "ms", "lower", bs, ns, tolerance, method))
    return out


def _sweep_diffs(
    base: Mapping[str, Any], new: Mapping[str, Any], tolerance: float
) -> tuple[list[MetricDiff], list[str]]:
    notes: list[str] = []
    out: list[MetricDiff] = []
    new_points = list(new.get("points") or [])
    for row in base.get("points") or []:
        match = next((r for r in new_points if r.get("knobs") == row.get("knobs")), None)
        if match is None:
            notes.append(f"{row.get('label')}: only in the base sweep")
            continue
        out.extend(point_diffs(row, match, str(row.get("label")), tolerance))
    base_knobs = [r.get("knobs") for r in base.get("points") or []]
    notes.extend(f"{r.get('label')}: only in the new sweep" for r in new_points if r.get("knobs") not in base_knobs)
    return out, notes


def sweep_points_diff(
    doc: Mapping[str, Any], dir_: str, point_a: str, point_b: str, tolerance: float, tool_version: str = ""
) -> DiffDoc:
    """Two points of one sweep (``diff --sweep DIR A B``), A the base: named by id (``p01``) or label."""
    rows = list(doc.get("points") or [])

    def pick(name: str) -> Mapping[str, Any]:
        for r in rows:
            if name in (r.get("id"), r.get("label")):
                found: Mapping[str, Any] = r
                return found
        known = ", ".join(f"{r.get('id')} ({r.get('label')})" for r in rows)
        raise ValueError(f"no point {name!r} in the sweep; its points: {known}")

    a, b = pick(point_a), pick(point_b)
    notes = []
    if (doc.get("config") or {}).get("repeats", 1) > 1:
        notes.append("the two points' measurements were interleaved, so drift spreads evenly over both")
    metrics = point_diffs(a, b, f"{a.get('label')} vs {b.get('label')}", tolerance)
    return make_doc(
        "sweep",
        {"dir": dir_, "kind": "sweep", "point": a.get("id"), "label": a.get("label")},
        {"dir": dir_, "kind": "sweep", "point": b.get("id"), "label": b.get("label")},
        tolerance,
        DEFAULT_ERROR_TOLERANCE,
        metrics,
        notes,
        tool_version,
    )
