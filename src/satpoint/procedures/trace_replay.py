"""``run --trace``: replay a recorded trace's arrival times on the open-loop engine, judged per stage.

The trace is scanned and sliced by ``satpoint.traffic`` (streamed, never held whole), its slice becomes
the run's due times (``(t - slice start) / speed``) and stages (``stage_s`` seconds of trace each, see
``traffic.trace_plan``), and the segment runs like any other: latency from the intended (trace) time,
verdicts per stage, every row kept.  The header's ``trace`` block says what was replayed (file, slice,
the busiest window when ``--trace-peak`` chose it, speed, counts); ``summary.json``'s ``trace`` block adds
the replay's fidelity per stage (send lag against the trace's own times, share sent > 1 ms late).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from satpoint.analysis.search.target_lost import HEADER_KEY as TARGET_LOST_KEY
from satpoint.analysis.search.thresholds import parse_thresholds
from satpoint.analysis.summary.model import RunSummary, parse_summary
from satpoint.config import LoadOptions, ObserveOptions, RunConfig, VerdictRules
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.errors import ConfigError
from satpoint.metrics.results import default_out, write_header
from satpoint.observe.observer import Observer
from satpoint.plan import TRACE_ARRIVAL
from satpoint.procedures.progress import OnEvent, say
from satpoint.procedures.session import LOST_ERRORS, Session, announce_target, check_rows_fit, require_generator
from satpoint.reports.files.results import write_all
from satpoint.traffic.trace_plan import TraceOptions, TraceSchedule, at_speed, build
from satpoint.traffic.trace_read import TraceError

#: the header's key for what was replayed
HEADER_KEY = "trace"


@dataclass(frozen=True)
class TraceRunResult:
    """A finished (or interrupted) replay: its ``summary.json`` as a typed object, and its folder."""

    summary: RunSummary
    out_dir: Path


def plan_trace(
    trace: TraceOptions, on_event: OnEvent | None = None, recorded: TraceSchedule | None = None
) -> TraceSchedule:
    """The slice to replay, its due times and stages (refused with the memory estimate if too large);
    says what it found (the busiest window, when asked) through ``on_event``.  ``recorded``: the slice
    already built (``find --trace`` reads the trace once), replayed at ``trace.speed``."""
    if recorded is not None:
        sched = at_speed(recorded, trace.speed, trace.stage_s)
        _busiest(sched)
        say(
            on_event,
            f"replaying at speed {trace.speed:g}: {sched.info['replayed']:,} requests over "
            f"{sched.info['run_s']:.1f} s in {len(sched.stages)} stages of {sched.info['stage_run_s']:g} s",
        )
        return sched
    sched = build(trace, fits=check_rows_fit)
    info = sched.info
    say(
        on_event,
        f"trace {trace.path}: {info['rows']:,} requests from {info['first']} to {info['last']} "
        f"({info['span_s']:.0f} s); busiest second {info['peak_rps_1s']:.0f} rps, busiest minute "
        f"{info['peak_rps_60s']:.1f} rps" + ("" if info["in_order"] else "; out of order in the file (sorted)"),
    )
    peak = info.get("peak_window")
    if peak is not None:
        say(
            on_event,
            f"busiest {trace.peak}: {peak['start']} to {peak['end']} (+{peak['start_offset_s']:.0f} s to "
            f"+{peak['end_offset_s']:.0f} s), {peak['arrivals']:,} requests, {peak['mean_rps']} rps on average",
        )
    burst = _busiest(sched)
    say(
        on_event,
        f"replaying {info['window_start']} .. {info['window_end']} at speed {trace.speed:g}: "
        f"{info['replayed']:,} requests over {info['run_s']:.1f} s ({info['mean_rps']} rps on average, "
        f"{burst} in the busiest second) in {len(sched.stages)} stages of {info['stage_run_s']:g} s",
    )
    if sched.payload_index is not None:
        say(on_event, "the trace's payload column picks each request's --payload request (0-based)")
    for line in source_warnings(trace, info):
        say(on_event, line, "warning")
    return sched


def _busiest(sched: TraceSchedule) -> int:
    """The replay's busiest second (requests), recorded in its info."""
    due = sched.due_s
    burst = int(np.bincount(np.floor(due).astype(np.int64)).max()) if len(due) else 0
    sched.info["replay_peak_rps_1s"] = burst
    return burst


def source_warnings(trace: TraceOptions, info: dict[str, Any]) -> list[str]:
    """What the replay leaves out or adds up, said once: other models' requests and non-inference calls
    dropped, several Prometheus series summed, columns read but not applied."""
    out = []
    dropped = info.get("dropped") or {}
    if dropped.get("other_models"):
        by = ", ".join(f"{m} ({n:,})" for m, n in list((dropped.get("by_model") or {}).items())[:5])
        out.append(
            f"{dropped['other_models']:,} requests of other models than {trace.model!r} are not replayed ({by}); "
            "--trace-model names the trace's model"
        )
    if dropped.get("non_inference"):
        out.append(
            f"{dropped['non_inference']:,} access-log lines are no inference request (probes, metadata...): "
            "not replayed"
        )
    if (info.get("series") or 0) > 1:
        out.append(
            f"the rate file holds {info['series']} series, summed into one replay onto --model: "
            "--trace-select label=value keeps one"
        )
    unused = [c for c in info.get("columns") or {} if c not in ("payload", "model")]
    if trace.model is None and "model" in (info.get("columns") or {}):
        unused.insert(0, "model")
    if unused:
        out.append(
            "the trace's " + ", ".join(unused) + " column(s) are read and counted (summary.json's trace block), "
            "not applied: every request goes to --model with --batch-size"
        )
    return out


def run_trace(
    target: Target,
    trace: TraceOptions,
    *,
    load: LoadOptions | None = None,
    max_error_rate: float = 0.01,
    thresholds: Sequence[str] = (),
    slo_ms: Mapping[str, float] | None = None,
    out: Path | str | None = None,
    html: bool = True,
    on_event: OnEvent | None = None,
    stop: threading.Event | None = None,
    observe: ObserveOptions | None = None,
    recorded: TraceSchedule | None = None,
    prepared: PreparedTarget | None = None,
) -> TraceRunResult:
    """Replay ``trace`` against ``target``: one open-loop segment whose due times are the trace's.

    Raises ``satpoint.errors.SatpointError`` or ``ValueError`` (a ``TraceError`` for the trace) before
    any load is sent.  ``load.arrival`` is not used (the trace is the arrival process); ``load.procs``
    shards the replay over generator processes as any schedule; ``--ray`` is refused.  ``recorded`` (the
    slice as ``build`` made it) and ``prepared`` (the target, checked) spare a search's replays reading the
    trace and preparing the target again.  ``slo_ms`` (``{"p99": 50.0}``) judges every stage against these
    latency objectives too, as ``find --slo`` does."""
    trace = trace.validate()
    load = (load or LoadOptions()).validate()
    if load.ray is not None:
        raise ConfigError("--trace replays on this machine's generator processes (--procs), not on --ray hosts")
    require_generator(load)  # --realtime refused here, before anything is sent
    observe = (observe or ObserveOptions()).validate()
    if observe.flamegraph is not None:
        raise ConfigError("--flamegraph records a stage of a --stage plan, not of a replayed trace")
    checks = tuple(t.expr for t in parse_thresholds(thresholds, "run"))
    sched = plan_trace(trace, on_event, recorded)
    if prepared is None:
        announce_target(target, on_event)
        prepared = prepare(target, load.max_inflight, seed=load.seed, grpc_connections=load.grpc_connections)
    pay = sched.payload_index
    if pay is not None and len(pay) and (int(pay.min()) < 0 or int(pay.max()) >= len(prepared.payload_docs)):
        raise TraceError(
            f"the trace's payload column holds {int(pay.min())}..{int(pay.max())}; the requests given "
            f"(--payload) are numbered 0..{len(prepared.payload_docs) - 1}"
        )
    rules = VerdictRules(max_error_rate=max_error_rate, slo_ms=dict(slo_ms or {}))
    config = RunConfig(load=load, rules=rules, thresholds=checks)
    out_dir = Path(out) if out is not None else default_out("trace")
    with Observer(observe, out_dir) as observer:
        session = Session(prepared, config, out_dir, on_event=on_event, stop=stop, observer=observer)
        session.results.header[HEADER_KEY] = sched.info
        write_header(session.out_dir, session.results)
        try:
            session.measure(
                sched.stages,
                title="trace",
                descending=True,
                due_s=sched.due_s,
                arrival=TRACE_ARRIVAL,
                payload_index=pay,
            )
        except LOST_ERRORS as e:
            session.results.header[TARGET_LOST_KEY] = {"when": "as the run started", "error": str(e)}
            write_header(session.out_dir, session.results)
        except BaseException:
            with contextlib.suppress(Exception):
                write_all(session.out_dir, session.results, html=False)
            raise
    summary = write_all(session.out_dir, session.results, html=html)
    return TraceRunResult(parse_summary(summary), session.folder)
