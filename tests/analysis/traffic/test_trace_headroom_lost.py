"""``find --trace`` against a server that crashes under a replay: the search stops there, says so, draws no
replica count from what it held before, and exits 1 (as ``find`` does for a lost target)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from satpoint.analysis.traffic.headroom import search_params
from satpoint.cli.opts.trace_opts import headroom_exit
from satpoint.endpoints.spec import Target
from satpoint.procedures.trace_headroom import find_headroom
from satpoint.reports.terminal.headroom import print_headroom
from satpoint.traffic.trace_plan import TraceOptions

T0 = 1_767_225_600.0


def _stage(verdict: str) -> SimpleNamespace:
    doc = {"index": 1, "verdict": verdict, "latency_ms": {"p50": 5.0, "p99": 9.0}, "offered_rps": 10.0}
    return SimpleNamespace(model_dump=lambda: dict(doc))


def crashing_server(monkeypatch: pytest.MonkeyPatch, crash_x: float) -> list[float]:
    """Replays sustained below ``crash_x``; the replay at ``crash_x`` or above kills the server, and every
    later replay finds it gone."""
    speeds: list[float] = []
    dead = [False]

    def run_trace(target: Any, trace: TraceOptions, **kw: Any) -> SimpleNamespace:
        speeds.append(trace.speed)
        out = Path(kw["out"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps({"stages": []}))
        dead[0] = dead[0] or trace.speed >= crash_x
        lost = SimpleNamespace(message="the target stopped answering") if dead[0] else None
        verdict = "failing" if dead[0] else "stable"
        summary = SimpleNamespace(stages=[_stage(verdict)], interrupted=False, target_lost=lost)
        return SimpleNamespace(summary=summary, out_dir=out)

    monkeypatch.setattr("satpoint.procedures.trace_headroom.run_trace", run_trace)
    monkeypatch.setattr(
        "satpoint.procedures.trace_headroom.prepare", lambda *a, **k: SimpleNamespace(latency_hint_s=None)
    )
    monkeypatch.setattr("satpoint.procedures.trace_headroom.probe_service_s", lambda p: None)
    monkeypatch.setattr("satpoint.procedures.trace_headroom.wait_until_idle", lambda *a, **k: 0.0)
    monkeypatch.setattr("satpoint.procedures.trace_headroom.announce_target", lambda *a, **k: None)
    return speeds


@pytest.mark.parametrize("confirm", [True, False])
def test_a_replay_that_crashed_the_server_ends_the_search(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, confirm: bool
) -> None:
    speeds = crashing_server(monkeypatch, crash_x=4.0)
    path = tmp_path / "t.csv"
    path.write_text("timestamp\n" + "".join(f"{T0 + k * 0.5:.3f}\n" for k in range(240)))
    found = find_headroom(
        Target("http://127.0.0.1:9", "m"), TraceOptions(path), search_params(confirm=confirm),
        budget_s=10_000.0, cooldown_s=0.0, profile=True, out=tmp_path / "out",
    )  # fmt: skip
    block = found.block
    assert speeds == [1.0, 2.0, 4.0]  # nothing replayed against a dead server
    assert block["ended"] == "target_lost" and block["lower_bound"] is True
    assert block["replicas_for_peak"] is None and block["capacity_rps"] is None
    assert block["speed"] == 2.0 and block["bracket"] == [2.0, 4.0]
    assert headroom_exit(block, stopped=False) == 1
    buf = io.StringIO()
    print_headroom(Console(file=buf, width=200), block)
    assert "stopped answering under the replay at speed 4.0" in buf.getvalue()
