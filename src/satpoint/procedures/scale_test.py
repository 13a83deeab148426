"""``satpoint scale-test``: an open-loop load shape made to exercise an autoscaler, with the replica count read
once a second beside it.

The shape is one segment (every latency from the intended send time, as ``run``): the base rate held
``base_s``, then a step (``ramp_s`` 0) or a ramp to the peak, held ``hold_s``, then back to the base at once,
held ``down_hold_s`` (long enough for the scale-down window: HPA's is 300 s).  The replica source is read once
before any load (a source that cannot be read, a query with no series: one line, exit 2) and then every second
in a thread of its own.  The figures (``analysis.scale``) go into ``summary.json`` as its ``scale`` block and into
the results header (``results.json``).
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from satpoint.analysis.scale import ReplicaPoint, ScalePhases, request_latency, scale_block
from satpoint.analysis.scale_predict import predict
from satpoint.analysis.search.thresholds import parse_slo
from satpoint.config import LoadOptions, RunConfig, VerdictRules
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.errors import ConfigError
from satpoint.metrics.results import default_out, write_header
from satpoint.observe.replicas import ReplicaSource, ReplicaWatcher, check, settle
from satpoint.plan import Stage
from satpoint.procedures.progress import OnEvent, say
from satpoint.procedures.session import Session, announce_target, check_plan_fits, require_generator
from satpoint.reports.files.results import SUMMARY_FILE, write_all

#: the results header's key (and ``summary.json``'s) of the figures
SCALE_KEY = "scale"
#: ``--html``: the timeline page
SCALE_HTML = "scale.html"


@dataclass(frozen=True)
class ScaleOptions:
    """The load shape (rates in rps, durations in seconds), the latency objective (``p99<500ms``), and one
    replica's saturation (``capacity_rps``, for the margin check; None: no check)."""

    from_rps: float
    to_rps: float
    ramp_s: float = 0.0
    base_s: float = 60.0
    hold_s: float = 300.0
    down_hold_s: float = 360.0
    slo: str = "p99<500ms"
    every_s: float = 1.0
    capacity_rps: float | None = None
    #: a ``satpoint find`` folder whose saturation point is ``capacity_rps`` (one replica's)
    capacity_dir: Path | None = None
    #: before any load, wait until the replica count has not changed for ``settle_s`` (0: no wait), at most
    #: ``settle_max_s`` (then the test runs anyway, with a note)
    settle_s: float = 0.0
    settle_max_s: float = 600.0
    #: ``--predict TARGET``: the policy's utilisation target for the model (``analysis.scale_predict``), its sync
    #: period, scale-down window, delay (None: measured) and most replicas (None: the peak measured)
    predict_target: float | None = None
    predict_sync_s: float = 15.0
    predict_window_s: float = 300.0
    predict_delay_s: float | None = None
    predict_max: int | None = None

    def stages(self) -> list[Stage]:
        return [
            Stage(self.from_rps, 0.0, self.base_s),
            Stage(self.to_rps, self.ramp_s, self.hold_s),
            Stage(self.from_rps, 0.0, self.down_hold_s),
        ]

    def phases(self) -> ScalePhases:
        down = self.base_s + self.ramp_s + self.hold_s
        return ScalePhases(self.base_s, down, down + self.down_hold_s, self.from_rps, self.to_rps, self.ramp_s)

    def objective(self) -> tuple[str, float]:
        """(percentile, limit in ms) of ``slo``."""
        parsed = parse_slo([self.slo])
        if len(parsed) != 1 or next(iter(parsed)).startswith(("ttfc", "gap")):
            raise ConfigError(f"--slo {self.slo!r}: one latency percentile limit, e.g. p99<500ms")
        metric, limit = next(iter(parsed.items()))
        return metric, limit

    def validate(self) -> ScaleOptions:
        for name, value in (("--from", self.from_rps), ("--to", self.to_rps)):
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a rate > 0 rps, got {value}")
        if self.to_rps <= self.from_rps:
            raise ConfigError(f"--to ({self.to_rps:g} rps) must be above --from ({self.from_rps:g} rps)")
        for name, value in (("--base-s", self.base_s), ("--hold-s", self.hold_s), ("--down-hold-s", self.down_hold_s)):
            if not (math.isfinite(value) and value >= 1):
                raise ConfigError(f"{name} must be at least 1 s, got {value}")
        if not (math.isfinite(self.ramp_s) and self.ramp_s >= 0):
            raise ConfigError(f"--ramp-s must be >= 0, got {self.ramp_s}")
        if self.capacity_rps is not None and not (math.isfinite(self.capacity_rps) and self.capacity_rps > 0):
            raise ConfigError(f"--capacity-rps must be > 0, got {self.capacity_rps}")
        if not (math.isfinite(self.settle_s) and 0 <= self.settle_s <= self.settle_max_s):
            raise ConfigError(f"--settle-s must be within [0, --settle-max-s], got {self.settle_s}")
        if self.predict_target is not None:
            if not 0 < self.predict_target <= 1 or self.predict_sync_s <= 0 or self.predict_window_s < 0:
                raise ConfigError("--predict is a utilisation target in (0, 1]; --predict-sync-s > 0, window >= 0")
            if self.capacity_rps is None and self.capacity_dir is None:
                raise ConfigError("--predict needs one replica's saturation: --capacity DIR or --capacity-rps")
        if self.capacity_rps is not None and self.capacity_dir is not None:
            raise ConfigError("give one replica's saturation once: --capacity DIR or --capacity-rps")
        self.objective()
        return self

    def capacity(self) -> float | None:
        """One replica's saturation: given, or read from a ``find`` folder (``ConfigError`` if it has none)."""
        if self.capacity_dir is None:
            return self.capacity_rps
        path = Path(self.capacity_dir) / SUMMARY_FILE
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"--capacity {self.capacity_dir}: cannot read {SUMMARY_FILE}: {e}") from None
        sat = doc.get("saturation_rps") if isinstance(doc, dict) else None
        if doc.get("kind") != "find" or not isinstance(sat, (int, float)) or doc.get("lower_bound"):
            raise ConfigError(f"--capacity {self.capacity_dir}: not a find folder with a saturation point")
        return float(sat)


@dataclass(frozen=True)
class ScaleResult:
    """A finished scale test: ``summary.json`` (with its ``scale`` block) and the folder."""

    summary: dict[str, Any]
    out_dir: Path

    @property
    def scale(self) -> dict[str, Any]:
        block: dict[str, Any] = self.summary[SCALE_KEY]
        return block


def _prediction(
    options: ScaleOptions, block: dict[str, Any], intended: Any, metric: str, limit_ms: float, capacity_rps: float
) -> dict[str, Any]:
    """``--predict``: the model's seconds over the objective for the policy, or why there is none."""
    before, peak = block["replicas_before"], block["replicas_peak"]
    delay = options.predict_delay_s
    if delay is None and block["time_to_replicas_s"] is not None:
        delay = block["time_to_replicas_s"] - (block["time_to_desired_s"] or 0.0)
    if before is None or delay is None:
        return {"error": "no replica count before the step, or no measured delay (give --predict-delay-s)"}
    out = predict(
        intended, options.phases(), metric, limit_ms, capacity_rps=capacity_rps, replicas_before=int(before),
        max_replicas=options.predict_max or int(peak or before), target=options.predict_target or 1.0,
        delay_s=max(0.0, delay), sync_s=options.predict_sync_s, down_window_s=options.predict_window_s,
    )  # fmt: skip
    out["measured_seconds_over_slo"] = block["seconds_over_slo"]
    return out


def scale_test(
    target: Target,
    source: ReplicaSource,
    options: ScaleOptions,
    *,
    load: LoadOptions | None = None,
    out: Path | str | None = None,
    html: bool = False,
    on_event: OnEvent | None = None,
    stop: threading.Event | None = None,
) -> ScaleResult:
    """Run the load shape of ``options`` against ``target`` while reading ``source`` once a second.

    Raises ``ConfigError`` before any load for bad options, an unreadable source or a query without series."""
    options = options.validate()
    metric, limit_ms = options.objective()
    load = (load or LoadOptions()).validate()
    if load.ray is not None:
        raise ConfigError("scale-test runs its load from this host (no --ray)")
    require_generator(load)
    capacity_rps = options.capacity()
    plan = options.stages()
    check_plan_fits(plan, descending=True)
    first = check(source)
    say(on_event, f"replicas from {source.name}: {first.ready:g} ready" + (
        f", {first.desired:g} desired" if first.desired is not None else ""))  # fmt: skip
    settled = True
    if options.settle_s > 0:
        say(
            on_event,
            f"waiting for the replica count to hold {options.settle_s:g} s (at most {options.settle_max_s:g} s)",
        )
        settled, _ = settle(source, options.settle_s, options.settle_max_s, options.every_s, stop)
        if not settled:
            say(
                on_event, f"the replica count still changed after {options.settle_max_s:g} s: testing anyway", "warning"
            )
    announce_target(target, on_event)
    prepared = prepare(target, load.max_inflight, seed=load.seed, grpc_connections=load.grpc_connections)
    config = RunConfig(load=load, rules=VerdictRules())
    out_dir = Path(out) if out is not None else default_out("scale")
    session = Session(prepared, config, out_dir, on_event=on_event, stop=stop)
    watcher = ReplicaWatcher(source, options.every_s).start()
    try:
        seg = session.measure(plan, purpose="scale", title="scale-test", descending=True)
    finally:
        readings = watcher.stop()
    t0 = seg.generator.get("t0_monotonic")
    if not isinstance(t0, (int, float)):
        raise ConfigError("the segment did not record its clock's origin: the replica readings cannot be placed")
    points = [ReplicaPoint(r.mono_s - t0, r.ready, r.desired, r.error) for r in readings]
    rec = seg.records
    latency = request_latency(rec.intended, rec.done, rec.ok_mask())
    block = scale_block(
        rec.intended, latency, options.phases(), metric, limit_ms, points,
        source=source.name, capacity_rps=capacity_rps,
    )  # fmt: skip
    if options.predict_target is not None and capacity_rps is not None:
        block["predict"] = _prediction(options, block, rec.intended, metric, limit_ms, capacity_rps)
    if not settled:
        block["notes"].append(f"the replica count had not settled ({options.settle_s:g} s unchanged) before the load")
    if seg.interrupted:
        block["notes"].append("the run was interrupted: the figures cover what was measured")
    session.results.header[SCALE_KEY] = block
    write_header(session.out_dir, session.results)
    summary = write_all(session.out_dir, session.results, html=html)
    summary[SCALE_KEY] = block
    folder = session.folder
    (folder / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=str))
    if html:
        from satpoint.reports.html.scale import write_scale_html

        write_scale_html(block, folder / SCALE_HTML)
    return ScaleResult(summary, folder)
