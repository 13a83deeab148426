"""``--realtime N``: the generator's event loop at SCHED_FIFO while a shard runs, refused with a reason when
the machine does not allow it, and the calling thread's own policy back afterwards."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import satpoint.engine.realtime as realtime
from satpoint.cli.main import app
from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.realtime import RealtimeUnavailable, check_realtime, enter_realtime
from satpoint.metrics.records import Outcome
from tests.engine.test_dispatcher import shard


def _allowed() -> bool:
    try:
        check_realtime(1)
    except RealtimeUnavailable:
        return False
    return True


@pytest.mark.skipif(not _allowed(), reason="SCHED_FIFO is not allowed to this user here")
def test_a_shard_sends_at_sched_fifo_and_the_thread_gets_its_policy_back() -> None:
    before = os.sched_getscheduler(0)
    seen: list[tuple[int, int]] = []

    def script(idx: int) -> tuple[float, Outcome, int]:
        seen.append((os.sched_getscheduler(0), os.sched_getparam(0).sched_priority))
        return 0.001, Outcome.OK, 200

    rec, _, _, _ = shard(np.arange(5) * 0.002, script, DispatchOptions(timeout_s=5.0, drain_s=1.0, realtime_priority=7))
    assert (rec.outcome == Outcome.OK).all()
    assert set(seen) == {(os.SCHED_FIFO, 7)}  # every send ran on the real-time thread
    assert os.sched_getscheduler(0) == before != os.SCHED_FIFO


def test_priority_zero_changes_nothing() -> None:
    before = os.sched_getscheduler(0)
    enter_realtime(0)()
    assert os.sched_getscheduler(0) == before


def test_no_permission_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(realtime.os, "sched_setscheduler", refuse)
    with pytest.raises(RealtimeUnavailable, match=r"CAP_SYS_NICE.*ulimit -r"):
        check_realtime(5)


def test_without_rt_throttling_it_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    off = tmp_path / "sched_rt_runtime_us"
    off.write_text("-1\n")
    monkeypatch.setattr(realtime, "_RT_RUNTIME", off)
    with pytest.raises(RealtimeUnavailable, match="throttling is off"):
        check_realtime(5)


def test_the_cli_refuses_before_anything_is_sent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    off = tmp_path / "sched_rt_runtime_us"
    off.write_text("-1\n")
    monkeypatch.setattr(realtime, "_RT_RUNTIME", off)
    dead = ["--url", "http://127.0.0.1:9", "--model", "m", "--stage", "10:0:1", "--out", str(tmp_path / "o")]
    r = CliRunner().invoke(app, ["run", *dead, "--realtime", "5"])
    assert r.exit_code == 2 and "throttling is off" in " ".join(r.output.split()), r.output
    assert not (tmp_path / "o").exists()
    r = CliRunner().invoke(app, ["run", *dead, "--realtime", "100"])
    assert r.exit_code == 2 and "--realtime" in r.output
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp\n0.0\n0.5\n1.0\n")
    replay = ["run", "--url", "http://127.0.0.1:9", "--model", "m", "--trace", str(trace), "--out", str(tmp_path / "t")]
    r = CliRunner().invoke(app, [*replay, "--realtime", "5"])
    assert r.exit_code == 2 and "throttling is off" in " ".join(r.output.split()), r.output
    assert not (tmp_path / "t").exists()


def test_the_pacing_options_reach_the_load_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_run(*_: Any, load: Any, **__: Any) -> Any:
        seen["load"] = load
        raise ValueError("stop here")

    monkeypatch.setattr("satpoint.cli.main.api.run", fake_run)
    args = ["run", "--url", "http://127.0.0.1:9", "--model", "m", "--stage", "10:0:1"]
    r = CliRunner().invoke(app, [*args, "--wake-window-ms", "0.5", "--realtime", "3"])
    assert r.exit_code == 2 and "stop here" in r.output
    assert seen["load"].wake_window_ms == 0.5 and seen["load"].realtime_priority == 3
    assert seen["load"].describe()["realtime_priority"] == 3
    r = CliRunner().invoke(app, [*args, "--wake-window-ms", "-1"])
    assert r.exit_code == 2 and "'--wake-window'" in r.output  # the old spelling's value, refused as the new one
    closed = ["run", "--url", "http://127.0.0.1:9", "--model", "m", "--users", "2", "--duration", "1"]
    r = CliRunner().invoke(app, [*closed, "--realtime", "3"])
    assert r.exit_code == 2 and "not a closed loop" in " ".join(r.output.split()), r.output
