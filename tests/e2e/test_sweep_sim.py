"""``satpoint sweep`` on the synthetic server, whose capacity per point is known (slots / service time):
the sweep must rank the points by it, name the winner only beyond the noise, keep everything when
interrupted, and resume without measuring a finished point again."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.config import FindOptions, LoadOptions
from satpoint.experiments.sweep import SWEEP_FILE, SweepConfig, SweepState, run_sweep
from satpoint.experiments.sweep_servers import BaseServer
from satpoint.procedures.progress import Event, Message, SegmentStarted
from tests.documents import assert_documents_valid

pytestmark = pytest.mark.slow

SERVICE_MS = 10.0  # capacity = workers × 100 rps


def _config(sets: tuple[str, ...], remeasure_top: int = 2) -> SweepConfig:
    return SweepConfig(
        sets=sets,
        server=BaseServer(kind="sim", service_ms=SERVICE_MS),
        remeasure_top=remeasure_top,
        find=FindOptions(
            precision=0.25,
            # from 60 rps, not a quarter of one request's service time (25 rps): 100 rps is bracketed at the
            # second stage, 300 rps at the fourth; the figures examined are the answers, within the precision
            start_rps=60.0,
            profile=False,
            budget_s=40.0,
            ramp_s=0.3,
            min_hold_s=1.0,
            max_hold_s=1.5,
            min_requests=100,
            cooldown_s=0.0,  # no fixed rest: the sim drains at once, and the idle probes still check it
        ),
        load=LoadOptions(drain_s=1.0),
    )


def test_sweep_ranks_points_by_known_capacity_and_resumes_after_an_interruption(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    cfg = _config(("workers=1,3",))
    stop = threading.Event()
    started: list[str] = []

    def on_event(e: Event) -> None:
        if isinstance(e, Message) and e.text.startswith("── ["):
            started.append(e.text)
        # cut the sweep off inside the second point's search (like Ctrl-C)
        if isinstance(e, SegmentStarted) and len(started) == 2:
            stop.set()

    first = run_sweep(cfg, out, stop=stop, on_event=on_event)
    assert first.interrupted
    doc = json.loads((out / SWEEP_FILE).read_text())
    assert doc["stopped"].startswith("interrupted")
    statuses = [(m["point"], m["status"]) for m in doc["measurements"]]
    assert statuses == [("p01", "done"), ("p02", "interrupted")]
    kept = doc["measurements"][0]
    assert (out / kept["dir"] / "summary.json").is_file()
    assert assert_documents_valid(out)["sweep.json"] == "sweep"  # and the cut-off measurement's folder

    # resume: the finished measurement is reused as it is, the cut-off one measured again
    state = SweepState.resume(out)
    resumed = run_sweep(state.cfg, out, state=state)
    assert not resumed.interrupted and "stopped" not in resumed.doc
    ms = resumed.doc["measurements"]
    assert ms[0] == kept
    assert all(m["status"] == "done" for m in ms)
    assert sorted((m["point"], m["repeat"]) for m in ms) == [("p01", 1), ("p01", 2), ("p02", 1), ("p02", 2)]
    assert any(p.name.endswith(tuple("0123456789")) and "-cut-" in p.name for p in (out / "points").rglob("*"))

    rows = {r["id"]: r for r in resumed.doc["points"]}
    one, three = rows["p01"]["saturation_rps"]["median"], rows["p02"]["saturation_rps"]["median"]
    assert 70 <= one <= 115, one  # capacity 100 rps, within the search's precision
    assert 220 <= three <= 330, three  # capacity 300 rps
    best = resumed.doc["best"]["saturation"]
    assert best["point"] == "p02" and best["separated"] and best["repeated"]
    assert rows["p02"]["scaling"]["ideal"] == 3.0  # the sim's slots cost no CPU
    assert resumed.doc["order"] == ["p02", "p01"]
    for name in ("sweep.csv", "report.html"):
        assert (out / name).stat().st_size > 0
    csv_lines = (out / "sweep.csv").read_text().splitlines()
    assert csv_lines[0].startswith("knob.workers,id,label") and len(csv_lines) == 3
    kinds = assert_documents_valid(out)
    assert sorted(set(kinds.values())) == ["find-summary", "results", "sweep"]


def test_cli_checks_the_grid_before_starting_anything(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["sweep", "--set", "wokers=1,2", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2
    assert "unknown knob 'wokers'" in r.output and "max_batch_size" in r.output
    assert not (tmp_path / "x").exists()
    r = runner.invoke(app, ["sweep", "--set", "workers=0,1,2,4", "--set", "protocol=rest,grpc", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "p08  workers=4 protocol=grpc" in r.output
    assert "8 points × 1 repeat + up to 3 re-measurements" in r.output
    r = runner.invoke(app, ["sweep", "--resume", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = runner.invoke(app, ["sweep", "--resume", str(tmp_path), "--set", "workers=1"])
    assert r.exit_code == 2 and "sweep --resume does not use --set" in r.output
    r = runner.invoke(app, ["sweep", "--server", "sim", "--set", "max_batch_size=2"])
    assert r.exit_code == 2 and "service_ms" in r.output and "unknown knob 'max_batch_size'" in r.output
    r = runner.invoke(app, ["sweep", "--set", "workers=1", "--objective", "p99"])
    assert r.exit_code == 2 and "--at-rps" in r.output


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    """A reconfigure command that fails marks that point failed, with the command's output, and the next
    point is still measured (remote mode against a sim started here)."""
    from satpoint.servers.sim.process import SimServer

    with SimServer(slots=2, service_ms=SERVICE_MS) as sim:
        cfg = SweepConfig(
            sets=("mode=ok,broken",),
            server=BaseServer(
                kind="remote",
                url=sim.url,
                model="sim",
                reconfigure="test {mode} = ok || (echo 'cannot apply' {mode}; exit 3)",
                ready_timeout_s=10.0,
                server_cores=2,
            ),
            remeasure_top=0,
            # a 6 s search budget: its first two stages (each counted as 0.3 s ramp, 1.5 s hold and 1.7 s
            # of overhead); the figure examined is rps_per_core, which the first stable stage gives
            find=replace(_config(()).find, budget_s=6.0),
            load=LoadOptions(drain_s=1.0),
        )
        events: list[Any] = []
        outcome = run_sweep(cfg.validate(), tmp_path / "s", on_event=events.append)
    ms = outcome.doc["measurements"]
    assert [m["status"] for m in ms] == ["done", "failed"]
    assert (
        ms[0]["reconfigure"]["exit_code"] == 0
        and ms[0]["reconfigure"]["command"] == "test ok = ok || (echo 'cannot apply' ok; exit 3)"
    )
    assert "exited with 3" in ms[1]["error"] and "cannot apply broken" in ms[1]["error"]
    assert outcome.doc["points"][0]["rps_per_core"] is not None


def test_a_remote_https_server_with_a_private_ca_is_swept(tmp_path: Path) -> None:
    """--ca-cert reaches every call a remote sweep makes (readiness, the search, the cool-down probes);
    without it the certificate is refused and the point fails with the reason."""
    from satpoint.servers.sim.process import SimServer
    from tests.certs import make_pki

    pki = make_pki(tmp_path / "pki")
    quick = ["--precision", "0.5", "--ramp", "0.3", "--min-hold", "1", "--max-hold", "1.5", "--min-requests", "100"]
    # a sweep plans its finds' budgets (--find-budget-s 9 is raised to what one search needs), so the search
    # runs to its precision: 0.5, bracketed at its first refinement (a stage and a 5 s recovery fewer than at
    # 0.25); examined are a figure from it, every stage free of errors, and where the certificate went
    runner = CliRunner()
    with SimServer(slots=1, service_ms=SERVICE_MS, tls_cert=pki.server_cert, tls_key=pki.server_key) as sim:
        assert sim.url.startswith("https://")
        common = ["sweep", "--url", sim.url, "--model", "sim", "--set", "protocol=rest", "--remeasure-top", "0"]
        trusted = runner.invoke(
            app, [*common, *quick, "--find-budget-s", "9", "--ca-cert", str(pki.ca), "--out", str(tmp_path / "ok")]
        )
        untrusted = runner.invoke(app, [*common, *quick, "--out", str(tmp_path / "refused")])
    assert trusted.exit_code == 0, trusted.output
    doc = json.loads((tmp_path / "ok" / SWEEP_FILE).read_text())
    (m,) = doc["measurements"]
    assert m["status"] == "done" and m["figures"]["saturation_rps"], m
    assert doc["config"]["server"]["ca_cert"] == str(pki.ca)
    summary = json.loads((tmp_path / "ok" / m["dir"] / "summary.json").read_text())
    assert all(s["error_rate"] == 0 for s in summary["stages"])
    assert untrusted.exit_code == 1, untrusted.output
    (m,) = json.loads((tmp_path / "refused" / SWEEP_FILE).read_text())["measurements"]
    assert m["status"] == "failed" and "certificate verification failed" in m["error"]
