"""satpoint.servers.mlserver.server: a real MLServer 1.7.1 serving the iris model starts on free loopback ports,
lists its declared inputs, answers inference, and leaves no process behind (workers included), also
when its owner gets SIGINT."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from satpoint.observe.prom import scrape
from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget
from satpoint.servers.models.demo import IRIS_EXAMPLE_ROW, train_iris_model
from satpoint.servers.process import TargetError, pids_alive

SRC = str(Path(__file__).resolve().parents[3] / "src")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_json(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with _NO_PROXY.open(req, timeout=10) as resp:
            raw = resp.read()
            return int(resp.status), json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), json.loads(exc.read() or b"null")


def infer_body(datatype: str, rows: int = 1) -> dict[str, Any]:
    return {
        "inputs": [
            {
                "name": "input-0",
                "datatype": datatype,
                "shape": [rows, 4],
                "data": list(IRIS_EXAMPLE_ROW) * rows,
            }
        ]
    }


def wait_gone(pids: frozenset[int] | list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = pids_alive(list(pids))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


# -- fast: pure parts --------------------------------------------------------------------------------------


def test_settings_validation() -> None:
    s = MLServerSettings(cpus=[1, 0], env={"OMP_NUM_THREADS": "1"})
    assert s.cpus == (1, 0)
    assert s.to_dict()["cpus"] == [1, 0]
    bad: dict[str, Any]
    for bad in (
        {"parallel_workers": -1},
        {"max_batch_size": 0},
        {"max_batch_time_s": -0.1},
        {"model_name": "../x"},
        {"input_datatype": "INT8"},
        {"cpus": [0, 0]},
        {"cpus": []},
    ):
        with pytest.raises(ValueError):
            MLServerSettings(**bad)


def test_train_iris_model(tmp_path: Path) -> None:
    import joblib

    path = train_iris_model(tmp_path / "m")
    assert path == tmp_path / "m" / "model.joblib"
    model = joblib.load(path)
    assert list(model.predict([list(IRIS_EXAMPLE_ROW)])) == [0]


# -- slow: the real server ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_real_mlserver_serves_and_stops_without_leftovers(workers: int) -> None:
    # with 1 worker, also pin the server to one CPU: every process of the tree inherits the pinning
    cpus = [max(os.sched_getaffinity(0))] if workers == 1 else None
    target = MLServerTarget(MLServerSettings(parallel_workers=workers, cpus=cpus), ready_timeout_s=90)
    with target:
        workdir = Path(target.info()["workdir"])
        assert target.rest_url.startswith("http://127.0.0.1:")
        assert target.grpc_address.startswith("127.0.0.1:")
        status, meta = http_json(f"{target.rest_url}/v2/models/iris")
        assert status == 200
        assert meta["inputs"] == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}]
        assert meta["outputs"][0]["name"] == "predict"

        for datatype in ("FP32", "FP64"):
            status, out = http_json(f"{target.rest_url}/v2/models/iris/infer", infer_body(datatype))
            assert status == 200, out
            assert out["outputs"][0]["name"] == "predict"
            assert out["outputs"][0]["data"] == [0]
        status, out = http_json(f"{target.rest_url}/v2/models/iris/infer", infer_body("FP32", rows=3))
        assert status == 200 and out["outputs"][0]["shape"] == [3, 1]

        pids = target.pids()
        assert pids[0] == target.pid
        # parallel workers are child processes (plus multiprocessing's resource tracker)
        assert len(pids) >= 1 + workers
        if cpus is not None:
            assert {p: psutil.Process(p).cpu_affinity() for p in pids} == {p: cpus for p in pids}
        counts = [
            v for name, labels, v in scrape(target.metrics_url)
            if name == "model_infer_request_duration_count" and labels.get("model") == "iris"
        ]  # fmt: skip
        assert sum(counts) >= 3

        info = target.info()
        assert info["versions"]["mlserver"] == "1.7.1"
        assert info["versions"]["uvloop"] == "0.21.0"
        assert info["settings"]["parallel_workers"] == workers
        assert info["startup_s"] is not None and info["startup_s"] > 0
        assert not Path(".metrics").exists() or Path(".metrics").resolve().parent != Path.cwd()
        seen = target.seen_pids
    assert set(pids) <= seen
    assert wait_gone(seen) == []
    assert not workdir.exists()
    with pytest.raises(Exception, match=r"refused|Connection|timed out"):
        _NO_PROXY.open(f"{info['rest_url']}/v2/health/live", timeout=2)


_OWNER = textwrap.dedent(
    """
    import json, sys, time
    from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget
    # kill_with_parent=False: prove the KeyboardInterrupt path alone cleans up
    with MLServerTarget(MLServerSettings(parallel_workers=2), kill_with_parent=False) as target:
        print(json.dumps({"pids": target.pids(), "url": target.rest_url}), flush=True)
        time.sleep(120)
    """
)


@pytest.mark.slow
def test_sigint_to_owner_stops_mlserver_and_its_workers() -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True, env=env)
    pids: list[int] = []
    try:
        assert owner.stdout is not None
        started = json.loads(owner.stdout.readline())
        pids = started["pids"]
        assert len(pids) >= 3 and pids_alive(pids) == sorted(pids)
        assert http_json(f"{started['url']}/v2/health/ready")[0] == 200
        owner.send_signal(signal.SIGINT)
        owner.wait(timeout=30)
        assert wait_gone(pids) == []
    finally:
        _cleanup(owner, pids)


def _cleanup(owner: subprocess.Popen[str], pids: list[int]) -> None:
    """If the test failed midway: the owner's own SIGINT path first, then force (never leave orphans)."""
    if owner.poll() is None:
        owner.send_signal(signal.SIGINT)
        try:
            owner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            owner.kill()
            owner.wait()
    for pid in pids_alive(pids):
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


@pytest.mark.slow
def test_model_that_fails_to_load_fails_fast_with_the_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLServer answers 200 on /v2/health/ready for a moment after a failed load, then exits: the
    target must not call that ready, and must say why without waiting for the 90 s timeout."""
    original = MLServerTarget._model_settings

    def broken(self: MLServerTarget) -> dict[str, Any]:
        return {**original(self), "implementation": "mlserver_sklearn.NoSuchRuntime"}

    monkeypatch.setattr(MLServerTarget, "_model_settings", broken)
    target = MLServerTarget(ready_timeout_s=90)
    t0 = time.monotonic()
    with pytest.raises(TargetError, match="NoSuchRuntime") as info:
        target.start()
    assert time.monotonic() - t0 < 60
    assert "before MLServer model 'iris' was ready" in str(info.value)
    assert wait_gone(target.seen_pids) == []
