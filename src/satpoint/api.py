"""The public Python API: run, find, load and report, as functions that return typed results.

Everything the command line does goes through here (``cli/`` only parses options and renders).  The
library never writes to the terminal: pass ``on_event`` to see progress (see ``satpoint.procedures.progress``)
and ``stop`` (a ``threading.Event``) to end a run early with its results kept.  Every call writes a
results folder (``summary.json``, ``results.json``, the recorded rows, ``intervals.csv`` and, unless
``html=False``, ``report.html``) and returns its typed summary together with the folder.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from satpoint.analysis.search.capacity import Recommendation
from satpoint.analysis.search.target_lost import HEADER_KEY as TARGET_LOST_KEY
from satpoint.analysis.search.thresholds import STREAM_METRICS, evaluate, parse_slo, parse_thresholds
from satpoint.analysis.summary.build import build_summary
from satpoint.analysis.summary.model import FindSummary as FindSummary
from satpoint.analysis.summary.model import RunSummary, parse_summary
from satpoint.config import FindOptions, LoadOptions, ObserveOptions, RunConfig, VerdictRules
from satpoint.endpoints import triton
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.engine.closed_loop import ClosedLoopOptions
from satpoint.errors import ConfigError
from satpoint.metrics.results import Segment, load_results, write_header
from satpoint.metrics.results import default_out as default_out
from satpoint.metrics.stream_records import StreamRecords
from satpoint.observe.observer import Observer
from satpoint.observe.pyspy import NO_PID, NO_PYSPY, find_py_spy
from satpoint.observe.pyspy import preflight as flamegraph_preflight
from satpoint.observe.replicas import CommandSource as CommandSource
from satpoint.observe.replicas import K8sSource as K8sSource
from satpoint.observe.replicas import PromSource as PromSource
from satpoint.plan import Stage, validate_plan
from satpoint.procedures.progress import OnEvent, say
from satpoint.procedures.saturation import search_target
from satpoint.procedures.scale_test import ScaleOptions as ScaleOptions
from satpoint.procedures.scale_test import ScaleResult as ScaleResult
from satpoint.procedures.scale_test import scale_test as scale_test
from satpoint.procedures.session import (
    LOST_ERRORS,
    Session,
    announce_target,
    check_plan_fits,
    open_fleet,
    require_generator,
)
from satpoint.procedures.target_hold import hold_from_idle, run_target_stage
from satpoint.reports.files.k8s import max_replicas_choice, write_k8s
from satpoint.reports.files.results import write_all
from satpoint.servers.embedded import EmbeddedSettings
from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget
from satpoint.servers.triton.repo import TritonRepoSettings, TritonRepoTarget
from satpoint.servers.triton.server import TritonSettings, TritonTarget

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped,unused-ignore]

#: the embedded default server (a real MLServer with the iris model) as a context manager
EmbeddedMLServer = MLServerTarget


@dataclass(frozen=True)
class RunResult:
    """A finished (or interrupted) run: its ``summary.json`` as a typed object, and its folder."""

    summary: RunSummary
    out_dir: Path

    @property
    def interrupted(self) -> bool:
        return self.summary.interrupted

    @property
    def thresholds_passed(self) -> bool:
        return self.summary.thresholds_passed


@dataclass(frozen=True)
class FindResult(RunResult):
    """A saturation search: ``summary.saturation_rps``, ``summary.recommendation``, ``summary.latency_at``."""

    summary: FindSummary
    k8s_files: tuple[Path, ...] = ()

    @property
    def saturation_rps(self) -> float | None:
        return self.summary.saturation_rps


@dataclass(frozen=True)
class LoadedResults:
    """An existing results folder: configuration, recorded segments and the summary recomputed from them."""

    out_dir: Path
    header: dict[str, Any]
    config: RunConfig
    segments: tuple[Segment, ...]
    summary: RunSummary

    def rows(self) -> dict[str, npt.NDArray[np.generic]]:
        """Every recorded request as numpy columns (intended, sent, done on the segment's run clock, seconds;
        outcome, status, waited, retried) plus ``segment``: the segment each row belongs to.  A streamed run
        adds the ``stream_*`` columns (``metrics.stream_records``): ``stream_gaps_us`` is the flat array of
        every gap, row ``i``'s at ``[stream_gap_start[i], + stream_gap_count[i])``."""
        cols: dict[str, list[npt.NDArray[np.generic]]] = {}
        mix = any("model" in seg.records.columns() for seg in self.segments)
        for seg in self.segments:
            seg_cols = seg.records.columns()
            if mix and "model" not in seg_cols:  # a segment whose rows all went to model 0 stores no column
                seg_cols["model"] = np.zeros(len(seg.records), dtype=np.int16)
            for k, v in seg_cols.items():
                if not k.startswith("stream_"):  # joined below: the gap offsets are per segment
                    cols.setdefault(k, []).append(v)
            cols.setdefault("segment", []).append(np.full(len(seg.records), seg.index, dtype=np.int32))
        out = {k: np.concatenate(v) for k, v in cols.items()}
        streams = [seg.records.stream for seg in self.segments]
        if any(st is not None for st in streams):
            parts = [st or StreamRecords.empty(len(g.records)) for st, g in zip(streams, self.segments, strict=True)]
            out.update(StreamRecords.concat(parts).columns())
        return out

    def to_pandas(self, table: str = "rows") -> pd.DataFrame:
        """A pandas DataFrame of every request (``rows``: run-clock and unix times, ``latency_ms``, outcomes by
        name, ``model``/``model_name``, a stream's per-request figures) or of every gap between two streamed
        chunks (``stream_gaps``, joined to ``rows`` on ``segment`` and ``row``); see ``reports.files.frames``."""
        from satpoint.reports.files.frames import to_pandas

        return to_pandas(self.segments, self.header, table)


def split_cpus() -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(server CPUs, generator CPUs) for a server satpoint starts: the server on all but the last CPU,
    the generator on the last one (no pinning with a single CPU)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return tuple(cpus[:-1]), (cpus[-1],)


def _stages(stages: Sequence[Stage | str]) -> list[Stage]:
    out = [s if isinstance(s, Stage) else Stage.parse(s) for s in stages]
    validate_plan(out)
    return out


def _check_flamegraph(observe: ObserveOptions) -> None:
    """Refuse, before any load, a flame graph that cannot be recorded (no local pid, no py-spy, no
    ptrace permission): the message says why and how to grant it."""
    if observe.flamegraph is None:
        return
    why = flamegraph_preflight(observe.server_pids[0] if observe.server_pids else None)
    if why is not None:
        raise ConfigError(f"--flamegraph: {why}")


def _finish_run(session: Session, html: bool) -> RunResult:
    summary = write_all(session.out_dir, session.results, html=html)
    return RunResult(parse_summary(summary), session.folder)  # the rescue folder if --out refused a write


def _measure_kept(session: Session, measure: Callable[[], object]) -> None:
    """Measure; a target that went away is recorded (the run then failed: ``summary.target_lost``), and
    any other error still leaves ``summary.json`` for what was kept before it propagates."""
    try:
        measure()
    except LOST_ERRORS as e:
        session.results.header[TARGET_LOST_KEY] = {"when": "as the run started", "error": str(e)}
        write_header(session.out_dir, session.results)
    except BaseException:
        with contextlib.suppress(Exception):
            write_all(session.out_dir, session.results, html=False)
        raise


def run(
    target: Target,
    stages: Sequence[Stage | str],
    *,
    load: LoadOptions | None = None,
    max_error_rate: float = 0.01,
    thresholds: Sequence[str] = (),
    out: Path | str | None = None,
    html: bool = True,
    on_event: OnEvent | None = None,
    stop: threading.Event | None = None,
    observe: ObserveOptions | None = None,
    hold_rps: float | None = None,
) -> RunResult:
    """A staged open-loop load test: every stage ramps to its target rate and holds it; each is judged.

    ``stages`` are ``Stage(target_rps, ramp_s, hold_s)`` or ``"RPS:RAMP_S:HOLD_S"`` strings with rising
    targets.  ``thresholds`` are SLO gates (``"p99<50ms"``, ``"error_rate<1%"``) evaluated into
    ``summary.thresholds``.  ``observe`` names a local server's pids and Prometheus endpoints to watch
    (each stage's ``server`` and ``server_metrics``, the ``diagnosis``); with ``observe.flamegraph``,
    py-spy records the server during the hold of its ``stage`` (1-based; default the last) into
    ``flamegraph.svg`` and ``profile.speedscope.json`` (``summary.flamegraph``).  ``hold_rps`` (``run
    --baseline``: the baseline's per-replica target): after the stages, that rate is held alone from idle,
    one more segment (``satpoint.procedures.target_hold``; the first stage's ramp, the plan's longest hold).

    Raises ``satpoint.errors.SatpointError`` (or ``ValueError``) on bad input
    before any load is sent (also a plan whose rows would not fit in memory).  Once measuring has
    started, nothing raises for the target going away: ``summary.target_lost`` says where it did."""
    plan = _stages(stages)
    check_plan_fits(plan)
    load = (load or LoadOptions()).validate()
    require_generator(load)
    checks = tuple(t.expr for t in parse_thresholds(thresholds, "run"))
    observe = (observe or ObserveOptions()).validate()
    flame_stage: int | None = None
    if observe.flamegraph is not None:
        flame_stage = observe.flamegraph.stage or len(plan)
        if flame_stage > len(plan):
            raise ConfigError(f"--flamegraph-stage {flame_stage}: the plan has {len(plan)} stages")
        _check_flamegraph(observe)
    announce_target(target, on_event)
    prepared = prepare(target, load.max_inflight, seed=load.seed, grpc_connections=load.grpc_connections)
    observe = _with_triton_stats(target, observe, on_event)
    config = RunConfig(load=load, rules=VerdictRules(max_error_rate=max_error_rate), thresholds=checks)
    out_dir = Path(out) if out is not None else default_out("run")
    with open_fleet(load, on_event) as fleet, Observer(observe, out_dir) as observer:
        session = Session(prepared, config, out_dir, on_event=on_event, stop=stop, observer=observer, fleet=fleet)
        _measure_kept(
            session,
            lambda: session.measure(
                plan, title="run", flamegraph_stage=None if flame_stage is None else flame_stage - 1
            ),
        )
        if hold_rps is not None:
            hold_from_idle(session, FindOptions(), hold_rps, run_target_stage(plan, hold_rps))
    return _finish_run(session, html)


def run_closed_loop(
    target: Target,
    users: int,
    duration_s: float,
    *,
    think_ms: float = 0.0,
    timeout_s: float = 30.0,
    drain_s: float = 10.0,
    seed: int = 0,
    max_error_rate: float = 0.01,
    thresholds: Sequence[str] = (),
    out: Path | str | None = None,
    html: bool = True,
    on_event: OnEvent | None = None,
    stop: threading.Event | None = None,
    grpc_connections: int | None = None,
    observe: ObserveOptions | None = None,
) -> RunResult:
    """A closed loop: ``users`` that each wait for their answer (plus ``think_ms``) before sending again.

    Kept to show how closed loops under-report: the summary is labelled ``mode: closed_loop`` and warns."""
    if target.stream:
        raise ConfigError("--stream measures open-loop stages (--stage), not a closed loop")
    options = ClosedLoopOptions(
        users, duration_s, think_ms / 1000, timeout_s=timeout_s, drain_s=min(drain_s, timeout_s)
    )
    options.validate()
    checks = tuple(t.expr for t in parse_thresholds(thresholds, "run"))
    announce_target(target, on_event)
    prepared = prepare(target, users, seed=seed, grpc_connections=grpc_connections)
    options = replace(options, payload_count=len(prepared.payload_docs))
    load = LoadOptions(
        seed=seed, max_inflight=users, timeout_s=timeout_s, drain_s=drain_s, grpc_connections=grpc_connections
    )
    config = RunConfig(
        mode="closed_loop",
        load=load,
        rules=VerdictRules(max_error_rate=max_error_rate),
        thresholds=checks,
        closed_loop=options.describe(),
    )
    out_dir = Path(out) if out is not None else default_out("run")
    with Observer(observe or ObserveOptions(), out_dir) as observer:
        session = Session(prepared, config, out_dir, on_event=on_event, stop=stop, observer=observer)
        _measure_kept(session, lambda: session.measure_closed(options))
    return _finish_run(session, html)


def find(
    target: Target | None = None,
    *,
    options: FindOptions | None = None,
    load: LoadOptions | None = None,
    slo: Sequence[str] | Mapping[str, float] = (),
    max_error_rate: float = 0.01,
    thresholds: Sequence[str] = (),
    server: EmbeddedSettings | None = None,
    protocol: str = "rest",
    target_options: Mapping[str, Any] | None = None,
    emit_k8s: Path | str | None = None,
    out: Path | str | None = None,
    html: bool = True,
    on_event: OnEvent | None = None,
    stop: threading.Event | None = None,
    observe: ObserveOptions | None = None,
    hold_rps: float | None = None,
) -> FindResult:
    """The saturation search: the highest rate one replica sustains before queueing sets in.

    With ``target=None`` an embedded MLServer (``server`` settings; default: the iris model, one worker,
    on all CPUs but the last, the generator on the last) or Triton (``TritonSettings``; copies of a demo
    model: ``TritonRepoSettings``) is started and always stopped, and tested over ``protocol`` with
    ``target_options`` (other ``Target`` fields, e.g. ``headers``; many models: a uniform mix).  ``slo`` adds
    latency objectives (``["p99<50ms"]`` or ``{"p99": 50.0}``): the answer is then the highest stable
    rate that meets them.  ``emit_k8s`` writes a Seldon Core 2 ``Model`` and an HPA for the
    recommendation into that folder.  ``observe`` names a local server's pids and Prometheus endpoints
    to watch; the embedded MLServer's process tree and metrics endpoint are watched by default.  With
    ``observe.flamegraph``, one more stage after the search holds 95 % of the saturation point while
    py-spy records the server (``flamegraph.svg``, ``profile.speedscope.json``, ``summary.flamegraph``).
    ``hold_rps`` (``find --baseline``: the baseline's per-replica target): after the search, that rate is
    held alone from idle, one more segment after the search (``satpoint.procedures.target_hold``), planned into the
    budget."""
    if target is not None and server is not None:  # as the CLI: --server names the embedded server
        raise ConfigError("server= describes the embedded server satpoint starts: give it with target=None")
    opts = (options or FindOptions()).validate()
    if load is not None:
        require_generator(load.validate())
    observe = (observe or ObserveOptions()).validate()
    if observe.flamegraph is not None:
        opts = replace(opts, flamegraph=True)
        if target is not None and not observe.server_pids:
            raise ConfigError(f"--flamegraph: {NO_PID}")
        if find_py_spy() is None:
            raise ConfigError(f"--flamegraph: {NO_PYSPY}")
    slo_ms = dict(slo) if isinstance(slo, Mapping) else parse_slo(list(slo))
    streamed = target.stream if target is not None else bool((target_options or {}).get("stream"))
    if not streamed and any(k in STREAM_METRICS for k in slo_ms):
        raise ConfigError("--slo on ttfc_*/gap_* (time to first chunk, gaps between chunks) needs --stream")
    checks = tuple(t.expr for t in parse_thresholds(thresholds, "find"))
    rules = VerdictRules(max_error_rate=max_error_rate, slo_ms=slo_ms)
    out_dir = Path(out) if out is not None else default_out("find")
    stop = stop or threading.Event()
    with ExitStack() as stack:
        server_info: dict[str, Any] | None = None
        if target is None:
            s_cpus, g_cpus = split_cpus()
            if load is None or (load.generator_cpus is None and load.ray is None):  # Ray hosts: not pinned
                load = replace(load or LoadOptions(drain_s=5.0), generator_cpus=g_cpus)
            settings = server or MLServerSettings(cpus=s_cpus)
            if not isinstance(settings, MLServerSettings) and settings.cpus is None:
                settings = replace(settings, cpus=s_cpus)
            embedded = _start_embedded(settings, load, on_event)
            stack.enter_context(embedded)
            say(on_event, f"{embedded.NAME} ready at {embedded.rest_url} (pid {embedded.pid})")
            server_info = embedded.info()
            target = embedded.target(protocol, **(target_options or {}))
            watched = [embedded.metrics_url]
            if not isinstance(embedded, MLServerTarget):  # Triton's statistics (of every model it serves)
                watched.append(embedded.stats_url)
            observe = replace(
                observe,
                server_pids=observe.server_pids or (embedded.pid,),
                metrics_urls=(*observe.metrics_urls, *watched),
            )
        else:
            observe = _with_triton_stats(target, observe, on_event)
        load = (load or LoadOptions(drain_s=5.0)).validate()
        _check_flamegraph(observe)  # the embedded server's pid is known by now
        fleet = stack.enter_context(open_fleet(load, on_event))
        observer = stack.enter_context(Observer(observe, out_dir))
        session = search_target(
            target, load, opts, rules, out_dir, stop=stop, on_event=on_event, server_info=server_info,
            thresholds=checks, observer=observer, fleet=fleet, hold_rps=hold_rps,
        )  # fmt: skip
        if hold_rps is not None:
            hold_from_idle(session, opts, hold_rps)
    summary = FindSummary.model_validate(write_all(out_dir, session.results, html=html))
    files: tuple[Path, ...] = ()
    if emit_k8s is not None and summary.recommendation is None:
        withheld = getattr(summary, "recommendation_withheld", None)
        say(on_event, f"no Kubernetes manifests: {withheld or 'no saturation point was found'}")
    if emit_k8s is not None and summary.recommendation is not None:
        if summary.target_lost is not None:
            say(on_event, "no Kubernetes manifests: the target stopped answering, so the search did not finish")
        else:
            # the manifests' own figures (a target lowered by --hysteresis is the one they carry)
            rec = Recommendation(**summary.recommendation.model_dump(include=_REC_FIELDS))
            files = tuple(write_k8s(Path(emit_k8s), target.model, rec))
            say(on_event, max_replicas_choice(rec)[1])
    return FindResult(summary, session.folder, files)


#: the fields of the recommendation the Kubernetes manifests are written from
_REC_FIELDS = {f.name for f in dataclass_fields(Recommendation)}


def _start_embedded(
    settings: EmbeddedSettings, load: LoadOptions, on_event: OnEvent | None
) -> MLServerTarget | TritonTarget | TritonRepoTarget:
    """The embedded server described by ``settings``, not yet started (a context manager)."""
    where = f"server CPUs {_cpu_list(settings.cpus)}, generator CPUs {_cpu_list(load.generator_cpus)}"
    if not isinstance(settings, MLServerSettings):
        knobs = ", ".join(f"{k}={v}" for k, v in settings.knobs().items() if v is not None)
        copies = f"{settings.models} copies of the " if isinstance(settings, TritonRepoSettings) else ""
        say(on_event, f"starting the embedded Triton ({copies}{settings.demo_model} model, {knobs}, {where})")
        return TritonTarget(settings) if isinstance(settings, TritonSettings) else TritonRepoTarget(settings)
    say(
        on_event,
        f"starting the embedded MLServer ({_served(settings)}, parallel_workers={settings.parallel_workers}, {where})",
    )
    return MLServerTarget(settings)


def _with_triton_stats(target: Target, observe: ObserveOptions, on_event: OnEvent | None = None) -> ObserveOptions:
    """``observe`` plus Triton's statistics endpoint when the target is a Triton answering over REST
    (read before and after each stage: queue and compute times, the batch size achieved)."""
    if target.protocol != "rest":
        return observe
    found = triton.probe(target.url, target.model, target.wire_headers, tls=target.tls_options())
    if found is None or not found.server.has_statistics:
        return observe
    url = triton.stats_url(target.url, target.model)
    if url in observe.metrics_urls:
        return observe
    say(on_event, f"Triton {found.server.version or ''} detected: reading its statistics before and after each stage")
    return replace(observe, metrics_urls=(*observe.metrics_urls, url))


def _served(settings: MLServerSettings) -> str:
    """What the embedded MLServer serves, for the progress line."""
    if settings.model_dir is not None:
        return f"model {settings.served_model_name} from {settings.model_dir}"
    if settings.model_repo is not None:
        return f"{len(settings.served_model_names)} models from {settings.model_repo}"
    copies = f"{settings.demo_models} copies of the " if settings.demo_models is not None else ""
    return f"{copies}{settings.demo_model} model, {settings.runtime} runtime"


def _cpu_list(cpus: Sequence[int] | None) -> str:
    return ",".join(map(str, cpus)) if cpus else "any"


def load(out_dir: Path | str) -> LoadedResults:
    """Open an existing results folder (also one whose run was cut off); recomputes its summary."""
    path = Path(out_dir)
    results = load_results(path)
    return LoadedResults(
        out_dir=path,
        header=results.header,
        config=results.config,
        segments=tuple(results.segments),
        summary=parse_summary(build_summary(results)),
    )


def report(dirs: Sequence[Path | str], out: Path | str | None = None) -> Path:
    """Rewrite ``summary.json``, ``stages.csv`` and ``intervals.csv`` of each folder and write one ``report.html``
    (several folders overlay, e.g. before/after); returns the report's path."""
    from satpoint.reports.html.report import write_report

    paths = [Path(d) for d in dirs]
    if not paths:
        raise ValueError("report needs at least one results folder")
    for d in paths:
        write_all(d, load_results(d), html=False)
    target = Path(out) if out is not None else paths[0] / "report.html"
    return write_report(paths, target)


def gate_expressions(thresholds: Sequence[str], slo: Sequence[str] = ()) -> list[str]:
    """``--threshold`` expressions (checked: a ``ThresholdError`` for a bad one) and ``--slo`` objectives
    as upper limits (``p99=50ms`` is ``p99<=50ms``), for ``judge``."""
    parse_thresholds(list(thresholds), "find")
    return [*thresholds, *(f"{metric}<={limit_ms:g}ms" for metric, limit_ms in parse_slo(list(slo)).items())]


def judge(out_dir: Path | str, expressions: Sequence[str]) -> list[dict[str, Any]]:
    """Threshold expressions judged on a search's results folder, as ``find --threshold`` judges its own
    (summary.json's ``thresholds`` entries)."""
    loaded = load(out_dir)
    purposes = {s.index: s.purpose for s in loaded.segments}
    specs = parse_thresholds(list(expressions), "find")
    return [r.to_dict() for r in evaluate(specs, loaded.summary.model_dump(), purposes)]
