"""summary.json: a pure function of a results folder.

Field names here are an interface users script against: add, never rename.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from satpoint.analysis.search.hosts import hosts_summary, judge_hosts
from satpoint.analysis.search.shards import shard_judge
from satpoint.analysis.search.target_lost import target_lost
from satpoint.analysis.search.verdicts import Verdict, apply, judge_fd_limit
from satpoint.analysis.server.diagnosis import diagnose
from satpoint.analysis.server.flamegraph import flamegraph_block
from satpoint.analysis.server.machine_busy import busy_warning, machine_busy_block
from satpoint.analysis.server.machine_speed import machine_speed_block
from satpoint.analysis.server.server_side import add_server_fields, observed_block
from satpoint.config import VerdictRules
from satpoint.endpoints.spec import INSECURE_WARNING
from satpoint.metrics.records import Records
from satpoint.metrics.results import RELOCATED_KEY, Results, Segment, relocation_warning
from satpoint.metrics.stats import StageMetrics, intervals, stage_metrics
from satpoint.payloads.mix import HEADER_KEY as MIX_KEY
from satpoint.plan import TRACE_ARRIVAL, Stage, StageSpan
from satpoint.redact import redact_url
from satpoint.traffic.fidelity import overall, stage_fidelity


def rules_from(results: Results) -> VerdictRules:
    return results.config.rules


def all_stage_metrics(results: Results, rules: VerdictRules | None = None) -> list[tuple[int, StageMetrics]]:
    """(segment index, judged metrics) for every stage of every segment, in run order."""
    rules = rules or rules_from(results)
    raw = [(seg, m) for seg in results.segments for m in raw_stage_metrics(seg)]
    rules = with_service_baseline(rules, [m for _, m in raw])
    shards = {seg.index: shard_judge(seg) for seg in results.segments}
    return [(seg.index, shards[seg.index](judge_hosts(_judged(m, seg, rules), _hosts(seg), rules))) for seg, m in raw]


def _judged(m: StageMetrics, seg: Segment, rules: VerdictRules) -> StageMetrics:
    """The stage judged on its own figures, then on its generator processes' open-files limit."""
    return judge_fd_limit(apply(m, rules), seg.generator, rules)


def _hosts(seg: Segment) -> dict[str, Any] | None:
    """The segment's generator hosts (``--ray``): a lost or lagging host is judged too."""
    ray = seg.generator.get("ray")
    return ray if isinstance(ray, dict) else None


def with_service_baseline(rules: VerdictRules, stages: list[StageMetrics]) -> VerdictRules:
    """The rules with a low-load service time: the one recorded (``find``), else the service p50 of the
    lowest-rate stage whose requests did not wait for a connection (None if there is none)."""
    if rules.baseline_service_ms is not None:
        return rules
    free = [m for m in stages if m.waited_fraction <= rules.waited_frac and m.service_ms.get("p50") is not None]
    if not free:
        return rules
    low = min(free, key=lambda m: m.target_rps)
    return replace(rules, baseline_service_ms=low.service_ms["p50"])


def raw_stage_metrics(seg: Segment) -> list[StageMetrics]:
    """Metrics (not yet judged) of each stage of a segment that has begun: a stage an interruption cut
    short is summarised on what it measured (``cut_stage_metrics``); stages it never reached are left out."""
    last = _last_due(seg)
    # a replayed trace is judged on every second of it: no settle window (a burst at a stage's start, and
    # the backlog a previous stage left, are that stage's to answer for), so the windows tile the trace
    settle = 0.0 if seg.arrival == TRACE_ARRIVAL else None
    out = []
    for sp in seg.spans:
        if seg.stopped and sp.end_s > last:
            if seg.stopped == "overload" and sp.start_s < last:
                # stopped early as clearly overloaded: judge what was measured before the stop
                out.append(stage_metrics(seg.records, sp, settle, until_s=last))
            elif seg.interrupted and sp.start_s < last:
                out.append(cut_stage_metrics(seg.records, sp, last, settle))
            continue
        out.append(stage_metrics(seg.records, sp, settle))
    return out


#: an interrupted stage gets a verdict when the steady window it measured lasts at least this long ...
CUT_MIN_WINDOW_S = 2.0
#: ... and holds at least this many requests; else its verdict is ``incomplete``
CUT_MIN_REQUESTS = 50


def cut_stage_metrics(rec: Records, sp: StageSpan, until_s: float, settle: float | None = None) -> StageMetrics:
    """A stage an interruption cut short at ``until_s`` (run clock), marked ``interrupted``.

    Cut during its hold, it is measured as if its hold had been planned to end there (the steady window
    starts after the same settle a hold of that length would have); it is judged when that window lasts
    ``CUT_MIN_WINDOW_S`` and holds ``CUT_MIN_REQUESTS``, else it is ``incomplete``.  Cut during its ramp,
    its figures are those of its last seconds and it is ``incomplete``."""
    st = sp.stage
    held = until_s - sp.hold_start_s
    if held > 0:
        short = StageSpan(sp.index, Stage(st.target_rps, st.ramp_s, held), sp.start_s, sp.hold_start_s, until_s)
        m = stage_metrics(rec, short, settle)
        m.hold_s = st.hold_s
    else:
        m = stage_metrics(rec, sp, settle, until_s=until_s)
    m.interrupted = True
    window = m.window_end_s - m.window_start_s
    if held <= 0:
        m.verdict, m.reasons = Verdict.INCOMPLETE, [f"interrupted during its ramp, {until_s - sp.start_s:.1f} s in"]
    elif window < CUT_MIN_WINDOW_S or m.requests < CUT_MIN_REQUESTS:
        m.verdict = Verdict.INCOMPLETE
        m.reasons = [
            f"interrupted {held:.1f} s into its hold: its steady window held {m.requests} requests over "
            f"{window:.1f} s (a verdict needs {CUT_MIN_REQUESTS} over {CUT_MIN_WINDOW_S:g} s)"
        ]
    return m


def segment_stage_metrics(seg: Segment, rules: VerdictRules) -> list[StageMetrics]:
    """Judged metrics of each stage of a segment that has a steady window to judge."""
    raw = raw_stage_metrics(seg)
    rules = with_service_baseline(rules, raw)
    shards = shard_judge(seg)
    return [shards(judge_hosts(_judged(m, seg, rules), _hosts(seg), rules)) for m in raw]


def _last_due(seg: Segment) -> float:
    """Where the segment's rows end; for an interrupted one, where its first generator process to stop
    stopped (processes stop a few milliseconds apart: every process has its rows up to there)."""
    rec = seg.records
    last = float(rec.intended[-1]) if len(rec) else 0.0
    shards = seg.generator.get("shards")
    if seg.interrupted and isinstance(shards, list):
        ends = [s["last_due_s"] for s in shards if not s.get("lost") and isinstance(s.get("last_due_s"), (int, float))]
        last = min([last, *ends])
    return last


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x


def stage_dict(seg_index: int, m: StageMetrics) -> dict[str, Any]:
    d = m.to_dict()
    d["segment"] = seg_index
    return _round(d)  # type: ignore[no-any-return]


def build_summary(results: Results) -> dict[str, Any]:
    rules = rules_from(results)
    stages = all_stage_metrics(results, rules)
    h = results.header
    target = h.get("target", {})
    warnings: list[str] = []
    if any(m.verdict == Verdict.GENERATOR_LIMITED for _, m in stages):
        warnings.append(
            "GENERATOR LIMITED: in some stages the load generator fell behind its own schedule; "
            "those numbers describe the generator, not the server (give it more CPU: --procs, "
            "--generator-cpus, or a separate machine; fewer wake-ups: --wake-window-ms; priority on a "
            "shared core: --realtime)"
        )
    if any(m.verdict == Verdict.CLIENT_LIMITED for _, m in stages):
        warnings.append(
            "CLIENT LIMITED: in some stages requests waited for one of the generator's connections while the "
            "server answered as fast as at low load; the generator's in-flight cap, not the server, set the "
            "pace (raise --max-inflight; each stage's reasons say how many requests it needed in flight)"
        )
    if any(s.interrupted for s in results.segments):
        warnings.append("the run was interrupted: the results hold what was measured until then")
    moved = h.get(RELOCATED_KEY)
    if isinstance(moved, dict):
        warnings.insert(0, relocation_warning(moved))
    for seg in results.segments:
        warnings.extend(seg.notes)
    lost = target_lost(results, [i for i, _ in stages])
    if lost is not None:
        warnings.insert(0, lost["message"])
    tls = target.get("tls")
    if isinstance(tls, dict) and tls.get("verify") is False:
        warnings.append(INSECURE_WARNING)
    url = target.get("url")
    total = sum(len(s.records) for s in results.segments)
    cpu = sum(float(s.generator.get("cpu_s", 0.0)) for s in results.segments)
    # segments rebuilt from checkpoints (a run cut off) have no CPU figure: leave their rows out of it
    timed = sum(len(s.records) for s in results.segments if "cpu_s" in s.generator)
    stage_docs = [stage_dict(i, m) for i, m in stages]
    add_server_fields(results, stage_docs, stages)  # what the server did in each stage, if it was watched
    busy = machine_busy_block(stage_docs)  # other work on the machine while it measured
    if (said := busy_warning(busy)) is not None:
        warnings.insert(0, said)
    summary: dict[str, Any] = {
        "schema_version": h.get("schema_version"),
        "tool_version": h.get("tool_version"),
        "kind": results.kind,
        "mode": h.get("config", {}).get("mode", "open_loop"),
        "created_unix": h.get("created_unix"),
        "target": {
            "url": redact_url(url) if isinstance(url, str) else url,  # folders written before redaction
            "model": target.get("model"),
            "protocol": target.get("protocol"),
            "stream": bool(target.get("stream", False)),  # every answer streamed (``--stream``)
        },
        "server": h.get("server"),
        "triton": target.get("triton"),
        "generator": {
            # generator processes (with --ray: on all hosts, as the segments recorded them)
            "procs": max(
                (p for s in results.segments if isinstance(p := s.generator.get("procs"), int)),
                default=h.get("config", {}).get("load", {}).get("procs"),
            ),
            "requests": total,
            "cpu_s": round(cpu, 3),
            "cpu_us_per_request": round(cpu / timed * 1e6, 2) if timed else None,
            "ray": hosts_summary(results),
        },
        "rules": {
            "max_error_rate": rules.max_error_rate,
            "generator_lag_p99_ms": rules.generator_lag_p99_ms,
            "slo_ms": rules.slo_ms,
        },
        "stages": stage_docs,
        "interrupted": any(s.interrupted for s in results.segments),
        "relocated": moved if isinstance(moved, dict) else None,
        "target_lost": lost,
        "warnings": warnings,
        "observed": observed_block(results),
        "machine_busy": busy,
        # the machine's speed before each segment (``engine.machine_speed``): diff compares the two sides'
        "machine_speed": machine_speed_block([(s.index, s.generator) for s in results.segments]),
        "flamegraph": flamegraph_block(h, stage_docs),
        "trace": trace_block(results, stage_docs),
    }
    if results.header.get(MIX_KEY) is not None:  # a model mix: per stage and model (analysis.models.per_model)
        from satpoint.analysis.models.per_model import models_block

        summary["models"] = models_block(results, stages)
    from satpoint.analysis.models.overcommit import overcommit_block  # --resident K: the emulated loads

    if (oc := overcommit_block(results)) is not None:
        summary["overcommit"] = oc
        warnings.insert(0, oc["warning"])
    if results.kind == "find":
        from satpoint.analysis.search.summary import find_fields  # the search's own summary fields

        summary.update(find_fields(results, stages, lost))
        from satpoint.analysis.search.hysteresis import hysteresis_fields  # find --hysteresis (and the lowered target)

        summary.update(hysteresis_fields(results, summary))
    if summary["mode"] == "closed_loop":  # label it: its latencies under-report, its verdicts miss queueing
        summary["closed_loop"], label = closed_loop_fields(h.get("config", {}))
        summary["warnings"].insert(0, label)
    from satpoint.analysis.search.thresholds import results_thresholds  # SLO gates recorded in the config

    summary["thresholds"] = results_thresholds(h, summary, {s.index: s.purpose for s in results.segments})
    summary["diagnosis"] = diagnose(summary, stage_seconds(results, stages))
    return summary


def trace_block(results: Results, stage_docs: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """A replayed trace (``run --trace``): what was replayed (the header's ``trace``), per stage how
    faithfully (``traffic.fidelity``: send lag against the trace's own times, share sent > 1 ms late) and,
    given the stages, a simple queue's prediction beside the measurement (``analysis.traffic.prediction``)."""
    info = results.header.get("trace")
    seg = next((s for s in results.segments if s.arrival == TRACE_ARRIVAL), None)
    if not isinstance(info, dict) or seg is None:
        return None
    rows = stage_fidelity(seg.records, seg.spans)
    block = {**info, "fidelity": rows, "fidelity_overall": overall(rows)}
    if stage_docs is not None:
        from satpoint.analysis.traffic.prediction import prediction_block

        mine = [d for d in stage_docs if d.get("segment") == seg.index]
        block["prediction"] = prediction_block(seg.records, mine, info.get("server_slots"))
    return block


def stage_seconds(
    results: Results, stages: list[tuple[int, StageMetrics]]
) -> dict[tuple[int, int], list[tuple[int, float | None, float | None]]]:
    """(segment, stage index) -> the (second, p50 ms, p99 ms) rows of the seconds inside its steady window."""
    out: dict[tuple[int, int], list[tuple[int, float | None, float | None]]] = {}
    segs = {s.index: s for s in results.segments}
    per_seg = {i: intervals(segs[i].records, segs[i].spans) for i in {i for i, _ in stages}}
    for i, m in stages:
        out[(i, m.index)] = [
            (iv.second, iv.latency_ms["p50"], iv.latency_ms["p99"])
            for iv in per_seg[i]
            if iv.second >= m.window_start_s and iv.second + 1 <= m.window_end_s
        ]
    return out


def closed_loop_fields(config: dict[str, object]) -> tuple[dict[str, object], str]:
    """summary.json's ``closed_loop`` block and the warning that labels a closed-loop run."""
    cl = config.get("closed_loop")
    block: dict[str, object] = dict(cl) if isinstance(cl, dict) else {}
    users = block.get("users", "?")
    warning = (
        f"CLOSED LOOP ({users} users): each user waits for its answer before sending again, so latency is "
        "measured from the actual send (intended == sent). When the server stalls the users stop sending, "
        "so the stall only delays the requests in flight: these latencies UNDER-REPORT what an open system's "
        "users see, and verdicts cannot see queueing (the load drops as the server slows). Use --stage "
        "(open loop) for numbers you can trust; `satpoint demo co` shows the difference."
    )
    return block, warning
