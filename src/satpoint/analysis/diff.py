"""``satpoint diff``: did capacity or latency change between two results folders, beyond the noise?

Pure functions of loaded results data (``summary.json`` recomputed from its rows, or ``sweep.json``).
Every metric gets one verdict, ``regression``, ``improvement``, ``no_change`` or ``inconclusive``, from
two *ranges* (one per side) and a *tolerance* (the change that matters), by the rule in
``diff_verdict.judge``.  The ranges:

- **saturation point**: each search's bracket, from its answer (the highest stable rate) up to the next
  rate it found unstable (the search's own resolution, as the sweep's tie rule counts it), over all
  ``--repeats`` searches or a sweep point's measurements; a lower bound (the capacity was never reached)
  is open upwards.
- **at equal offered load** (latency, service time, error rate, throughput of the stages both sides ran
  at the same rate; time to first chunk and gaps between chunks when both sides streamed): a block
  bootstrap over one-second blocks (``diff_rows``).
- **a sweep's latency at ``--at-rps``**: the range of its measurements' figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from satpoint.analysis.diff_rows import StageRows, load_diffs, match_rates, stage_rows
from satpoint.analysis.diff_target import judge_target_hold
from satpoint.analysis.diff_verdict import (
    DEFAULT_ERROR_TOLERANCE,
    DEFAULT_TAIL_TOLERANCE,
    DEFAULT_TOLERANCE,
    DiffDoc,
    MetricDiff,
    Side,
    make_doc,
    metric_diff,
    tolerance_for,
)
from satpoint.analysis.sweep import LOWER_BOUND_TEXT, lower_bound_reasons
from satpoint.analysis.sweep_measurement import STREAM_FIELDS
from satpoint.metrics.records import Records

SWEEP_FILE = "sweep.json"  # the sweep's document (``experiments.sweep`` writes it)


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


# saturation ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """One search's answer: the highest stable rate and the next unstable one (None: open, a lower bound)."""

    saturation_rps: float
    unstable_rps: float | None


#: stage verdicts that say the server itself could not hold a rate (not the generator or its connection cap)
SERVER_LIMITS = ("saturated", "failing", "slo_violated")
#: lower-bound reasons that are about the generator: a rate the server itself failed still closes the range
_GENERATOR_REASONS = {"generator_limited", "client_limited"}


def _server_failed_at(summary: Mapping[str, Any], rate: float) -> bool:
    return any(
        abs(float(st["target_rps"]) - rate) <= 1e-4 * max(rate, 1.0) and st.get("verdict") in SERVER_LIMITS
        for st in summary.get("stages") or []
    )


def find_answers(summary: Mapping[str, Any]) -> list[Answer]:
    """A ``find`` summary's searches (each ``--repeats`` search, or the one search) that found an answer.

    A search's range is open upwards when ``find`` calls its answer a lower bound (``lower_bound_reasons``),
    except when the reason is the generator (it fell behind, or its connection cap was the limit, in some
    stage) and the server itself could not hold the search's unstable rate (a stage there judged saturated,
    failing or over the SLO): the capacity is then below that rate whatever the generator did elsewhere."""
    reasons = set(lower_bound_reasons(summary))

    def upper(u: Any) -> float | None:
        if u is None or reasons - _GENERATOR_REASONS:
            return None
        if reasons and not _server_failed_at(summary, float(u)):
            return None
        return float(u)

    reps = [r for r in (summary.get("search") or {}).get("repeats") or [] if r.get("saturation_rps") is not None]
    if reps:
        return [Answer(float(r["saturation_rps"]), upper(r.get("unstable_rps"))) for r in reps]
    sat = summary.get("saturation_rps")
    if sat is None:
        return []
    return [Answer(float(sat), upper(summary.get("unstable_rps")))]


def saturation_side(answers: Sequence[Answer], what: str = "search") -> Side:
    """Each answer with its bracket.  The range runs from the lowest answer to the highest unstable rate
    (open when any search never found one); the central value is the median of the brackets' middles (a
    search says the capacity lies between its answer and its unstable rate; an open one: its answer)."""
    if not answers:
        return Side(value=None, low=None, high=None, n=0, detail=f"no {what} found a saturation point")
    sats = [a.saturation_rps for a in answers]
    high = None if any(a.unstable_rps is None for a in answers) else max(float(a.unstable_rps or 0) for a in answers)
    brackets = ", ".join(
        f"{a.saturation_rps:.1f}–{'∞' if a.unstable_rps is None else f'{a.unstable_rps:.1f}'}" for a in answers
    )
    n = len(answers)
    mids = [a.saturation_rps if a.unstable_rps is None else (a.saturation_rps + a.unstable_rps) / 2 for a in answers]
    return Side(
        value=round(statistics.median(mids), 3),
        low=round(min(sats), 3),
        high=None if high is None else round(high, 3),
        n=n,
        detail=f"{n} {what}{'es' if what == 'search' and n > 1 else 's' if n > 1 else ''}: {brackets} rps",
    )


def saturation_diff(base: Side, new: Side, point: str, tolerance: float, reasons: Sequence[str] = ()) -> MetricDiff:
    caveat = ""
    why = "; ".join(LOWER_BOUND_TEXT.get(r, r) for r in reasons)
    if reasons and (base.high is None or new.high is None):
        caveat = f"lower bound: {why}"
    elif reasons:
        caveat = f"{why} in some stage, but the server itself could not hold the rate each range ends at"
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
        strict=False,
    )


# folders ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Folder:
    """A loaded results folder: ``kind`` run, find or sweep; its summary (``summary.json`` recomputed, or
    ``sweep.json``); its rows and its purpose (staircase, profile, ...) per segment index (run and find)."""

    dir: str
    kind: str
    doc: Mapping[str, Any]
    rows: Mapping[int, Records]
    purposes: Mapping[int, str] = field(default_factory=dict)

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
    tail_tolerance: float = DEFAULT_TAIL_TOLERANCE,
) -> DiffDoc:
    """Compare two folders of the same kind (find, run or sweep); ``tail_tolerance`` judges p90 and p99.

    A ``run`` is also compared with a ``find`` baseline (``run --baseline FIND_DIR``, the cheap check against
    the last search: its per-replica target held, and latency at the rates both held stably)."""
    if base.kind != new.kind and (base.kind, new.kind) != ("find", "run"):
        raise ValueError(f"the folders are of different kinds: {base.kind} (base) and {new.kind} (new)")
    notes: list[str] = []
    metrics: list[MetricDiff] = []
    stream: dict[str, bool] | None = None
    if base.kind != new.kind:
        notes.append(
            "the base is a find, the new folder a run: the saturation point is not compared (a run does not "
            "search), latency only at the rates both held stably"
        )
    if base.kind == "sweep":
        metrics, notes = _sweep_diffs(base.doc, new.doc, tolerance, tail_tolerance)
    else:
        if base.kind == new.kind == "find":
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
        matched, rate_notes = match_rates(base.stages(), new.stages(), stable_only="find" in (base.kind, new.kind))
        notes.extend(rate_notes)
        for rate, b, n in matched:
            metrics.extend(load_diffs(b, n, f"{rate:.4g} rps", tolerance, error_tolerance, tail_tolerance))
        if not matched:
            notes.append(
                "no stage ran at the same offered rate on both sides (for find: held stably by both): latency at "
                "equal load was not compared "
                "(run both with the same --stage rates, or sweep with --at-rps)"
            )
        notes.extend(_interrupted_notes(base, new))
        stream, stream_note = streams_compared(base, new)
        notes.extend([stream_note] if stream_note else [])
    doc = make_doc(new.kind, {"dir": base.dir, "kind": base.kind}, {"dir": new.dir, "kind": new.kind},
                   tolerance, error_tolerance, metrics, notes, tool_version, tail_tolerance)  # fmt: skip
    if new.kind == "sweep":
        return doc
    if stream is not None:
        doc = doc.model_copy(update={"stream": stream})
    return doc.with_target_hold(judge_target_hold(new.doc, new.purposes, base.doc, base.purposes))


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
) -> list[MetricDiff]:
    """Two sweep points: saturation, and p50/p99 at ``--at-rps`` (the same offered load) when both have it
    (p99 judged with ``tail_tolerance``); with ``--stream``, time to first chunk and gaps there too."""
    reasons = sorted(set(base.get("lower_bound_reasons") or []) | set(new.get("lower_bound_reasons") or []))
    out = [saturation_diff(sweep_point_side(base), sweep_point_side(new), point, tolerance, reasons)]
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
        out.append(metric_diff(metric, f"{point} at --at-rps", "ms", "lower", bs, ns, tol, method))
    return out


def _sweep_diffs(
    base: Mapping[str, Any], new: Mapping[str, Any], tolerance: float, tail_tolerance: float
) -> tuple[list[MetricDiff], list[str]]:
    notes: list[str] = []
    out: list[MetricDiff] = []
    new_points = list(new.get("points") or [])
    for row in base.get("points") or []:
        match = next((r for r in new_points if r.get("knobs") == row.get("knobs")), None)
        if match is None:
            notes.append(f"{row.get('label')}: only in the base sweep")
            continue
        out.extend(point_diffs(row, match, str(row.get("label")), tolerance, tail_tolerance))
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
    metrics = point_diffs(a, b, f"{a.get('label')} vs {b.get('label')}", tolerance, tail_tolerance)
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
    )
