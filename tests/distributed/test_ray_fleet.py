"""Real Ray: two "nodes" on this machine (``ray.cluster_utils.Cluster``), one generator actor on each.

Shared by the module (Ray starts slowly).  Skipped only when Ray cannot be imported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

import satpoint
from satpoint import api
from satpoint.config import LoadOptions, RayOptions
from satpoint.endpoints.spec import Target
from satpoint.engine.schedule import due_times
from satpoint.metrics.results import load_results
from satpoint.plan import Stage
from satpoint.procedures.progress import SegmentFinished, Snapshot
from satpoint.servers.sim.process import SimServer

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

PLAN = [Stage(300, 0.5, 2.5)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    # the nodes' workers import the satpoint these tests import
    src = str(Path(satpoint.__file__).resolve().parents[1])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([src, *(old.split(os.pathsep) if old else [])])
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False, include_dashboard=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(slots=64, service_ms=2) as s:
        yield s


def _ours(prefix: str = "satpoint-") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """This cluster's satpoint actors and placement groups, with their states."""
    from ray._private.state import state

    actors = [a for a in state.actor_table(None).values() if str(a.get("Name", "")).startswith(prefix)]
    groups = [g for g in ray.util.placement_group_table().values() if str(g.get("name", "")).startswith(prefix)]
    return actors, groups


def _cleaned_up() -> None:
    deadline = time.monotonic() + 10
    while True:
        actors, groups = _ours()
        if all(a["State"] == "DEAD" for a in actors) and all(g["state"] == "REMOVED" for g in groups):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"left behind: {actors} {groups}")
        time.sleep(0.2)


def test_two_hosts_on_two_nodes_run_one_schedule_started_together(cluster: Any, sim: SimServer, tmp_path: Path) -> None:
    load = LoadOptions(timeout_s=5.0, drain_s=1.0, ray=RayOptions(address=cluster.address, hosts=2, lead_s=2.0))
    result = api.run(Target(sim.url, "sim"), PLAN, load=load, out=tmp_path, html=False)
    gen = result.summary.generator
    assert gen.ray is not None and len(gen.ray.hosts) == 2
    assert len({h.node_id for h in gen.ray.hosts}) == 2  # one actor per node
    due = due_times(PLAN)
    assert sum(h.requests for h in gen.ray.hosts) == gen.requests == len(due)
    rec = load_results(tmp_path).segments[0].records
    assert np.array_equal(rec.intended, due)  # the merged rows are the single-machine schedule
    assert gen.ray.start_skew_max_s is not None and gen.ray.start_skew_max_s < 0.005
    (stage,) = result.summary.stages
    assert stage.verdict == "stable", stage.reasons
    assert gen.procs == 2
    _cleaned_up()


def test_a_killed_actor_loses_its_rows_and_the_run_keeps_the_others(
    cluster: Any, sim: SimServer, tmp_path: Path
) -> None:
    killed: list[str] = []

    def on_event(event: object) -> None:  # a second into the hold, kill host 1's actor
        if isinstance(event, Snapshot) and event.snapshot.now_s > 1.0 and not killed:
            name = next(n for n in ray.util.list_named_actors() if n.startswith("satpoint-") and n.endswith("-1"))
            ray.kill(ray.get_actor(name), no_restart=True)
            killed.append(name)

    load = LoadOptions(timeout_s=5.0, drain_s=1.0, ray=RayOptions(address=cluster.address, hosts=2, lead_s=2.0))
    result = api.run(Target(sim.url, "sim"), PLAN, load=load, out=tmp_path, html=False, on_event=on_event)
    assert killed
    s = result.summary
    assert s.generator.ray is not None and s.generator.ray.lost_hosts == 1
    lost = s.generator.ray.hosts[1]
    assert lost.lost_segments and "actor died" in (lost.lost_segments[0].why or "")
    rec = load_results(tmp_path).segments[0].records
    assert np.array_equal(rec.intended, due_times(PLAN)[0::2])  # host 0's rows, all of them
    (stage,) = s.stages
    assert stage.verdict == "generator_limited"
    assert "about 50% of this stage's scheduled requests are missing" in stage.reasons[0]
    assert any("host 1" in w and "lost" in w for w in s.warnings), s.warnings
    _cleaned_up()
    pid = json.loads((tmp_path / "results.json").read_text())["segments"][0]["generator"]["ray"]["hosts"][1]["pid"]
    deadline = time.monotonic() + 10  # the killed actor's generator processes die with it
    while [p for p in psutil.process_iter(["ppid"]) if p.info["ppid"] == pid] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p.pid for p in psutil.process_iter(["ppid"]) if p.info["ppid"] == pid]


def test_a_search_runs_every_segment_on_its_hosts_and_replaces_an_actor_killed_between_two(
    cluster: Any, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from satpoint.cli.common import exit_code
    from satpoint.cli.main import app
    from satpoint.config import FindOptions

    killed: list[str] = []

    def on_event(event: object) -> None:  # when the first segment has ended, kill host 1's actor
        if isinstance(event, SegmentFinished) and not killed:
            name = next(n for n in ray.util.list_named_actors() if n.startswith("satpoint-") and n.endswith("-1"))
            ray.kill(ray.get_actor(name), no_restart=True)
            killed.append(name)
            deadline = time.monotonic() + 10  # dead before the next segment starts
            while any(a["State"] != "DEAD" for a in _ours(name)[0]) and time.monotonic() < deadline:
                time.sleep(0.1)

    ray_opts = RayOptions(address=cluster.address, hosts=2, lead_s=2.0)
    opts = FindOptions(
        start_rps=100, budget_s=20, ramp_s=0.5, min_hold_s=1.5, max_hold_s=2, min_requests=200, profile=False,
        confirm=False,
    )  # fmt: skip
    with SimServer(slots=2, service_ms=5) as small:  # capacity 400 rps
        result = api.find(
            Target(small.url, "sim"), options=opts, load=LoadOptions(timeout_s=5, drain_s=1, ray=ray_opts),
            out=tmp_path, html=False, on_event=on_event,
        )  # fmt: skip
    assert killed
    segments = load_results(tmp_path).segments
    assert len(segments) >= 2
    for seg in segments:  # every due request of every segment has its row: no host's share is missing
        block = seg.generator["ray"]
        assert [h["index"] for h in block["hosts"]] == [0, 1] and block["lost_hosts"] == 0
        due = due_times(seg.stages, seg.arrival, seg.seed, seg.start_rps)
        if seg.stopped is None:
            assert np.array_equal(np.sort(seg.records.intended), due)
        else:  # stopped early (overload): what was sent is the schedule's beginning, from both hosts
            assert np.isin(seg.records.intended, due).all() and len(seg.records) > 0
        assert sum(h["requests"] for h in block["hosts"]) == len(seg.records)
    assert any("generator host 1 did not answer before this segment" in n and "a new actor replaced it" in n
               for n in segments[1].notes), segments[1].notes  # fmt: skip
    assert not any(n for seg in segments[2:] for n in seg.notes if "did not answer" in n)
    # no stage is judged on a missing host's share (a loaded machine may still make one fall behind)
    assert not [r for st in result.summary.stages for r in st.reasons if "lost" in r or "are missing" in r]
    assert result.summary.saturation_rps is not None
    assert result.summary.generator.ray is not None and result.summary.generator.ray.segments == len(segments)
    assert exit_code(result.summary) == 0  # what the CLI exits with
    r = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "report.html").stat().st_size > 10_000
    _cleaned_up()


def _ray_pids() -> set[int]:
    found = set()
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "ray" in cmd and ("raylet" in cmd or "gcs_server" in cmd or "default_worker" in cmd or "ray::" in cmd):
            found.add(p.pid)
    return found


def test_a_local_ray_started_for_the_command_is_stopped_with_it(cluster: Any, sim: SimServer, tmp_path: Path) -> None:
    before = _ray_pids()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    cmd = [sys.executable, "-m", "satpoint", "run", "-u", sim.url, "-m", "sim", "-s", "100:0:1", "--ray"]
    r = subprocess.run(
        [*cmd, "--out", str(tmp_path), "--no-html"], capture_output=True, text=True, timeout=150, env=env
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "starting a local Ray instance" in r.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["generator"]["ray"]["address"] == "local"
    deadline = time.monotonic() + 15
    while _ray_pids() - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_pids() - before


def test_ctrl_c_stops_every_host_and_still_writes_the_results(cluster: Any, sim: SimServer, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "satpoint", "run", "-u", sim.url, "-m", "sim", "-s", "200:0:30", "--no-html"]
    cmd += ["--ray", cluster.address, "--ray-hosts", "2", "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    out = []
    t = time.monotonic()
    for line in proc.stdout:  # a couple of seconds into the hold
        out.append(line)
        if "(hold," in line and "t=" in line and float(line.split("t=")[1].split("s")[0]) > 2.0:
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=60)
    assert time.monotonic() - t < 60
    assert proc.returncode == 130, "".join(out) + rest
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted"] is True
    hosts = summary["generator"]["ray"]["hosts"]
    assert len(hosts) == 2 and all(0 < h["requests"] < 200 * 30 / 2 for h in hosts), hosts
    _cleaned_up()
