"""SLO thresholds: ``--threshold 'p99<50ms'`` on ``run`` and ``find``, judged against summary.json.

A pure function of the summary (plus which segment served which purpose): parse once before the test
(bad syntax is a usage error, exit 2), evaluate after it, and a failed threshold makes the command exit
with 3 once every result has been written.  ``summary.json`` gets ``"thresholds": [...]``, one entry per
threshold: ``{expr, metric, op, limit, unit, actual, passed, stage, note}``.

Syntax: ``METRIC OP VALUE[UNIT]`` (spaces allowed, case-insensitive), ``OP`` one of ``< <= > >=``.

==========================  ===========================================================  ===============
metric                      meaning                                                      units
==========================  ===========================================================  ===============
``p50 p90 p95 p99 p999``    latency percentile (``p99.9`` = ``p999``), done − intended   ``us ms s``
``max``                     largest latency                                              (default ms)
``service_p50`` … ``_max``  service time percentile, done − actual send                  ``us ms s``
``ttfc_p50`` … ``_max``     ``--stream``: time to first chunk, first chunk − intended    ``us ms s``
``gap_p50`` … ``_max``      ``--stream``: gap between consecutive chunks of a stream     ``us ms s``
``chunks_per_s``            ``--stream``: chunks of OK streams per second (highest)      ``/s``
``error_rate``              errors / requests of a stage                                 ``%`` or fraction
``throughput_rps``          OK completions per second in a stage's steady window         ``rps``, ``/s``
``saturation_rps``          ``find`` only: the saturation point                          ``rps``
``max_throughput_rps``      ``find`` only: completion rate while overloaded (capacity)   ``rps``
==========================  ===========================================================  ===============

Which stages a per-stage metric (latency, service time, error rate) is judged on:

- ``run``: every stage with a steady window; the *worst* one counts (the highest value for ``<``/``<=``,
  the lowest for ``>``/``>=``).
- ``find``: the latency profile stages (purpose ``profile``) offered at most the per-replica target,
  i.e. ``target_rps <= saturation × (1 − margin)`` — the load an autoscaled replica is meant to carry;
  if there are none (no profile, or no saturation point), the stable search stages (``staircase``,
  ``refine``) at or below that target, else every stable search stage; again the worst one counts.
- ``throughput_rps`` is the *highest* steady-window throughput of any stage (what the run achieved).

A threshold whose metric has no value (nothing measured, no saturation point found) fails, with a
note.  ``saturation_rps`` and ``max_throughput_rps`` are rejected for ``run`` at parse time.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "Threshold",
    "ThresholdError",
    "ThresholdResult",
    "evaluate",
    "failed",
    "format_result",
    "parse_slo",
    "parse_threshold",
    "parse_thresholds",
    "results_thresholds",
]

_PCT_KEYS = ("p50", "p90", "p95", "p99", "p999", "max")
LATENCY_METRICS = _PCT_KEYS
SERVICE_METRICS = tuple(f"service_{k}" for k in _PCT_KEYS)
#: streams (``--stream``): time to first chunk and gaps between chunks, per stage (``summary.stages[].stream``)
STREAM_PREFIXES = {"ttfc_": "ttfc_ms", "gap_": "gap_ms"}
STREAM_METRICS = tuple(f"{p}{k}" for p in STREAM_PREFIXES for k in _PCT_KEYS)
TIME_METRICS = (*LATENCY_METRICS, *SERVICE_METRICS, *STREAM_METRICS)
STAGE_METRICS = (*LATENCY_METRICS, *SERVICE_METRICS, *STREAM_METRICS, "error_rate")
FIND_ONLY = ("saturation_rps", "max_throughput_rps")
#: the highest value of any stage counts (what the run achieved)
PEAK_METRICS = ("throughput_rps", "chunks_per_s")
METRICS = (*STAGE_METRICS, *PEAK_METRICS, *FIND_ONLY)
OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_ALIASES = {"p99.9": "p999", "p99.0": "p99", "p50.0": "p50", "p90.0": "p90", "p95.0": "p95", "p100": "max"}
_TIME_UNITS = {"us": 0.001, "µs": 0.001, "ms": 1.0, "s": 1000.0}
_RATE_UNITS = {"": 1.0, "rps": 1.0, "/s": 1.0, "req/s": 1.0, "chunks/s": 1.0}
_EXPR = re.compile(r"^\s*([a-z_][a-z0-9_.]*)\s*(<=|>=|<|>)\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(\S*)\s*$")
PROFILE_TOLERANCE = 1e-6
SEARCH_PURPOSES = ("staircase", "refine")


class ThresholdError(ValueError):
    """A threshold expression that cannot be parsed or does not apply to the command."""


@dataclass(frozen=True, slots=True)
class Threshold:
    expr: str  # as the user wrote it
    metric: str  # canonical name (see METRICS)
    op: str  # < <= > >=
    limit: float  # in the metric's unit: ms for latency, a fraction for error_rate, rps for rates

    @property
    def unit(self) -> str:
        if self.metric in TIME_METRICS:
            return "ms"
        if self.metric == "chunks_per_s":
            return "chunks/s"
        return "fraction" if self.metric == "error_rate" else "rps"


@dataclass(frozen=True, slots=True)
class ThresholdResult:
    expr: str
    metric: str
    op: str
    limit: float
    unit: str
    actual: float | None
    passed: bool
    stage: int | None = None  # 1-based index in summary["stages"] of the stage that decided it
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_threshold(text: str, kind: str = "run") -> Threshold:
    """Parse one ``METRIC OP VALUE[UNIT]``; ``kind`` is the command (``run`` or ``find``)."""
    m = _EXPR.match(text.strip().lower())
    if not m:
        raise ThresholdError(
            f"--threshold {text!r}: expected METRIC OP VALUE, e.g. 'p99<50ms', 'error_rate<1%', 'throughput_rps>400'"
        )
    name, op, num, unit = m.group(1), m.group(2), float(m.group(3)), m.group(4)
    name = _ALIASES.get(name, name)
    for prefix in ("service_", *STREAM_PREFIXES):
        if name.startswith(prefix):
            name = prefix + _ALIASES.get(name[len(prefix) :], name[len(prefix) :])
    if name not in METRICS:
        raise ThresholdError(f"--threshold {text!r}: unknown metric {name!r} (one of {', '.join(METRICS)})")
    if kind != "find" and name in FIND_ONLY:
        raise ThresholdError(f"--threshold {text!r}: {name} is measured by `satpoint find`, not by `{kind}`")
    if name in TIME_METRICS:
        if unit and unit not in _TIME_UNITS:
            raise ThresholdError(f"--threshold {text!r}: latency unit must be us, ms or s (default ms)")
        limit = num * _TIME_UNITS[unit or "ms"]
    elif name == "error_rate":
        if unit not in ("", "%"):
            raise ThresholdError(f"--threshold {text!r}: error_rate is a fraction (0.01) or a percentage (1%)")
        limit = num / 100.0 if unit == "%" else num
        if not 0 <= limit <= 1:
            raise ThresholdError(f"--threshold {text!r}: error_rate must lie within 0 and 1 (0 % to 100 %)")
    else:
        if unit not in _RATE_UNITS:
            raise ThresholdError(f"--threshold {text!r}: a rate is in rps (e.g. 'throughput_rps>400')")
        limit = num * _RATE_UNITS[unit]
    if not math.isfinite(limit):
        raise ThresholdError(f"--threshold {text!r}: the limit must be a finite number")
    return Threshold(expr=text.strip(), metric=name, op=op, limit=limit)


def parse_thresholds(texts: Sequence[str], kind: str = "run") -> list[Threshold]:
    return [parse_threshold(t, kind) for t in texts]


_SLO_PERCENTILES = ("p50", "p90", "p95", "p99", "p999")
#: what ``--slo`` may limit: latency percentiles, and with ``--stream`` time to first chunk and gap percentiles
SLO_METRICS = (*_SLO_PERCENTILES, *(f"{p}{k}" for p in STREAM_PREFIXES for k in _SLO_PERCENTILES))
_SLO_EQ = re.compile(r"^\s*([a-z0-9_.]+)\s*=\s*(.*)$")


def parse_slo(texts: Sequence[str]) -> dict[str, float]:
    """Latency objectives for ``find --slo`` in the threshold grammar: ``p99<50ms`` (``p99=50ms`` is the
    same objective, kept for older command lines); with ``--stream`` also ``ttfc_p99<300ms`` (time to first
    chunk) and ``gap_p99<50ms`` (gaps between chunks).  Returns ``{metric: limit_ms}``."""
    out: dict[str, float] = {}
    for text in texts:
        eq = _SLO_EQ.match(text.strip().lower())
        expr = f"{eq.group(1)}<={eq.group(2)}" if eq else text
        try:
            t = parse_threshold(expr, "find")
        except ThresholdError:
            raise ThresholdError(f"--slo {text!r}: expected a latency percentile limit, e.g. p99<50ms") from None
        if t.metric not in SLO_METRICS or t.op not in ("<", "<="):
            raise ThresholdError(
                f"--slo {text!r}: an objective is an upper limit on p50, p90, p95, p99 or p99.9, e.g. p99<50ms "
                "(streams: ttfc_p99<300ms, gap_p99<50ms)"
            )
        out[t.metric] = t.limit
    return out


# evaluation ---------------------------------------------------------------------------------------------
def _stage_value(stage: Mapping[str, Any], metric: str) -> float | None:
    if metric == "error_rate":
        v = stage.get("error_rate")
    elif metric == "throughput_rps":
        v = stage.get("throughput_rps")
    elif metric.startswith("service_"):
        v = (stage.get("service_ms") or {}).get(metric[len("service_") :])
    elif metric in STREAM_METRICS or metric == "chunks_per_s":
        v = stream_value(stage.get("stream"), metric)
    else:
        v = (stage.get("latency_ms") or {}).get(metric)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def stream_value(stream: Mapping[str, Any] | None, metric: str) -> float | None:
    """A stream metric (``ttfc_p99``, ``gap_p50``, ``chunks_per_s``) of a stage's ``stream`` figures (None:
    the stage did not stream, or has no such value)."""
    if not stream:
        return None
    if metric == "chunks_per_s":
        v = stream.get("chunks_per_s")
    else:
        prefix = next(p for p in STREAM_PREFIXES if metric.startswith(p))
        v = (stream.get(STREAM_PREFIXES[prefix]) or {}).get(metric[len(prefix) :])
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def judged_stages(summary: Mapping[str, Any], purposes: Mapping[int, str] | None = None) -> tuple[list[int], str]:
    """Indexes (into ``summary["stages"]``) of the stages per-stage thresholds are judged on, and why."""
    stages: list[dict[str, Any]] = list(summary.get("stages") or [])
    if summary.get("kind") != "find":
        return list(range(len(stages))), "worst steady-window stage"
    purposes = purposes or {}
    sat = summary.get("saturation_rps")
    rec = summary.get("recommendation") or {}
    target = rec.get("target_rps_per_replica")
    if target is None and sat is not None:
        target = float(sat) * (1 - float(rec.get("margin", 0.15)))

    def purpose(s: Mapping[str, Any]) -> str:
        return purposes.get(int(s.get("segment", -1)), "")

    def at_most_target(s: Mapping[str, Any]) -> bool:
        return target is not None and float(s["target_rps"]) <= float(target) * (1 + PROFILE_TOLERANCE)

    profile = [i for i, s in enumerate(stages) if purpose(s) == "profile" and at_most_target(s)]
    if profile:
        return profile, "worst profile stage at or below the per-replica target"
    stable = [i for i, s in enumerate(stages) if purpose(s) in SEARCH_PURPOSES and s.get("verdict") == "stable"]
    below = [i for i in stable if at_most_target(stages[i])]
    if below:
        return below, "worst stable search stage at or below the per-replica target (no profile stages)"
    return stable, "worst stable search stage (no profile stages at or below the per-replica target)"


def _fmt_value(metric: str, v: float) -> str:
    if metric == "error_rate":
        return f"{v * 100:.3g}%"
    if metric.endswith("_rps"):
        return f"{v:.1f} rps"
    if metric == "chunks_per_s":
        return f"{v:.1f} chunks/s"
    return f"{v:.3g} ms" if v < 100 else f"{v:.0f} ms"


def evaluate(
    thresholds: Sequence[Threshold], summary: Mapping[str, Any], purposes: Mapping[int, str] | None = None
) -> list[ThresholdResult]:
    """Judge every threshold against a summary (see the module docstring for which stages count)."""
    stages: list[dict[str, Any]] = list(summary.get("stages") or [])
    chosen, rule = judged_stages(summary, purposes)
    out: list[ThresholdResult] = []
    for t in thresholds:
        cmp = OPS[t.op]
        actual: float | None = None
        stage: int | None = None
        note: str | None = None
        if t.metric in FIND_ONLY:
            v = summary.get(t.metric)
            actual = None if v is None else float(v)
            if actual is None:
                note = f"{t.metric} was not measured" + (
                    "" if summary.get("kind") == "find" else f" (a {summary.get('kind')} does not measure it)"
                )
        elif t.metric in PEAK_METRICS:
            vals = [(v, i) for i, s in enumerate(stages) if (v := _stage_value(s, t.metric)) is not None]
            if vals:
                actual, i = max(vals)
                stage = i + 1
                note = "highest steady-window " + ("throughput" if t.metric == "throughput_rps" else "chunk rate")
            else:
                note = "no stage with a steady window"
        else:
            vals = [(v, i) for i in chosen if (v := _stage_value(stages[i], t.metric)) is not None]
            if vals:
                # the stage most likely to fail: highest value for an upper limit, lowest for a lower one
                actual, i = max(vals) if t.op in ("<", "<=") else min(vals)
                stage = i + 1
                note = rule
            else:
                note = "no stage to judge" if not chosen else f"{t.metric} has no value in the judged stages"
        passed = actual is not None and cmp(actual, t.limit)
        out.append(
            ThresholdResult(
                expr=t.expr,
                metric=t.metric,
                op=t.op,
                limit=round(t.limit, 6),
                unit=t.unit,
                actual=None if actual is None else round(actual, 6),
                passed=bool(passed),
                stage=stage,
                note=note,
            )
        )
    return out


def failed(results: Sequence[ThresholdResult] | Sequence[Mapping[str, Any]]) -> bool:
    """True if any threshold failed (accepts results or their summary.json dicts)."""
    return any(not (r.passed if isinstance(r, ThresholdResult) else bool(r.get("passed"))) for r in results)


def format_result(r: ThresholdResult | Mapping[str, Any]) -> str:
    """One line for the terminal, e.g. ``✓ p99<50ms  (actual 12.3 ms, stage 2)``."""
    d = r.to_dict() if isinstance(r, ThresholdResult) else dict(r)
    mark = "✓" if d.get("passed") else "✗"
    actual = d.get("actual")
    got = "no value" if actual is None else _fmt_value(str(d["metric"]), float(actual))
    where = f", stage {d['stage']}" if d.get("stage") else ""
    note = f" — {d['note']}" if d.get("note") and (actual is None or not d.get("passed")) else ""
    return f"{mark} {d['expr']}  (actual {got}{where}){note}"


def results_thresholds(
    header: Mapping[str, Any], summary: Mapping[str, Any], purposes: Mapping[int, str]
) -> list[dict[str, Any]]:
    """summary.json's ``thresholds`` list for the expressions recorded in ``header["config"]["thresholds"]``."""
    exprs = list((header.get("config") or {}).get("thresholds") or [])
    if not exprs:
        return []
    specs = parse_thresholds(exprs, "find" if summary.get("kind") == "find" else "run")
    return [r.to_dict() for r in evaluate(specs, summary, purposes)]
