"""Coordinated omission, measured: open loop vs closed loop against a server that freezes now and then.

``run_co_demo`` starts ``satpoint sim`` (a synthetic OIP server that freezes for ``pause_s`` every
``pause_every_s`` seconds, far below its capacity otherwise) on a free loopback port, runs an
open-loop constant-rate test and a closed-loop test whose users reach about the same rate while the
server answers, and writes both results folders, ``comparison.json`` and one ``report.html``
overlaying the two runs.  The server is stopped by its PID when the demo ends, fails or is interrupted.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from satpoint.config import LoadOptions, RunConfig
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.engine.closed_loop import ClosedLoopOptions, run_closed_loop
from satpoint.engine.runner import FactoryBuilder
from satpoint.metrics.documents import ComparisonDoc, write_document
from satpoint.plan import Stage
from satpoint.procedures.progress import OnEvent, say
from satpoint.procedures.session import Session
from satpoint.reports.files.results import write_all
from satpoint.reports.terminal.co_demo import comparison
from satpoint.servers.sim.process import SimServer

COMPARISON_FILE = ComparisonDoc.FILE


@dataclass(frozen=True)
class CoDemoConfig:
    rate_rps: float = 200.0
    duration_s: float = 22.0
    users: int = 2
    think_ms: float | None = None  # None: chosen so the users reach rate_rps while the server answers
    slots: int = 200
    service_ms: float = 5.0
    pause_every_s: float = 4.0
    pause_s: float = 1.0
    html: bool = True

    def validate(self) -> CoDemoConfig:
        if self.rate_rps <= 0 or self.duration_s < 4 or self.users < 1 or self.slots < 1 or self.service_ms <= 0:
            raise ValueError("--rate > 0, --duration >= 4, --users >= 1, --slots >= 1, --service-ms > 0 are required")
        if not 0 < self.pause_s < self.pause_every_s:
            raise ValueError("--pause-s must be > 0 and shorter than --pause-every")
        if self.think_ms is not None and self.think_ms < 0:
            raise ValueError("--think-ms must be >= 0")
        if self.rate_rps * self.service_ms / 1000 > 0.5 * self.slots:
            raise ValueError("--rate must stay well below the server's capacity (slots / service time)")
        return self


@dataclass
class CoDemoOutcome:
    comparison: dict[str, Any]
    open_dir: Path
    closed_dir: Path
    report: Path | None
    interrupted: bool
    notes: list[str] = field(default_factory=list)

    @property
    def document(self) -> ComparisonDoc:
        """``comparison`` typed (``comparison.json``'s model)."""
        return ComparisonDoc.model_validate(self.comparison)


def calibrate_service_s(build: FactoryBuilder, payload_count: int) -> float | None:
    """Median answer time of one user sending back to back for half a second (the closed loop's own
    per-request time, transport included)."""
    out = run_closed_loop(
        build, ClosedLoopOptions(users=1, duration_s=0.5, drain_s=2.0, payload_count=payload_count), lead_s=0.05
    )
    rec = out.records
    ok = rec.ok_mask()
    if not ok.any():
        return None
    return float(np.median(rec.service_s()[ok]))


def run_co_demo(
    cfg: CoDemoConfig, out_dir: Path, *, stop: threading.Event | None = None, on_event: OnEvent | None = None
) -> CoDemoOutcome:
    """Start the pausing sim, run the open and the closed loop against it, write everything."""
    cfg.validate()
    stop = stop or threading.Event()
    open_dir, closed_dir = out_dir / "open-loop", out_dir / "closed-loop"
    notes: list[str] = []
    sim = SimServer(cfg.slots, cfg.service_ms, pause_every_s=cfg.pause_every_s, pause_s=cfg.pause_s)
    with sim:
        say(
            on_event,
            f"satpoint sim at {sim.url} (pid {sim.pid}): {cfg.slots} slots x {cfg.service_ms:g} ms "
            f"(capacity {cfg.slots / cfg.service_ms * 1000:,.0f} rps), frozen {cfg.pause_s:g} s every "
            f"{cfg.pause_every_s:g} s",
        )
        spec = Target(url=sim.url, model=sim.model)

        # 1. open loop: a fixed schedule, latency from the intended send time
        load = LoadOptions(arrival="constant", timeout_s=30.0, drain_s=5.0)
        say(on_event, f"1/2 open loop: {cfg.rate_rps:g} rps for {cfg.duration_s:g} s")
        opened = Session(
            prepare(spec, load.max_inflight), RunConfig(load=load, demo="co"), open_dir, on_event=on_event, stop=stop
        )
        opened.measure([Stage(cfg.rate_rps, 0.0, cfg.duration_s)], title="open loop")
        open_summary = write_all(open_dir, opened.results, html=False)
        if stop.is_set():
            return CoDemoOutcome({}, open_dir, closed_dir, None, True, ["interrupted during the open loop"])

        # 2. closed loop: users that wait for their answers
        closed_prepared = prepare(spec, cfg.users)
        payloads = len(closed_prepared.payload_docs)
        think_ms = cfg.think_ms
        svc_s: float | None = None
        if think_ms is None:
            svc_s = calibrate_service_s(closed_prepared.builder, payloads)
            per_user_s = cfg.users / cfg.rate_rps
            think_ms = max(0.0, (per_user_s - (svc_s or cfg.service_ms / 1000)) * 1000)
            if svc_s is not None and svc_s > per_user_s:
                notes.append(
                    f"{cfg.users} users cannot reach {cfg.rate_rps:g} rps (one answer takes {svc_s * 1000:.2f} ms); "
                    "add users"
                )
        copts = ClosedLoopOptions(
            users=cfg.users, duration_s=cfg.duration_s, think_s=think_ms / 1000, drain_s=5.0, payload_count=payloads
        )
        say(
            on_event,
            f"2/2 closed loop: {cfg.users} users, think time {think_ms:.2f} ms"
            + (f" (one answer takes {svc_s * 1000:.2f} ms)" if svc_s else "")
            + f", for {cfg.duration_s:g} s",
        )
        ccfg = RunConfig(
            mode="closed_loop", load=replace(load, max_inflight=cfg.users), demo="co", closed_loop=copts.describe()
        )
        closed = Session(closed_prepared, ccfg, closed_dir, on_event=on_event, stop=stop)
        closed.measure_closed(copts)
        closed_summary = write_all(closed_dir, closed.results, html=False)

    cmp = comparison(
        open_summary,
        closed_summary,
        rate_rps=cfg.rate_rps,
        users=cfg.users,
        think_ms=round(think_ms, 4),
        duration_s=cfg.duration_s,
        pause_every_s=cfg.pause_every_s,
        pause_s=cfg.pause_s,
        slots=cfg.slots,
        service_ms=cfg.service_ms,
        open_dir=str(open_dir),
        closed_dir=str(closed_dir),
    )
    report: Path | None = None
    if cfg.html:
        from satpoint.reports.html.report import write_report

        report = write_report([open_dir, closed_dir], out_dir / "report.html")
    cmp["report"] = str(report) if report else None
    cmp["notes"] = notes
    cmp = {**ComparisonDoc.envelope(), **cmp}
    write_document(out_dir / COMPARISON_FILE, ComparisonDoc.model_validate(cmp))
    return CoDemoOutcome(cmp, open_dir, closed_dir, report, stop.is_set(), notes)
