"""End-to-end on the embedded Triton (PyTriton): ``satpoint find --server triton`` answers, reads Triton's
statistics per stage and leaves no process behind, also after a failed start and after Ctrl-C.

Skipped when PyTriton cannot be imported (the ``triton`` extra is not installed)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from satpoint.servers.process import TargetError
from satpoint.servers.triton.server import TritonSettings, TritonTarget, pytriton_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.triton,
    pytest.mark.skipif(not pytriton_available(), reason="PyTriton is not installed (pip install 'satpoint[triton]')"),
]
FAST = ["--ramp", "1", "--min-hold", "3", "--max-hold", "4", "--min-requests", "300", "--precision", "0.2"]


def processes_using(folder: str) -> list[str]:
    """Live processes whose command line names ``folder`` (Triton's, its stubs', the child's)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and folder in " ".join(p.info["cmdline"] or []):
                out.append(f"{p.pid} {' '.join(p.info['cmdline'])[:120]}")
        except psutil.Error:
            pass
    return out


def wait_for_server(out: Path, proc: subprocess.Popen[str], timeout_s: float = 90) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            server = json.loads((out / "results.json").read_text()).get("server") or {}
            if server.get("pid"):
                return dict(server)
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    raise AssertionError(f"the embedded Triton did not start: {proc.stderr.read() if proc.stderr else ''}")


def tree_of(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [root.pid, *(c.pid for c in root.children(recursive=True))]
    except psutil.Error:
        return []


def gone(pids: list[int], settle_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + settle_s
    while True:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_find_on_embedded_triton(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "satpoint", "find", "--server", "triton", "--max-batch-size", "16",
            "--out", str(tmp_path), "--budget-s", "25", "--no-profile", "--no-confirm", *FAST]  # fmt: skip
    # --budget-s 25: the search's first stages (a stage counts as its ramp and hold plus 9.7 s of segment
    # overhead with the statistics scrapes); examined are the server, its statistics, its cleanup.  With 17 s
    # one short stage ran and its statistics scrapes did not bracket its steady window once in CI
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server = wait_for_server(tmp_path, proc)
        time.sleep(1.0)
        tree = tree_of(int(str(server["pid"])))
        names = {psutil.Process(p).name() for p in tree if psutil.pid_exists(p)}
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "tritonserver" in names and any(n.startswith("triton_python") for n in names), names
    assert gone(tree) == []
    assert processes_using(str(server["workdir"])) == []
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["saturation_rps"] > 0
    assert summary["server"]["kind"] == "triton"
    assert summary["triton"]["name"] == "triton" and summary["triton"]["model_config"]["max_batch_size"] == 16
    stats = [m for s in summary["stages"] for m in s["server_metrics"] if m["source"] == "triton_stats"]
    assert stats and all(m["batch_size"] >= 1.0 for m in stats if m["batch_size"] is not None)
    assert any(m["requests"] for m in stats)
    assert "Triton statistics" in out and (tmp_path / "report.html").is_file()


def test_find_with_demo_models_mixes_every_copy_on_the_repository_triton(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "satpoint", "find", "--server", "triton", "--demo-models", "2",
            "--max-batch-size", "16", "--max-queue-delay-us", "200", "--out", str(tmp_path), "--budget-s", "14",
            "--timeout", "2", "--no-profile", "--no-confirm", "--no-html", *FAST]  # fmt: skip
    # --budget-s 14 (--timeout 2: a 2 s drain): one stage, ~11 s by the search's own estimate; examined are
    # the copies, their mix, the knobs read back, the statistics of the stage, the cleanup
    done = subprocess.run(argv, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    server = summary["server"]
    assert server["models"]["names"] == ["iris-000", "iris-001"] and server["models"]["distinct_artifacts"] == 2
    assert len(server["memory_at_ready"]["processes"]) == 3  # tritonserver and one Python-backend stub per copy
    config = summary["triton"]["model_config"]
    assert config["max_batch_size"] == 16 and config["max_queue_delay_us"] == 200
    assert summary["models"]["names"] == ["iris-000", "iris-001"] and min(summary["models"]["counts"]["requests"]) > 0
    stats = [m for s in summary["stages"] for m in s["server_metrics"] if m["source"] == "triton_stats"]
    assert stats and any(m["requests"] for m in stats)
    assert processes_using(str(server["workdir"])) == []


def test_a_triton_that_fails_to_become_ready_is_stopped_with_its_log(tmp_path: Path) -> None:
    server = TritonTarget(TritonSettings(), ready_timeout_s=3.0)
    with pytest.raises(TargetError) as info:
        server.start()
    assert "not ready after 3 s" in str(info.value) and "Triton's log" in str(info.value)
    assert gone(list(server.seen_pids)) == []
    workdir = str(server.info()["workdir"])
    assert processes_using(workdir) == []
    assert Path(workdir, "child.log").is_file()  # a failed start keeps its logs for the error to name
    shutil.rmtree(workdir)


def test_ctrl_c_during_a_search_stops_triton(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "satpoint", "find", "--server", "triton", "--out", str(tmp_path),
            "--budget-s", "60", "--no-html", *FAST]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server = wait_for_server(tmp_path, proc)
        time.sleep(2.0)  # the search is running
        tree = tree_of(int(str(server["pid"])))
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert len(tree) >= 3 and gone(tree) == []
    assert processes_using(str(server["workdir"])) == []


def test_the_repository_api_needs_the_servers_token_and_the_statistics_stay_open() -> None:
    from satpoint.endpoints import triton
    from satpoint.transports.rest import rest_control

    with TritonTarget(TritonSettings(max_batch_size=8)) as server:
        url, model = server.rest_url, server.model_name
        status, cfg = rest_control.call_json(url, f"/v2/models/{model}/config")
        assert status == 200 and isinstance(cfg, dict) and cfg["max_batch_size"] == 8
        override = {"parameters": {"config": json.dumps(triton.config_with_knobs(cfg, {"max_batch_size": 4}))}}
        # any local process can reach the port: without the token, no load and no unload
        for path, body in ((f"/v2/repository/models/{model}/load", override),
                           (f"/v2/repository/models/{model}/unload", {}), ("/v2/repository/index", {})):  # fmt: skip
            status, answer = rest_control.call_json(url, path, body)
            assert status in (401, 403), (path, status, answer)
        assert rest_control.model_ready(url, model)
        status, cfg = rest_control.call_json(url, f"/v2/models/{model}/config")
        assert cfg["max_batch_size"] == 8  # unchanged
        status, stats = rest_control.call_json(url, server.stats_url.removeprefix(url))
        assert status == 200 and stats["model_stats"], stats  # read-only statistics: open to satpoint's scrapes
        # with the server's token the repository API answers
        status, index = rest_control.call_json(url, "/v2/repository/index", {}, tuple(server.access_headers.items()))
        assert status == 200 and isinstance(index, list), (status, index)
        assert server.access_headers["triton-access-token"] not in json.dumps(server.info())
