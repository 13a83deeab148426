"""``satpoint diff``: did capacity or latency change between two results folders, beyond the noise?

Pure functions of loaded results data (``summary.json`` recomputed from its rows, or ``sweep.json``).
Every metric gets one verdict, ``regression``, ``improvement``, ``no_change`` or ``inconclusive``, against
a *tolerance* (the change that matters), by the rules in ``diff_verdict``:

- **saturation point** (``diff_saturation``): for two finds, the figure ``find`` publishes (the lowest
  search), its range from that answer up to the lowest rate any search found unstable, judged as search
  brackets; a side that held no rate by the server's doing against one with an answer is a regression, a
  target lost under load closes the range where it was lost, and a new side with fewer searches than the
  base cannot clear it.  A sweep point: its measurements' brackets; a lower bound is open upwards.
- **at equal offered load** (latency, service time, error rate, throughput of the search, profile and run
  stages both sides ran within 0.1 % of the same rate; time to first chunk and gaps between chunks when both
  sides streamed): the interval of the change new/base from a block bootstrap of both sides, blocks sized from
  each stage's own autocorrelation (``diff_rows``, ``diff_bootstrap``), Holm-adjusted across the diff;
  ``no_change`` only when the whole interval lies within the tolerance.
- **what was not judged** (``diff_lost``): a new target lost under a load the base survived is a regression;
  a rate a base run held stably that the new run never judged is inconclusive.
- **a sweep's latency at ``--at-rps``**: the range of its measurements' figures.

Two folders that measured different loads or judged their stages by different rules (``diff_config``) are
refused before anything is judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from satpoint.analysis.diff.busy import (
    busy_at,
    busy_search,
    machine_explains,
    not_from_busy,
    not_from_changed_machine,
)
from satpoint.analysis.diff.config import refusal, sweep_refusal
from satpoint.analysis.diff.lost import lost_target_diff, missing_rate_diffs
from satpoint.analysis.diff.rows import StageRows, load_diffs, match_rates, queueing_factor, stage_rows
from satpoint.analysis.diff.saturation import SERVER_LIMITS as SERVER_LIMITS
from satpoint.analysis.diff.saturation import Answer as Answer
from satpoint.analysis.diff.saturation import (
    answers_spread,
    counted_spread,
    failed_side_diff,
    fewer_searches_diff,
    no_answer_cause,
    published_side,
    saturation_allowance,
    saturation_diff,
    searches,
)
from satpoint.analysis.diff.saturation import find_answers as find_answers
from satpoint.analysis.diff.saturation import saturation_side as saturation_side
from satpoint.analysis.diff.spread import latency_allowance
from satpoint.analysis.diff.target import TARGET_HOLD_PURPOSE, judge_target_hold
from satpoint.analysis.diff.tolerances import (
    ALL_TAIL_METRICS,
    DEFAULT_ERROR_TOLERANCE,
    DEFAULT_TAIL_TOLERANCE,
    DEFAULT_TOLERANCE,
    tolerance_for,
)
from satpoint.analysis.diff.verdict import DEFAULT_RUN_SPREAD, DiffDoc, MetricDiff, Side, make_doc, metric_diff
from satpoint.analysis.search.rates import same_load
from satpoint.analysis.search.summary import SEARCH_PURPOSES
from satpoint.analysis.server.machine_busy import busy_segments
from satpoint.analysis.server.machine_speed import speed_changed, speed_ratio
from satpoint.analysis.sweep.conclusions import lower_bound_reasons
from satpoint.analysis.sweep.measurement import STREAM_FIELDS
from satpoint.metrics.records import Records

SWEEP_FILE = "sweep.json"  # the sweep's document (``experiments.sweep`` writes it)
#: the segments compared at equal offered load: the search's, its latency profile, a run's stages; not a
#: flame graph's (py-spy attached), the hysteresis steps (right after the server was tipped over), a recheck
#: (one stage again from idle) nor the hold at a baseline's target (``diff_target``: its own verdict)
COMPARED_PURPOSES = (*SEARCH_PURPOSES, "profile", "run", "closed_loop")


def parse_fraction(text: str, what: str) -> float:
    """``5%`` or ``0.05`` as 0.05 (a ValueError naming ``what`` otherwise)."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"{what} must be a fraction (0.05) or a percentage (5%), not {text!r}") from None
    if not 0 <= v < 10:
        raise ValueError(f"{what} {text!r} is out of range")
    return v


# folders ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Folder:
    """A loaded results folder: ``kind`` run, find or sweep; its summary (``summary.json`` recomputed, or
    ``sweep.json``); its rows and its purpose (staircase, profile, ...) per segment index (run and find);
    its results header (``results.json``: what load it measured, ``diff_config``)."""

    dir: str
    kind: str
    doc: Mapping[str, Any]
    rows: Mapping[int, Records]
    purposes: Mapping[int, str] = field(default_factory=dict)
    header: Mapping[str, Any] = field(default_factory=dict)

    def stages(self) -> list[StageRows]:
        """Every judged stage of the purposes compared (``COMPARED_PURPOSES``; a segment without a recorded
        purpose counts) with its rows (an ``incomplete`` stage has no steady window to compare)."""
        out = []
        for st in self.doc.get("stages") or []:
            rec = self.rows.get(int(st["segment"]))
            if rec is None or st.get("verdict") == "incomplete" or not self._compared(int(st["segment"])):
                continue
            out.append(stage_rows(rec, st))
        return out

    def _compared(self, segment: int) -> bool:
        return self.purposes.get(segment, COMPARED_PURPOSES[0]) in COMPARED_PURPOSES

    def left_out(self) -> dict[str, int]:
        """The stages not compared at equal load, counted by their segment's purpose."""
        out: dict[str, int] = {}
        for st in self.doc.get("stages") or []:
            seg = int(st["segment"])
            if not self._compared(seg):
                out[self.purposes[seg]] = out.get(self.purposes[seg], 0) + 1
        return out


def match_stages(
    base: Sequence[StageRows], new: Sequence[StageRows], stable_only: bool
) -> tuple[list[tuple[float, list[StageRows], list[StageRows]]], list[str]]:
    """``diff_rows.match_rates`` over stages at the same rate within ``rates.LOAD_MATCH`` (0.1 %): each group of
    rates that close is matched on its own, so stages further apart are never pooled."""
    out: list[tuple[float, list[StageRows], list[StageRows]]] = []
    notes: list[str] = []
    used: set[int] = set()
    for st in sorted(base, key=lambda s: s.target_rps):
        if id(st) in used:
            continue
        b = [s for s in base if id(s) not in used and same_load(s.target_rps, st.target_rps)]
        n = [s for s in new if id(s) not in used and same_load(s.target_rps, st.target_rps)]
        used.update(id(s) for s in (*b, *n))
        got, said = match_rates(b, n, stable_only=stable_only)
        out.extend(got)
        notes.extend(said)
    return out, notes


def _find_saturation(base: Folder, new: Folder, tolerance: float, run_spread: float, shift: float = 0.0) -> MetricDiff:
    """The saturation point of two finds: the figure ``find`` publishes (``published_side``), a change within
    the noise between runs left undecided (``saturation_allowance``: ``run_spread`` when a side counted one
    search), and a side that held no rate by the server's doing against one with an answer
    (``failed_side_diff``)."""
    reasons = sorted(set(lower_bound_reasons(base.doc)) | set(lower_bound_reasons(new.doc)))
    allowance = saturation_allowance(searches(base.doc), searches(new.doc), counted_spread(base.doc), run_spread)
    allowance += shift if allowance > 0 or shift > 0 else 0.0  # the machine's change of speed (diff_folders)
    m = saturation_diff(published_side(base.doc), published_side(new.doc), "search", tolerance, reasons, lowest=True,
                        allowance=allowance)  # fmt: skip
    m = failed_side_diff(m, no_answer_cause(base.doc, base.purposes), no_answer_cause(new.doc, new.purposes))
    m = fewer_searches_diff(m, base.doc, new.doc)
    if m.base.value is None or m.new.value is None:  # a side that held no rate: not the machine's doing
        return m
    return not_from_busy(m, busy_search(base.doc, base.purposes), busy_search(new.doc, new.purposes))


def _unwatched_notes(base: Folder, new: Folder) -> list[str]:
    """What could not be checked of each side's machine: other work (no local server was watched: ``--url``
    without ``--server-pid``, or an older folder) and its speed (an older folder, or a fleet's run)."""
    out = []
    for side, f in (("base", base), ("new", new)):
        missing = [what for key, what in (("machine_busy", "other work on it"), ("machine_speed", "its speed"))
                   if f.doc.get(key) is None]  # fmt: skip
        if missing:
            out.append(f"the {side} side's machine was not checked for {' or '.join(missing)}: a figure measured "
                       "while it was busy or slower could not be held back")  # fmt: skip
    return out


def diff_folders(
    base: Folder,
    new: Folder,
    tolerance: float = DEFAULT_TOLERANCE,
    error_tolerance: float = DEFAULT_ERROR_TOLERANCE,
    tool_version: str = "",
    tail_tolerance: float = DEFAULT_TAIL_TOLERANCE,
    run_spread: float = DEFAULT_RUN_SPREAD,
) -> DiffDoc:
    """Compare two folders (``_diff_once``).  When the machine's speed changed between them
    (``machine_speed``), the diff is also taken with the run spread widened by the change, and a verdict the
    machine can explain is held back (``diff_busy.machine_explains``): a no_change, or a regression or an
    improvement the wider spread no longer calls, whichever side was slower.  A change beyond what the
    machine explains keeps its verdict."""
    args = (tolerance, error_tolerance, tool_version, tail_tolerance)
    doc = _diff_once(base, new, *args, run_spread)
    ratio = speed_ratio(base.doc, new.doc) if base.kind != "sweep" else None
    changed = speed_changed(ratio)
    if ratio is None or changed is None:
        return doc
    shift = ratio - 1 if ratio > 1 else 1 / ratio - 1
    wide = _diff_once(base, new, *args, run_spread, shift=shift)
    explained = machine_explains(doc.metrics, wide.metrics)
    return _diff_once(base, new, *args, run_spread, (explained, changed)) if explained else doc


def _diff_once(
    base: Folder,
    new: Folder,
    tolerance: float,
    error_tolerance: float,
    tool_version: str,
    tail_tolerance: float,
    run_spread: float,
    held: tuple[set[tuple[str, str]], str] | None = None,
    shift: float = 0.0,
) -> DiffDoc:
    """Compare two folders of the same kind (find, run or sweep); ``tail_tolerance`` judges p90 and p99;
    ``run_spread``: how far one run's figures move between runs of an unchanged server (``DEFAULT_RUN_SPREAD``),
    which a figure resting on one run a side must exceed to be called a change.

    A ``run`` is also compared with a ``find`` baseline (``run --baseline FIND_DIR``, the cheap check against
    the last search: its per-replica target held, and latency at the rates both held stably).  Two folders
    that measured different loads (``diff_config``) are refused (a ValueError naming each difference)."""
    if base.kind != new.kind and (base.kind, new.kind) != ("find", "run"):
        raise ValueError(f"the folders are of different kinds: {base.kind} (base) and {new.kind} (new)")
    if base.kind != "sweep" and (why := refusal(base.header, new.header, base.doc, new.doc)):
        raise ValueError(why)
    if base.kind == "sweep" and (why := sweep_refusal(base.doc, new.doc)):
        raise ValueError(why)
    notes: list[str] = []
    metrics: list[MetricDiff] = []
    stream: dict[str, bool] | None = None
    if base.kind != new.kind:
        notes.append(
            "the base is a find, the new folder a run: the saturation point is not compared (a run does not "
            "search), latency only at the rates both held stably"
        )
    if base.kind == "sweep":
        metrics, notes = _sweep_diffs(base.doc, new.doc, tolerance, tail_tolerance, run_spread)
    else:
        if base.kind == new.kind == "find":
            metrics.append(_find_saturation(base, new, tolerance, run_spread, shift))
        base_stages, new_stages = base.stages(), new.stages()
        matched, rate_notes = match_stages(base_stages, new_stages, stable_only="find" in (base.kind, new.kind))
        notes.extend(rate_notes)
        low = _lowest(base_stages)  # the base's queueing: a slower new side must not widen its own allowance
        busy_b, busy_n = busy_segments(base.doc), busy_segments(new.doc)
        for rate, b, n in matched:
            k = queueing_factor(b, low)
            at = load_diffs(b, n, f"{rate:.4g} rps", tolerance, error_tolerance, tail_tolerance, run_spread, k, shift)
            metrics.extend(not_from_busy(x, busy_at(b, busy_b), busy_at(n, busy_n)) for x in at)
        metrics.extend(_unjudged(base, new, new_stages, tolerance))
        if not matched:
            notes.append(
                "no stage ran at the same offered rate on both sides (for find: held stably by both): latency at "
                "equal load was not compared "
                "(run both with the same --stage rates, or sweep with --at-rps)"
            )
        notes.extend(_left_out_notes(base, new))
        notes.extend(_interrupted_notes(base, new))
        bm, nm = ((f.header.get("target") or {}).get("model") for f in (base, new))
        if bm and nm and bm != nm:  # not refused: a new version may rename its model
            notes.append(f"the two folders measured different models: {bm} (base) vs {nm} (new); if the new one is "
                         "not the same model renamed, the diff compares two models, not two versions")  # fmt: skip
        stream, stream_note = streams_compared(base, new)
        notes.extend([stream_note] if stream_note else [])
        ratio = speed_ratio(base.doc, new.doc)  # the machine's speed on the two sides (engine.machine_speed)
        if held is not None:  # the verdicts the machine's change explains (diff_folders)
            metrics = [not_from_changed_machine(m, held[1]) if (m.metric, m.point) in held[0] else m for m in metrics]
        if ratio is not None:
            notes.append(f"machine speed: the reference workload took {ratio:.3f}x as long on the new side")
        notes.extend(_unwatched_notes(base, new))
    doc = make_doc(new.kind, {"dir": base.dir, "kind": base.kind}, {"dir": new.dir, "kind": new.kind},
                   tolerance, error_tolerance, metrics, notes, tool_version, tail_tolerance, run_spread)  # fmt: skip
    if new.kind == "sweep":
        return doc
    if stream is not None:
        doc = doc.model_copy(update={"stream": stream})
    return doc.with_target_hold(judge_target_hold(new.doc, new.purposes, base.doc, base.purposes))


def _lowest(stages: Sequence[StageRows]) -> list[StageRows]:
    """The side's stable stages at its two lowest rates, lowest first (``queueing_factor``)."""
    stable = sorted((s for s in stages if s.verdict == "stable"), key=lambda s: s.target_rps)
    out: list[StageRows] = []
    for s in stable:
        if not out or not same_load(s.target_rps, out[-1].target_rps):
            out.append(s)
    return out[:2]


def _unjudged(base: Folder, new: Folder, new_stages: Sequence[StageRows], tolerance: float) -> list[MetricDiff]:
    """A new target lost under a load the base survived, and (run against run) each rate the base held stably
    that the new run never judged (``diff_lost``): never a silent pass."""
    out = []
    if (lost := lost_target_diff(base.doc, new.doc, base.doc.get("stages") or [], tolerance)) is not None:
        out.append(lost)
    if base.kind == new.kind == "run":
        held = [s.target_rps for s in base.stages() if s.verdict == "stable"]
        out.extend(missing_rate_diffs(held, [s.target_rps for s in new_stages], new.doc, tolerance))
    return out


def _left_out_notes(base: Folder, new: Folder) -> list[str]:
    out = []
    for name, f in (("base", base), ("new", new)):
        left = {p: k for p, k in f.left_out().items() if p != TARGET_HOLD_PURPOSE}
        if left:
            what = ", ".join(f"{k} {p}" for p, k in sorted(left.items()))
            out.append(f"the {name} folder's {what} stage(s) are not compared at equal load (only the search's, "
                       "the profile's and a run's stages are)")  # fmt: skip
    return out


def _streamed(f: Folder) -> bool:
    return bool((f.doc.get("target") or {}).get("stream")) or any(r.stream is not None for r in f.rows.values())


def streams_compared(base: Folder, new: Folder) -> tuple[dict[str, bool] | None, str]:
    """``diff.json``'s ``stream`` (None when neither side streamed) and, when only one side did, a note saying
    so: time to first chunk and gaps are then not compared (one side has none), and its latency ends with
    the last chunk where the other's ends with the one answer."""
    b, n = _streamed(base), _streamed(new)
    if not b and not n:
        return None, ""
    note = ""
    if b != n:
        only, other = ("base", "new") if b else ("new", "base")
        note = (
            f"only the {only} folder streamed its answers (--stream), the {other} did not: time to first chunk "
            f"and gaps between chunks are not compared, and latency is to the last chunk on the {only} side, "
            f"to the whole answer on the {other}"
        )
    return {"base": b, "new": n, "compared": b and n}, note


def _interrupted_notes(base: Folder, new: Folder) -> list[str]:
    return [
        f"the {name} run was interrupted: it compares what was measured until then"
        for name, f in (("base", base), ("new", new))
        if f.doc.get("interrupted")
    ]


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
    sat = row.get("saturation_rps")
    if not answers and sat:  # a sweep.json written before it recorded each measurement's answer
        n = int(sat["n"])
        detail = f"{n} measurement{'s' if n > 1 else ''}: median {sat['median']:.1f} rps"
        side = Side(value=sat["median"], low=sat["min"], high=sat["max"], n=n, detail=detail)
    if b and side.value is not None:  # the sweep's own range (open when the point is a lower bound)
        side = side.model_copy(update={"low": b[0], "high": b[1]})
    return side


def point_diffs(
    base: Mapping[str, Any],
    new: Mapping[str, Any],
    point: str,
    tolerance: float,
    tail_tolerance: float = DEFAULT_TAIL_TOLERANCE,
    run_spread: float = DEFAULT_RUN_SPREAD,
    at_rate: float | None = None,
) -> list[MetricDiff]:
    """Two sweep points: saturation, and p50/p99 at ``--at-rps`` (``at_rate``, the same offered load) when
    both have it (p99 judged with ``tail_tolerance``); with ``--stream``, time to first chunk and gaps there
    too.  A change must also exceed the noise between runs: ``saturation_allowance`` for the saturation point,
    ``latency_allowance`` at ``--at-rps`` with the queueing of an M/M/1 at that share of the base's capacity."""
    reasons = sorted(set(base.get("lower_bound_reasons") or []) | set(new.get("lower_bound_reasons") or []))
    bs_, ns_ = sweep_point_side(base), sweep_point_side(new)
    allow = saturation_allowance(bs_.n, ns_.n, _point_spread(base), run_spread)
    out = [saturation_diff(bs_, ns_, point, tolerance, reasons, allowance=allow)]
    ba, na = base.get("at_rps") or {}, new.get("at_rps") or {}
    for key in ("p50_ms", "p99_ms", *STREAM_FIELDS):
        b, n = ba.get(key), na.get(key)
        if not b or not n:
            continue
        bs, ns = (
            Side(value=s["median"], low=s["min"], high=s["max"], n=s["n"], detail=f"{s['n']} measurements")
            for s in (b, n)
        )
        method = "the range of the measurements' figures at --at-rps (each a find's profile stage)"
        metric = key if key in STREAM_FIELDS else f"latency_{key}"
        tol = tolerance_for(metric, tolerance, tail_tolerance)
        # several measurements a side: their own ranges hold the spread between them (no allowance)
        k, tail = _mm1_queueing(at_rate, bs_.value), metric in ALL_TAIL_METRICS
        allow_ms = 0.0 if bs.n >= 2 and ns.n >= 2 else latency_allowance(run_spread, k, tail)
        out.append(metric_diff(metric, f"{point} at --at-rps", "ms", "lower", bs, ns, tol, method,
                               allowance=allow_ms))  # fmt: skip
    return out


def _mm1_queueing(rate: float | None, capacity: float | None) -> float:
    """1 / (1 - rate / capacity), the latency's queueing factor at ``rate`` (inf at or past the capacity;
    1 when either is unknown)."""
    if not rate or not capacity:
        return 1.0
    return 1.0 / (1.0 - rate / capacity) if rate < capacity else float("inf")


def _point_spread(row: Mapping[str, Any]) -> float:
    """How far a sweep point's measurements spread: their closed brackets' answers, or (a sweep.json written
    before it recorded each) its min and max."""
    reps = row.get("repeats")
    if reps:
        closed = [r for r in reps if r.get("saturation_rps") is not None and r.get("unstable_rps") is not None]
        return answers_spread([Answer(float(r["saturation_rps"]), float(r["unstable_rps"])) for r in closed])
    sat = row.get("saturation_rps") or {}
    lo, hi = sat.get("min"), sat.get("max")
    return (float(hi) - float(lo)) / float(lo) if lo and hi else 0.0


def _at_rps(doc: Mapping[str, Any]) -> float | None:
    v = (doc.get("config") or {}).get("at_rps")
    return float(v) if v else None


def failed_cause(doc: Mapping[str, Any], row: Mapping[str, Any]) -> str:
    """Why a sweep point has no saturation point, when every measurement of it failed by the server's doing
    (its target lost, its server killed for its memory: the sweep marks them ``failed``); "" otherwise."""
    if (row.get("saturation_rps") or {}).get("median") is not None or row.get("measurements"):
        return ""
    ms = doc.get("measurements") or []
    failed = [m for m in ms if m.get("point") == row.get("id") and m.get("status") == "failed"]
    return "; ".join(dict.fromkeys(str(m.get("error") or "the measurement failed") for m in failed))


def _sweep_diffs(
    base: Mapping[str, Any], new: Mapping[str, Any], tolerance: float, tail_tolerance: float, run_spread: float
) -> tuple[list[MetricDiff], list[str]]:
    notes: list[str] = []
    out: list[MetricDiff] = []
    new_points = list(new.get("points") or [])
    for row in base.get("points") or []:
        match = next((r for r in new_points if r.get("knobs") == row.get("knobs")), None)
        if match is None:
            notes.append(f"{row.get('label')}: only in the base sweep")
            continue
        got = point_diffs(row, match, str(row.get("label")), tolerance, tail_tolerance, run_spread, _at_rps(base))
        got[0] = failed_side_diff(got[0], "", failed_cause(new, match))  # the saturation point
        out.extend(got)
    base_knobs = [r.get("knobs") for r in base.get("points") or []]
    notes.extend(f"{r.get('label')}: only in the new sweep" for r in new_points if r.get("knobs") not in base_knobs)
    return out, notes


def sweep_points_diff(
    doc: Mapping[str, Any],
    dir_: str,
    point_a: str,
    point_b: str,
    tolerance: float,
    tool_version: str = "",
    tail_tolerance: float = DEFAULT_TAIL_TOLERANCE,
    run_spread: float = DEFAULT_RUN_SPREAD,
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
    metrics = point_diffs(a, b, f"{a.get('label')} vs {b.get('label')}", tolerance, tail_tolerance, run_spread,
                          _at_rps(doc))  # fmt: skip
    return make_doc(
        "sweep",
        {"dir": dir_, "kind": "sweep", "point": a.get("id"), "label": a.get("label")},
        {"dir": dir_, "kind": "sweep", "point": b.get("id"), "label": b.get("label")},
        tolerance,
        DEFAULT_ERROR_TOLERANCE,
        metrics,
        notes,
        tool_version,
        tail_tolerance,
        run_spread,
    )
