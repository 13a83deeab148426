"""``satpoint sweep``: the saturation search for every point of a grid of server configurations.

Each measurement is a ``find`` on a freshly started (or freshly reconfigured) server, written to its own
folder under ``out_dir/points/``.  ``sweep.json`` is rewritten after every measurement (and marks the
one running), so a sweep cut off by Ctrl-C or a crash keeps everything measured and continues with
``resume``.  After the first pass the leaders (by the chosen objective) are measured again until each
has at least two measurements; every figure is then a median with its range, and two points whose
ranges overlap are reported as tied (``analysis.sweep.conclusions``).
"""

from __future__ import annotations

import json
import shutil
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from satpoint.analysis.models.memory import models_analysis, models_lines
from satpoint.analysis.search.thresholds import parse_slo
from satpoint.analysis.sweep.artefact_choice import attach_quality
from satpoint.analysis.sweep.conclusions import (
    Objective,
    PointInput,
    add_scaling,
    aggregate,
    best,
    measurement_figures,
    pareto_front,
    rank,
    recommendation_lines,
    remeasure_plan,
)
from satpoint.analysis.sweep.space import Point
from satpoint.config import ObserveOptions, VerdictRules
from satpoint.errors import SatpointError
from satpoint.experiments.sweep_config import SweepConfig as SweepConfig  # re-exported: the public name
from satpoint.experiments.sweep_servers import PointServer, point_server
from satpoint.metrics.documents import SweepDoc, VersionError, check_version, write_document
from satpoint.observe.observer import Observer
from satpoint.procedures.progress import OnEvent, say
from satpoint.procedures.saturation import search_target
from satpoint.procedures.session import Fleet, open_fleet, require_generator
from satpoint.reports.files.results import write_all
from satpoint.servers.embedded import SERVERS, check_extra

SWEEP_FILE = SweepDoc.FILE
SWEEP_CSV = "sweep.csv"
SWEEP_VERSION = 1
#: below this many seconds of budget left, no new measurement starts
MIN_MEASUREMENT_S = 45.0
_START_S = {"mlserver": 12.0, "triton": 15.0, "sim": 2.0, "remote": 5.0}


@dataclass
class SweepOutcome:
    doc: dict[str, Any]
    out_dir: Path
    interrupted: bool

    @property
    def document(self) -> SweepDoc:
        """``doc`` typed (``sweep.json``'s model)."""
        return SweepDoc.model_validate(self.doc)


def expected_measurement_s(cfg: SweepConfig) -> float:
    """A rough duration of one measurement before any was made: server start plus about eight stages
    (holds are mostly the shortest; measured on the embedded MLServer: 80-95 s per measurement)."""
    f = cfg.find
    stage_s = f.ramp_s + 1.25 * f.min_hold_s + f.cooldown_s / 2 + cfg.load.drain_s / 4 + 1.0
    return min(f.budget_s, 8 * stage_s) + _START_S[cfg.server.kind]


def estimate(cfg: SweepConfig, points: int, measured_s: list[float] | None = None) -> dict[str, Any]:
    """How long the sweep should take: points × repeats, plus the re-measurements of the leaders."""
    first = points * cfg.repeats
    extra = 0 if cfg.repeats >= 2 else min(cfg.remeasure_top, points)
    per = statistics.median(measured_s) if measured_s else expected_measurement_s(cfg)
    total = (first + extra) * per
    return {
        "points": points,
        "repeats": cfg.repeats,
        "measurements": first,
        "remeasurements_up_to": extra,
        "per_measurement_s": round(per, 1),
        "total_s": round(total, 1),
        "budget_s": cfg.budget_s,
        "text": (
            f"{points} point{'s' if points != 1 else ''} × {cfg.repeats} repeat{'s' if cfg.repeats != 1 else ''}"
            + (f" + up to {extra} re-measurement{'s' if extra != 1 else ''} of the leaders" if extra else "")
            + f" ≈ {first + extra} × {per / 60:.1f} min ≈ {total / 60:.0f} min"
            + (f" (the budget caps it at {cfg.budget_s / 60:.0f} min)" if cfg.budget_s and cfg.budget_s < total else "")
        ),
    }


class SweepState:
    """``sweep.json`` being written: the configuration, the grid, and every measurement as it ends."""

    def __init__(self, out_dir: Path, cfg: SweepConfig, points: list[Point], doc: dict[str, Any] | None = None):
        self.out_dir = out_dir
        self.cfg = cfg
        self.points = points
        if doc is None:
            doc = {**SweepDoc.envelope(), "sweep_version": SWEEP_VERSION, "created_unix": time.time()}
        doc["config"] = cfg.to_dict()
        doc["grid"] = [p.to_dict() for p in points]
        doc.setdefault("measurements", [])
        self.doc: dict[str, Any] = doc

    @classmethod
    def open(cls, out_dir: Path, headers: tuple[tuple[str, str], ...] = (), *, purpose: str = "--resume") -> SweepState:
        """The sweep in ``out_dir`` as recorded, finished measurements' figures recomputed; changes nothing
        on disk. ``purpose`` names the option in error messages."""
        path = out_dir / SWEEP_FILE
        if not path.is_file():
            raise SatpointError(f"{purpose}: {path} does not exist")
        try:
            doc = json.loads(path.read_text())
        except ValueError as e:
            raise SatpointError(f"{purpose}: {path} is not valid JSON ({e})") from None
        try:  # sweep.json before schema_version had sweep_version, the same number
            check_version(doc, path, SweepDoc.VERSION, "schema_version" if "schema_version" in doc else "sweep_version")
        except VersionError as e:
            raise SatpointError(f"{purpose}: {e}") from None
        doc.update(SweepDoc.envelope())  # written again by this satpoint
        cfg = SweepConfig.from_dict(doc["config"], headers).validate()
        state = cls(out_dir, cfg, cfg.points(), doc)
        state.refigure()
        return state

    @classmethod
    def resume(cls, out_dir: Path, headers: tuple[tuple[str, str], ...] = ()) -> SweepState:
        """The sweep in ``out_dir``, ready to continue: a measurement that was running when it stopped is
        measured again (its folder moved aside, its rows kept there)."""
        state = cls.open(out_dir, headers)
        doc = state.doc
        kept = []
        for m in doc["measurements"]:
            if m.get("status") == "done":
                kept.append(m)
            else:
                move_aside(out_dir / m["dir"])
        doc["measurements"] = kept
        doc.pop("stopped", None)
        doc.setdefault("resumed", []).append(time.time())
        return state

    def refigure(self) -> None:
        """Recompute every finished measurement's figures from its folder's summary.json (they are a
        function of it), so a sweep read again is judged by this version's rules."""
        for m in self.doc["measurements"]:
            path = self.out_dir / m["dir"] / "summary.json"
            if m.get("status") == "done" and path.is_file():
                summary = json.loads(path.read_text())
                m["figures"] = measurement_figures(summary, self.cfg.at_rps)
                if m["figures"]["target_lost"]:  # recorded as done by an earlier version
                    _mark_lost(m, summary)

    @property
    def measurements(self) -> list[dict[str, Any]]:
        return list(self.doc["measurements"])

    def done(self, point: Point) -> list[dict[str, Any]]:
        return [m for m in self.doc["measurements"] if m["point"] == point.id and m["status"] == "done"]

    def record(self, m: dict[str, Any]) -> None:
        ms = self.doc["measurements"]
        for i, old in enumerate(ms):
            if old["dir"] == m["dir"]:
                ms[i] = m
                break
        else:
            ms.append(m)
        self.write()

    def write(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.doc.update(analyse(self.cfg, self.points, self.doc["measurements"]))
        attach_quality(self.doc, self.doc.get("artefact_quality") or {}, self.cfg.max_quality_loss_pp)
        write_document(self.out_dir / SWEEP_FILE, SweepDoc.model_validate(self.doc))


def ranking_objective(cfg: SweepConfig) -> Objective:
    """The objective the points are ranked by: with ``--slo`` every search answered under the latency
    objective, so the default (saturation) is the SLO's saturation."""
    return "slo" if cfg.slo and cfg.objective == "saturation" else cfg.objective


def analyse(cfg: SweepConfig, points: list[Point], measurements: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The per-point figures, the ranking, the front and the best point per objective (a pure function
    of the measurements)."""
    rows = []
    for p in points:
        ms = [m["figures"] for m in measurements if m["point"] == p.id and m["status"] == "done" and m.get("figures")]
        cores = next(
            (m.get("server_cores") for m in measurements if m["point"] == p.id and m.get("server_cores")), None
        )
        batch = int(p.values.get("batch", cfg.server.batch))
        rows.append(aggregate(PointInput(p.id, p.label, p.values, cores, batch, ms)))
    add_scaling(rows, workers_use_cores=cfg.server.kind != "sim")
    # with --slo the searches answered under it: the highest saturation is the SLO's objective
    objectives: list[Objective] = ["slo" if cfg.slo else "saturation", "per_core"]
    if cfg.at_rps is not None:
        objectives.append("p99")
    bests = {o: best(rows, o) for o in objectives}
    objective = ranking_objective(cfg)
    doc: dict[str, Any] = {
        "objective": objective,
        "points": rows,
        "order": rank(rows, objective),
        "pareto_front": pareto_front(rows),
        "best": bests,
    }
    # a sweep over the model count: memory per model and the largest count within --slo and the budget
    models = models_analysis(rows, slo=cfg.slo, budget_mb=cfg.server_memory_mb)
    if models is not None:
        doc["models_memory"] = models
    doc["recommendation"] = recommendation_lines(doc) + models_lines(models)
    return doc


def rewrite_sweep(out_dir: Path) -> dict[str, Any]:
    """Recompute a sweep's figures and analysis from its measurement folders and rewrite sweep.json,
    sweep.csv and report.html; measures nothing. Returns the document."""
    state = SweepState.open(out_dir, purpose="--report")
    state.write()
    _write_outputs(state)
    return state.doc


def move_aside(folder: Path) -> None:
    """Rename a cut-off measurement's folder to ``NAME-cut-TIMESTAMP`` (its rows stay readable there)."""
    if folder.exists():
        shutil.move(str(folder), str(folder.with_name(folder.name + f"-cut-{int(time.time())}")))


def _points_by_id(points: list[Point]) -> dict[str, Point]:
    return {p.id: p for p in points}


def run_sweep(
    cfg: SweepConfig,
    out_dir: Path,
    *,
    stop: threading.Event | None = None,
    on_event: OnEvent | None = None,
    state: SweepState | None = None,
) -> SweepOutcome:
    """Measure every point (``repeats`` times), then the leaders again; write sweep.json/csv/report.html.

    Pass ``state`` (``SweepState.resume``) to continue a sweep: its finished measurements are kept."""
    stop = stop or threading.Event()
    if state is None:
        cfg.validate()
        state = SweepState(out_dir, cfg, cfg.points())
    cfg, points = state.cfg, state.points
    require_generator(cfg.load)  # Ray there, --realtime allowed: refused here, before any server starts
    if cfg.server.kind in SERVERS:
        check_extra(cfg.server.kind)  # the embedded server's extra installed: refused here too
    est = estimate(cfg, len(points))
    state.doc["estimate"] = est
    reused = sum(1 for m in state.measurements if m["status"] == "done")
    say(on_event, f"sweep: {est['text']}" + (f"; {reused} measurements reused from {out_dir}" if reused else ""))
    say(on_event, f"objective: {ranking_objective(cfg)}; results in {out_dir}")
    if "artefact_quality" not in state.doc:  # once per artefact, offline, before any server starts
        from satpoint.experiments.sweep_quality import sweep_quality

        state.doc["artefact_quality"] = sweep_quality(cfg, points, on_event)
    state.write()
    t0 = time.monotonic()
    durations = [float(m["duration_s"]) for m in state.measurements if m.get("duration_s")]
    stopped: str | None = None

    def budget_left() -> float | None:
        return None if cfg.budget_s is None else cfg.budget_s - (time.monotonic() - t0)

    def measure(point: Point, repeat: int, phase: str, fleet: Fleet | None) -> bool:
        nonlocal stopped
        left = budget_left()
        if left is not None and left < MIN_MEASUREMENT_S:
            stopped = f"the sweep's budget ({cfg.budget_s:g} s) ran out"
            return False
        n_done = sum(1 for m in state.measurements if m["status"] == "done")
        say(on_event, f"── [{n_done + 1}] {point.id} {point.label} · measurement {repeat} ({phase}) ──")
        m = _measure(cfg, state, point, repeat, phase, stop, on_event, left, fleet)
        durations.append(m["duration_s"])
        state.doc["estimate"] = estimate(cfg, len(points), durations)
        state.record(m)
        say(on_event, _live_line(point, m))
        if stop.is_set():
            stopped = "interrupted (Ctrl-C or a signal)"
            return False
        return True

    with open_fleet(cfg.load, on_event) as fleet:  # Ray generator hosts for the whole sweep (--ray)
        # first pass: every point `repeats` times, repeats interleaved so slow drift spreads over all points
        for repeat in range(1, cfg.repeats + 1):
            for point in points:
                if stopped is None and len(state.done(point)) < repeat and not measure(point, repeat, "grid", fleet):
                    break
        # the leaders again, until each has at least two measurements
        if stopped is None and cfg.remeasure_top > 0:
            rows = state.doc["points"]
            for pid in remeasure_plan(rows, ranking_objective(cfg), cfg.remeasure_top):
                point = _points_by_id(points)[pid]
                if not measure(point, len(state.done(point)) + 1, "re-measure the leaders", fleet):
                    break
    if stopped is not None:
        state.doc["stopped"] = stopped
        say(on_event, f"sweep stopped: {stopped}; resume with: satpoint sweep --resume {out_dir}", "warning")
    state.doc["duration_s"] = round(time.monotonic() - t0, 1)
    state.write()
    _write_outputs(state)
    return SweepOutcome(state.doc, out_dir, stop.is_set())


def _measure(
    cfg: SweepConfig,
    state: SweepState,
    point: Point,
    repeat: int,
    phase: str,
    stop: threading.Event,
    on_event: OnEvent | None,
    budget_left: float | None,
    fleet: Fleet | None = None,
) -> dict[str, Any]:
    rel = f"points/{point.dirname}/m{repeat}"
    folder = state.out_dir / rel
    move_aside(folder)  # a leftover of a cut-off run of this measurement
    m: dict[str, Any] = {
        "point": point.id,
        "repeat": repeat,
        "phase": phase,
        "dir": rel,
        "status": "running",
        "started_unix": time.time(),
    }
    state.record(m)
    t0 = time.monotonic()
    fopts = cfg.find
    # every measurement searches as the first did, from the probe's start rate: one seeded from an earlier
    # answer took another path (it started at 60 % of it and doubled past the capacity, into MLServer's
    # slow overloaded state), and the answer depended on the path (benchmarks/RESULTS.md, "One server,
    # one answer")
    if budget_left is not None:
        fopts = replace(fopts, budget_s=max(10.0, min(fopts.budget_s, budget_left - _START_S[cfg.server.kind])))
    rules = VerdictRules(max_error_rate=cfg.max_error_rate, slo_ms=parse_slo(list(cfg.slo)))
    watched: PointServer | None = None
    try:
        with point_server(cfg.server, point.values, stop=stop, on_event=on_event, log_dir=None) as srv:
            watched = srv
            m["server_cores"] = srv.cores
            m.update(srv.actions)
            if srv.info is not None:
                m["server"] = {k: srv.info.get(k) for k in ("kind", "settings", "startup_s", "cpus", "versions")}
            load = cfg.load
            if "arrival" in point.values:  # a client-side knob: the generator's arrival process
                load = replace(load, arrival=str(point.values["arrival"]))
            if cfg.server.kind != "remote" and load.generator_cpus is None and load.ray is None:
                load = replace(load, generator_cpus=_generator_cpus())
            watch = ObserveOptions(server_pids=srv.pids, metrics_urls=srv.metrics_urls).validate()
            with Observer(watch, folder) as observer:
                session = search_target(
                    srv.target,
                    load,
                    fopts,
                    rules,
                    folder,
                    stop=stop,
                    on_event=on_event,
                    server_info=srv.info,
                    profile_rps=cfg.at_rps,
                    observer=observer,
                    fleet=fleet,
                )
        summary = write_all(folder, session.results, html=True)
        m["figures"] = measurement_figures(summary, cfg.at_rps)
        m["status"] = "interrupted" if stop.is_set() else "done"
        if srv.cgroup is not None:
            m["limits"] = srv.cgroup.info()  # the limits and the cgroup's last counters (peak memory, OOM kills)
        oom = srv.cgroup.oom_message() if srv.cgroup is not None else None
        if m["status"] == "done" and oom is not None:  # a process of the server was killed: not its capacity
            m["status"], m["error"] = "failed", f"the server was {oom}"
            say(on_event, f"{point.id} {point.label}: measurement failed: {m['error']}", "warning")
        elif m["status"] == "done" and m["figures"]["target_lost"]:
            _mark_lost(m, summary)
            say(on_event, f"{point.id} {point.label}: measurement failed: {m['error']}", "warning")
    except (SatpointError, ValueError, OSError, RuntimeError) as e:  # the target failed or went away, a disk
        # filled up, a library gave up: this measurement failed, the sweep goes on
        m["status"] = "interrupted" if stop.is_set() else "failed"
        m["error"] = str(e)
        oom = watched.cgroup.oom_message() if watched is not None and watched.cgroup is not None else None
        if oom is not None and oom not in m["error"]:  # the memory limit killed it: that is the cause to name
            m["error"] = f"the server was {oom}; then: {e}"
        say(on_event, f"{point.id} {point.label}: measurement failed: {m['error']}", "warning")
    m["duration_s"] = round(time.monotonic() - t0, 1)
    return m


def _mark_lost(m: dict[str, Any], summary: Mapping[str, Any]) -> None:
    """A search that lost its target measured no capacity: the measurement failed (left out of the
    figures, measured again on resume)."""
    lost = summary.get("target_lost") or {}
    m["status"] = "failed"
    m["error"] = str(lost.get("message") or "the target stopped answering during the search")


def _generator_cpus() -> tuple[int, ...] | None:
    from satpoint.api import split_cpus

    return split_cpus()[1]


def _live_line(point: Point, m: Mapping[str, Any]) -> str:
    head = f"{point.id} {point.label} · m{m['repeat']}: "
    if m["status"] != "done":
        return (
            head + f"{m['status']}" + (f" ({m.get('error')})" if m.get("error") else "") + f" · {m['duration_s']:.0f} s"
        )
    f = m["figures"]
    sat = f.get("saturation_rps")
    op = f.get("at_operating_point") or {}
    bound = "≥ " if f.get("lower_bound") else ""  # the search never overloaded the server
    parts = [f"saturation {bound}{sat:.1f} rps" if sat is not None else "no stable rate"]
    if f.get("unstable_rps"):
        parts.append(f"unstable at {f['unstable_rps']:.1f}")
    if op.get("p99_ms") is not None:
        parts.append(f"p99 {op['p99_ms']:.1f} ms at {op['rps']:.0f} rps")
    low = f.get("low_load") or {}
    if low.get("p99_ms") is not None:
        parts.append(f"low-load p99 {low['p99_ms']:.1f} ms")
    return head + ", ".join(parts) + f" · {m['duration_s']:.0f} s"


def _write_outputs(state: SweepState) -> None:
    from satpoint.reports.html.sweep import write_sweep_report
    from satpoint.reports.sweep import write_sweep_csv

    write_sweep_csv(state.doc, state.out_dir / SWEEP_CSV)
    write_sweep_report(state.doc, state.out_dir / "report.html")
