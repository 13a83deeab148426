"""``satpoint demo``: demonstrations that need nothing but satpoint itself.

``satpoint demo co`` shows coordinated omission.  It starts ``satpoint sim`` (a synthetic OIP server
that freezes for ``--pause-s`` every ``--pause-every`` seconds, far below its capacity otherwise) on a
free loopback port, runs an open-loop constant-rate test and a closed-loop test whose users reach
about the same rate while the server answers, and prints one side-by-side table and what it means.
Both results folders, ``comparison.json`` and one ``report.html`` overlaying the two runs (latency
percentile spectra included) are written under ``--out``.  The server is stopped by its PID when the
demo ends, fails or is interrupted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console

from satpoint.analysis.verdicts import VerdictRules
from satpoint.cli.common import EXIT_INTERRUPTED, EXIT_OK, config_dict, console, default_out, fail, guarded
from satpoint.cli.common import interruptible as _interruptible
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.engine.closed_loop import ClosedLoopOptions, closed_loop_segment, run_closed_loop
from satpoint.errors import TargetUnreachable
from satpoint.metrics.records import Outcome
from satpoint.metrics.results import Results, append_segment, new_header, write_header
from satpoint.plan import Stage
from satpoint.reports.co_demo import ClosedLoopView, comparison, comparison_table, explanation
from satpoint.reports.files import write_all
from satpoint.reports.terminal import LiveView
from satpoint.session import LoadOptions, run_segment

demo_app = typer.Typer(no_args_is_help=True, help="Demonstrations on a built-in synthetic server.")

_LINE = re.compile(r"listening on (http://\S+)")
COMPARISON_FILE = "comparison.json"


# the synthetic server as a subprocess ---------------------------------------------------------------------
@dataclass
class SimProcess:
    proc: subprocess.Popen[bytes]
    url: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM by PID, then SIGKILL if it has not exited within ``timeout_s``."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=timeout_s)
            except ProcessLookupError:
                pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextmanager
def sim_process(*args: str, startup_timeout_s: float = 20.0) -> Iterator[SimProcess]:
    """Start ``python -m satpoint.servers.sim --port 0 ARGS`` on loopback; stopped by PID on exit.

    It runs in its own session, so a Ctrl-C in the terminal reaches satpoint only (which stops it).
    """
    cmd = [sys.executable, "-m", "satpoint.servers.sim", "--host", "127.0.0.1", "--port", "0", *args]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        sim = SimProcess(proc, "")
        try:
            lines: list[bytes] = []
            assert proc.stdout is not None
            stdout = proc.stdout
            reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
            reader.start()
            reader.join(startup_timeout_s)
            m = _LINE.search(lines[0].decode(errors="replace")) if lines else None
            if m is None:
                sim.stop()
                log.seek(0)
                tail = log.read()[-2000:].decode(errors="replace").strip()
                raise TargetUnreachable(
                    f"satpoint sim did not start within {startup_timeout_s:g} s (exit code {proc.poll()}): {tail}"
                )
            sim.url = m.group(1)
            yield sim
        finally:
            sim.stop()


# the coordinated-omission demo ------------------------------------------------------------------------------
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

    def validate(self) -> None:
        if self.rate_rps <= 0 or self.duration_s < 4 or self.users < 1 or self.slots < 1 or self.service_ms <= 0:
            raise ValueError("--rate > 0, --duration >= 4, --users >= 1, --slots >= 1, --service-ms > 0 are required")
        if not 0 < self.pause_s < self.pause_every_s:
            raise ValueError("--pause-s must be > 0 and shorter than --pause-every")
        if self.think_ms is not None and self.think_ms < 0:
            raise ValueError("--think-ms must be >= 0")
        if self.rate_rps * self.service_ms / 1000 > 0.5 * self.slots:
            raise ValueError("--rate must stay well below the server's capacity (slots / service time)")


@dataclass
class CoDemoOutcome:
    comparison: dict[str, Any]
    open_dir: Path
    closed_dir: Path
    report: Path | None
    interrupted: bool
    notes: list[str] = field(default_factory=list)


def calibrate_service_s(build: Any, payload_count: int) -> float | None:
    """Median answer time of one user sending back to back for half a second (the closed loop's own
    per-request time, transport included)."""
    out = run_closed_loop(
        build, ClosedLoopOptions(users=1, duration_s=0.5, drain_s=2.0, payload_count=payload_count), lead_s=0.05
    )
    rec = out.records
    ok = rec.outcome == Outcome.OK
    if not ok.any():
        return None
    return float(np.median(rec.service_s()[ok]))


def run_co_demo(
    cfg: CoDemoConfig,
    out_dir: Path,
    stop: threading.Event,
    con: Console,
    log: Callable[[str], None] | None = None,
) -> CoDemoOutcome:
    """Start the pausing sim, run the open and the closed loop against it, write everything."""
    cfg.validate()
    say = log or con.print
    open_dir, closed_dir = out_dir / "open-loop", out_dir / "closed-loop"
    notes: list[str] = []
    rules = VerdictRules()
    sim_args = [
        "--slots", str(cfg.slots), "--service-ms", f"{cfg.service_ms:g}",
        "--pause-every", f"{cfg.pause_every_s:g}", "--pause-s", f"{cfg.pause_s:g}",
    ]  # fmt: skip
    with sim_process(*sim_args) as sim:
        say(
            f"satpoint sim at {sim.url} (pid {sim.pid}): {cfg.slots} slots x {cfg.service_ms:g} ms "
            f"(capacity {cfg.slots / cfg.service_ms * 1000:,.0f} rps), frozen {cfg.pause_s:g} s every "
            f"{cfg.pause_every_s:g} s"
        )
        spec = Target(url=sim.url, model="sim")

        # 1. open loop: a fixed schedule, latency from the intended send time
        opts = LoadOptions(arrival="constant", max_inflight=1024, timeout_s=30.0, drain_s=5.0, warm_connections=16)
        prepared = prepare(spec, opts.max_inflight)
        stages = [Stage(cfg.rate_rps, 0.0, cfg.duration_s)]
        say(f"1/2 open loop: {cfg.rate_rps:g} rps for {cfg.duration_s:g} s")
        open_results = Results(new_header("run", config_dict(opts, rules, demo="co"), spec.describe(), time.time()))
        open_results.header["target"]["metadata"] = prepared.metadata
        write_header(open_dir, open_results)
        with LiveView(con, stages, "open loop") as view:
            seg = run_segment(prepared, stages, opts, purpose="run", on_snapshot=view.update, stop_event=stop)
        append_segment(open_dir, open_results, seg)
        open_summary = write_all(open_dir, open_results, html=False)
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
            f"2/2 closed loop: {cfg.users} users, think time {think_ms:.2f} ms"
            + (f" (one answer takes {svc_s * 1000:.2f} ms)" if svc_s else "")
            + f", for {cfg.duration_s:g} s"
        )
        ccfg = config_dict(opts, rules, demo="co", closed_loop=copts.describe())
        ccfg["mode"] = "closed_loop"
        ccfg["load"]["max_inflight"] = cfg.users
        closed_results = Results(new_header("run", ccfg, spec.describe(), time.time()))
        closed_results.header["target"]["metadata"] = closed_prepared.metadata
        write_header(closed_dir, closed_results)
        with ClosedLoopView(con, cfg.users, cfg.duration_s) as cview:
            cseg = closed_loop_segment(closed_prepared.builder, copts, on_snapshot=cview.update, stop_event=stop)
        append_segment(closed_dir, closed_results, cseg)
        closed_summary = write_all(closed_dir, closed_results, html=False)

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
        try:
            from satpoint.reports.html import write_report
        except ImportError:
            notes.append("report.html skipped: the HTML report module is not available in this build")
        else:
            report = write_report([open_dir, closed_dir], out_dir / "report.html")
    cmp["report"] = str(report) if report else None
    cmp["notes"] = notes
    (out_dir / COMPARISON_FILE).write_text(json.dumps(cmp, indent=2, default=str))
    return CoDemoOutcome(cmp, open_dir, closed_dir, report, stop.is_set(), notes)


def print_co_demo(con: Console, outcome: CoDemoOutcome, out_dir: Path) -> None:
    cmp = outcome.comparison
    con.print()
    con.print(comparison_table(cmp, title="coordinated omission: the same pausing server, measured two ways"))
    o, c = cmp["open_loop"], cmp["closed_loop"]
    con.print(
        f"steady windows: {o['window_s'][0]:g}-{o['window_s'][1]:g} s of each run; open-loop latency = done − "
        "intended send time, closed-loop latency = done − actual send (they coincide in a closed loop)"
    )
    con.print()
    for line in explanation(cmp):
        con.print(line)
    con.print()
    for note in outcome.notes:
        con.print(f"[yellow]note[/] {note}")
    con.print(f"results: {outcome.open_dir} and {outcome.closed_dir}; table: {out_dir / COMPARISON_FILE}")
    if outcome.report is not None:
        con.print(f"report (both runs overlaid, latency percentile spectra): {outcome.report}")
    if c.get("latency_ms", {}).get("p99") is None or o.get("latency_ms", {}).get("p99") is None:
        con.print("[bold red]WARNING[/] a run measured nothing in its steady window")


@demo_app.command("co")
def co(
    rate: Annotated[float, typer.Option(help="open-loop rate, rps (well below the server's capacity)")] = 200.0,
    duration: Annotated[float, typer.Option(help="seconds per run")] = 22.0,
    users: Annotated[int, typer.Option(help="closed-loop users")] = 2,
    think_ms: Annotated[
        float | None, typer.Option(help="closed-loop think time (default: chosen to reach --rate)")
    ] = None,
    slots: Annotated[int, typer.Option(help="server slots")] = 200,
    service_ms: Annotated[float, typer.Option(help="server service time, ms")] = 5.0,
    pause_every: Annotated[float, typer.Option(help="the server freezes every this many seconds")] = 4.0,
    pause_s: Annotated[float, typer.Option(help="... for this long")] = 1.0,
    out: Annotated[Path | None, typer.Option(help="output folder (default results/co-demo-TIMESTAMP)")] = None,
    html: Annotated[bool, typer.Option(help="write report.html")] = True,
) -> None:
    """Coordinated omission: open loop vs closed loop against a server that freezes now and then."""

    def body() -> int:
        cfg = CoDemoConfig(
            rate_rps=rate,
            duration_s=duration,
            users=users,
            think_ms=think_ms,
            slots=slots,
            service_ms=service_ms,
            pause_every_s=pause_every,
            pause_s=pause_s,
            html=html,
        )
        try:
            cfg.validate()
        except ValueError as e:
            raise fail(str(e)) from None
        out_dir = out or default_out("co-demo")
        with _interruptible() as stop:
            outcome = run_co_demo(cfg, out_dir, stop, console)
        if outcome.interrupted or not outcome.comparison:
            console.print(f"interrupted; results so far in {out_dir}")
            return EXIT_INTERRUPTED
        print_co_demo(console, outcome, out_dir)
        return EXIT_OK

    guarded(body)
