"""A sweep survives what goes wrong in one measurement: a full disk or a library's RuntimeError fails that
measurement and the next one is still measured; a reconfigure command that leaves a background child
(``kubectl port-forward … &``) is done when its shell exits."""

from __future__ import annotations

import errno
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from satpoint.errors import SatpointError
from satpoint.experiments import sweep as sweep_mod
from satpoint.experiments.reconfigure import run_reconfigure
from satpoint.experiments.sweep import SweepConfig, run_sweep
from satpoint.experiments.sweep_servers import BaseServer


def test_an_oserror_or_runtimeerror_fails_one_measurement_not_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faults = iter([OSError(errno.ENOSPC, "No space left on device"), RuntimeError("cannot schedule new futures")])

    def search_target(*args: Any, **kwargs: Any) -> Any:
        raise next(faults)

    monkeypatch.setattr(sweep_mod, "search_target", search_target)
    cfg = SweepConfig(
        sets=("protocol=rest", "batch=1,2"),
        # a remote server nobody answers at: nothing is started, nothing is sent before the search
        server=BaseServer(kind="remote", url="http://127.0.0.1:9", model="m"),
        remeasure_top=0,
    )
    outcome = run_sweep(cfg.validate(), tmp_path / "s")
    ms = outcome.doc["measurements"]
    assert [(m["point"], m["status"]) for m in ms] == [("p01", "failed"), ("p02", "failed")]
    assert "No space left on device" in ms[0]["error"] and "cannot schedule" in ms[1]["error"]
    assert not outcome.interrupted and (tmp_path / "s" / "sweep.json").is_file()


def test_a_reconfigure_command_that_leaves_a_background_child_returns_when_its_shell_exits() -> None:
    # the child keeps the command's output open for a minute; the command itself is done at once
    rec = run_reconfigure("sleep 60 & echo child $! ; echo applied {n}", {"n": 3}, stop=threading.Event(), timeout_s=20)
    pid = int(rec["output"].split()[1])
    try:
        assert rec["exit_code"] == 0 and "applied 3" in rec["output"]
        os.kill(pid, 0)  # the background child (a port-forward, say) is left running
    finally:
        os.kill(pid, signal.SIGKILL)


def test_tls_options_need_a_remote_tls_url_and_files_that_exist(tmp_path: Path) -> None:
    def cfg(**server: Any) -> SweepConfig:
        return SweepConfig(sets=("protocol=rest",), server=BaseServer(**server))

    with pytest.raises(ValueError, match="https:// or grpcs://"):
        cfg(kind="sim", insecure=True).validate()
    with pytest.raises(ValueError, match="https:// or grpcs://"):
        cfg(kind="remote", url="http://127.0.0.1:9", model="m", insecure=True).validate()
    with pytest.raises(SatpointError, match="no such file"):
        cfg(kind="remote", url="https://127.0.0.1:9", model="m", ca_cert=str(tmp_path / "none.pem")).validate()
    ok = cfg(kind="remote", url="https://127.0.0.1:9", model="m", insecure=True).validate()
    assert ok.server.tls_fields("https://127.0.0.1:9")["insecure"] and ok.server.tls_fields("http://x:1") == {}
