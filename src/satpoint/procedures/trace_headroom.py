"""``find --trace``: the highest speed X at which one replica sustains a recorded trace (its headroom).

The search over X is ``analysis.traffic.headroom`` (the rate search reused over speeds); each of its steps
is a whole ``run --trace`` replay (``trace_replay.run_trace``) at speed X, from idle, in a folder of its
own under ``OUT/replays/``.  After the answer is confirmed (replayed once more at X), the trace is
replayed at 50 % and 80 % of X when the budget holds them (the latency profile; 100 % is the
confirmation).  ``OUT/summary.json`` is the answer's replay summary (its stages, fidelity, rows in its
folder) with the additive ``trace_headroom`` block; ``OUT/headroom.json`` holds the same block alone.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from satpoint.analysis.search.capacity import recommend
from satpoint.analysis.search.holds import RECOVERY_S, cooldown_max_s
from satpoint.analysis.search.steps import Measured, SearchParams, Step
from satpoint.analysis.search.thresholds import STREAM_METRICS, parse_slo, parse_thresholds
from satpoint.analysis.search.verdicts import Verdict
from satpoint.analysis.traffic.headroom import (
    PROFILE_FRACTIONS,
    headroom_block,
    latency_at,
    replay_verdict,
    search_speed,
    trace_peaks,
)
from satpoint.analysis.traffic.headroom import TargetLost as LostUnderReplay
from satpoint.config import LoadOptions
from satpoint.endpoints.prepare import prepare, probe_service_s, wait_until_idle
from satpoint.endpoints.spec import Target
from satpoint.errors import ConfigError
from satpoint.metrics.documents import HeadroomDoc, HeadroomSummaryDoc, write_document
from satpoint.metrics.results import default_out
from satpoint.procedures.progress import OnEvent, say
from satpoint.procedures.session import announce_target, check_rows_fit, require_generator
from satpoint.procedures.trace_replay import run_trace, source_warnings
from satpoint.reports.files.k8s import max_replicas_choice, write_k8s
from satpoint.traffic.trace_plan import TraceOptions, build

#: seconds a replay costs beyond its run time (connections, the session's files), for the budget
OVERHEAD_S = 3.0
#: said of a headroom searched on a Prometheus rate series
PROM_NOTE = (
    "the trace is a Prometheus rate series: its arrivals are drawn as a Poisson process within each step (the "
    "bursts inside a step are smoothed away) and a missing step replays as silence, so this headroom is "
    "optimistic; replay an access log (--trace-format envoy) for one that sees the bursts"
)


@dataclass(frozen=True)
class HeadroomResult:
    block: dict[str, Any]  # summary.json's trace_headroom
    out_dir: Path
    k8s_files: tuple[Path, ...] = ()
    #: ``thresholds`` judged on the answer's replay (summary.json's ``thresholds``); empty without an answer
    thresholds: tuple[dict[str, Any], ...] = ()

    @property
    def document(self) -> HeadroomDoc:
        """``block`` typed (``headroom.json``'s model)."""
        return HeadroomDoc.model_validate({**HeadroomDoc.envelope(), **self.block})


def find_headroom(
    target: Target,
    trace: TraceOptions,
    params: SearchParams,
    *,
    load: LoadOptions | None = None,
    budget_s: float = 600.0,
    cooldown_s: float = 2.0,
    margin: float = 0.15,
    profile: bool = True,
    max_error_rate: float = 0.01,
    thresholds: Sequence[str] = (),
    slo: Sequence[str] = (),
    out: Path | str | None = None,
    emit_k8s: Path | str | None = None,
    on_event: OnEvent | None = None,
    stop: threading.Event | None = None,
    html: bool = False,
) -> HeadroomResult:
    """Search the speed factor at which ``trace`` is sustained by ``target`` (see the module's doc).
    ``slo`` (``p99<50ms``) judges every replay's stages as ``find --slo`` judges a search's: X is then the
    speed that keeps them; ``thresholds`` are gates judged on the answer's replay (``HeadroomResult.thresholds``)."""
    started = time.monotonic()  # reading the trace counts against the budget
    parse_thresholds(thresholds, "find --trace")  # refused here, before any load
    slo_ms = parse_slo(list(slo))
    if not target.stream and any(k in STREAM_METRICS for k in slo_ms):
        raise ConfigError("--slo on ttfc_*/gap_* (time to first chunk, gaps between chunks) needs --stream")
    trace = trace.validate()
    load = (load or LoadOptions()).validate()
    require_generator(load)  # --realtime refused here, before the first folder is made
    stop = stop or threading.Event()
    out_dir = Path(out) if out is not None else default_out("find-trace")
    out_dir.mkdir(parents=True, exist_ok=True)
    # the slice as recorded, read once: its peaks and span, and every replay's due times (scaled per speed)
    recorded = build(replace(trace, speed=1.0), fits=check_rows_fit)
    for line in source_warnings(trace, recorded.info):
        say(on_event, line, "warning")
    peak_min, peak_s = trace_peaks(recorded.due_s)
    span_s = recorded.window_s
    announce_target(target, on_event)
    prepared = prepare(target, load.max_inflight, seed=load.seed, grpc_connections=load.grpc_connections)
    svc = probe_service_s(prepared)  # the low-load answer time: each replay starts once the server is back at it
    if svc:
        prepared.latency_hint_s = svc
    say(
        on_event,
        f"find --trace: the slice spans {span_s:.0f} s, its busiest minute {peak_min:.1f} rps, its busiest second "
        f"{peak_s:.0f} requests; searching the speed factor X from {params.start_rps:g} "
        f"(precision {params.precision:g})",
    )
    started = time.monotonic()
    replays: list[dict[str, Any]] = []
    folders: dict[int, Path] = {}

    def idle(phase: str) -> bool:
        """From idle: wait for the server to answer at its low-load speed again (at least ``cooldown_s``,
        ``RECOVERY_S`` before a retest or after a replay that was not stable); False when stopped."""
        if not replays:
            return not stop.is_set()
        last = replays[-1]["verdict"]
        min_s = cooldown_s
        if cooldown_s > 0 and (phase == "retest" or last != Verdict.STABLE):
            min_s = max(cooldown_s, RECOVERY_S)
        left = budget_s - (time.monotonic() - started)
        waited = wait_until_idle(
            prepared, min_s, svc, max_wait_s=cooldown_max_s(min_s, max(left, min_s), svc), stop=stop
        )
        if waited > min_s + 0.5:
            say(on_event, f"cool-down: {waited:.1f} s until the server answered at low-load speed again")
        return not stop.is_set()

    def replay(speed: float, name: str) -> dict[str, Any] | None:
        if not idle(name):
            return None
        folder = out_dir / "replays" / f"{len(replays) + 1:02d}-{name}-x{speed:.4g}"
        t0 = time.monotonic()
        res = run_trace(
            target, replace(trace, speed=speed), load=load, max_error_rate=max_error_rate, out=folder, html=html,
            on_event=on_event, stop=stop, recorded=recorded, prepared=prepared, thresholds=thresholds, slo_ms=slo_ms,
        )  # fmt: skip
        stages = [s.model_dump() for s in res.summary.stages]
        verdict = replay_verdict([s["verdict"] for s in stages])
        if res.summary.interrupted or res.summary.target_lost is not None:
            verdict = Verdict.INCOMPLETE.value
        rec = {
            "speed": round(speed, 4),
            "phase": name,
            "verdict": verdict,
            "stages": len(stages),
            "unstable_stages": sum(1 for s in stages if s["verdict"] != Verdict.STABLE),
            "p99_ms_worst_stage": max((s["latency_ms"].get("p99") or 0.0 for s in stages), default=None),
            "seconds": round(time.monotonic() - t0, 1),
            "folder": str(res.out_dir.relative_to(out_dir))
            if res.out_dir.is_relative_to(out_dir)
            else str(res.out_dir),
            "_stages": stages,
        }
        folders[len(replays)] = res.out_dir
        if res.summary.target_lost is not None:  # the server stopped answering under this replay
            rec["target_lost"] = res.summary.target_lost.message
        replays.append(rec)
        say(
            on_event,
            f"replay at speed {speed:.4g} ({name}): {verdict}, "
            f"{rec['unstable_stages']}/{len(stages)} stages not stable",
        )
        return None if stop.is_set() else rec

    def measure(step: Step) -> Measured | None:
        rec = replay(step.rate_rps, step.phase)
        measured = None if rec is None else Measured(step.rate_rps, rec["verdict"], step.phase)
        if rec is not None and measured is not None and rec.get("target_lost"):
            raise LostUnderReplay(measured, rec["target_lost"])
        return measured

    def fits(speed: float) -> bool:
        return time.monotonic() - started + span_s / speed + OVERHEAD_S + cooldown_s <= budget_s

    outcome = search_speed(measure, params, lambda s: fits(s.rate_rps))
    if outcome.ended == "budget":
        say(on_event, f"budget of {budget_s:g} s reached: the headroom is known to the bracket only", "warning")
    if outcome.lower_bound:
        say(
            on_event,
            f"the headroom is a lower bound only ({outcome.ended}): no profile, replica count or manifests from it",
            "warning",
        )
    x = outcome.speed
    latency: list[dict[str, Any]] = []
    answer_i = None
    if x is not None:
        answer_i = max(
            (
                i
                for i, r in enumerate(replays)
                if abs(r["speed"] - round(x, 4)) < 1e-9 and r["verdict"] == Verdict.STABLE
            ),
            default=None,
        )
        if profile and not stop.is_set() and not outcome.lower_bound:
            for f in PROFILE_FRACTIONS:
                if not fits(x * f):
                    say(on_event, f"budget: no replay at {f:.0%} of X", "warning")
                    continue
                rec = replay(x * f, f"profile{int(f * 100)}")
                if rec is None:
                    break
                if rec.get("target_lost"):  # a crash below X: X is not sustained, nothing is sized from it
                    outcome = replace(outcome, ended="target_lost", lower_bound=True)
                    break
                latency.append(latency_at(f, x * f, rec["_stages"]))
        if answer_i is not None:
            latency.append(latency_at(1.0, x, replays[answer_i]["_stages"]))
    if outcome.ended == "target_lost":
        say(
            on_event,
            f"the target stopped answering during the replay at speed {replays[-1]['speed']:g} "
            f"({replays[-1].get('target_lost')}): the search ends there; no replica count, per-replica target or "
            "manifests are drawn from the speeds it held before",
            "warning",
        )
    public = [{k: v for k, v in r.items() if k != "_stages"} for r in replays]
    block = headroom_block(outcome, params, peak_min, peak_s, margin, public, latency)
    block["slice_span_s"] = round(span_s, 3)
    block["slice_requests"] = len(recorded.due_s)
    block["dropped"] = recorded.info.get("dropped")
    if trace.format == "prom":
        block["source_note"] = PROM_NOTE
    block["answer_folder"] = public[answer_i]["folder"] if answer_i is not None else None
    if slo_ms:
        block["slo_ms"] = slo_ms
    summary = write_headroom(out_dir, block, folders[answer_i] if answer_i is not None else None)
    files: tuple[Path, ...] = ()
    if block["sizing_withheld"]:
        say(on_event, f"no replica count, per-replica target or manifests: {block['sizing_withheld']}", "warning")
    if emit_k8s is not None and x is not None and block["replicas_for_peak"] is not None:
        rec_k8s = recommend(x * peak_min, margin, peak_rps=peak_min)
        files = tuple(write_k8s(Path(emit_k8s), target.model, rec_k8s))
        say(on_event, max_replicas_choice(rec_k8s)[1] + " (the trace's busiest minute)")
    return HeadroomResult(block, out_dir, files, tuple(summary.get("thresholds") or ()))


def write_headroom(out_dir: Path, block: dict[str, Any], answer: Path | None) -> dict[str, Any]:
    """``headroom.json`` and ``summary.json``: the summary of the answer's replay (``answer``) with the block
    beside it as ``trace_headroom``, or without an answer the envelope and the block alone (``kind`` headroom).
    Both through their models; returns the summary."""
    write_document(out_dir / HeadroomDoc.FILE, HeadroomDoc.model_validate({**HeadroomDoc.envelope(), **block}))
    if answer is not None:
        summary: dict[str, Any] = json.loads((answer / "summary.json").read_text())
        summary["trace_headroom"] = block  # the replay's summary, written through its model when it was measured
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    else:
        summary = {**HeadroomSummaryDoc.envelope(), "trace_headroom": block}
        write_document(out_dir / "summary.json", HeadroomSummaryDoc.model_validate(summary))
    return summary
