"""End-to-end: `satpoint run --flamegraph` against `satpoint sim` (a Python server py-spy can read): the
flame graph of the chosen stage's hold is written, names the sim's own functions, and py-spy never
outlives the run; a remote server (no pid) is refused before any load with how to profile it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import satpoint
from satpoint.config import FlamegraphOptions, ObserveOptions
from satpoint.errors import ConfigError
from satpoint.observe.pyspy import find_py_spy
from satpoint.servers.sim.process import SimServer


def py_spies() -> set[int]:
    found = set()
    for p in psutil.process_iter(["pid", "name"]):
        if (p.info["name"] or "").startswith("py-spy"):
            found.add(p.info["pid"])
    return found


@pytest.mark.slow
@pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed")
def test_run_records_a_flame_graph_of_the_chosen_stage(tmp_path: Path) -> None:
    before = py_spies()
    with SimServer(slots=4, service_ms=2) as sim:
        r = subprocess.run(
            [
                sys.executable, "-m", "satpoint", "run", "--url", sim.url, "--model", "sim", "--stage", "50:0:2",
                "--stage", "500:1:4", "--out", str(tmp_path), "--no-html", "--server-pid", str(sim.pid),
                "--flamegraph", "--flamegraph-stage", "2",
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    assert py_spies() <= before, "py-spy outlived the run"
    s = json.loads((tmp_path / "summary.json").read_text())
    fg = s["flamegraph"]
    assert fg["error"] is None, fg
    assert fg["stage"] == 2 and fg["svg"] == "flamegraph.svg" and fg["speedscope"] == "profile.speedscope.json"
    assert (tmp_path / "flamegraph.svg").read_text().startswith("<svg")
    # py-spy leaves out idle samples and the sim mostly waits: at 200 rps one run saw only 9, so 500 rps
    assert fg["samples"] > 10 and fg["top"]
    # stage 2's hold runs from 3 s (2 s of stage 1, then its 1 s ramp) to 7 s on the run clock
    assert 2.5 <= fg["from_s"] <= 3.5 and 6.5 <= fg["to_s"] <= 7.6 and 3.0 <= fg["seconds"] <= 4.6
    svg = (tmp_path / "flamegraph.svg").read_text()
    assert "satpoint/servers/" in svg  # the sim's own frames (its request handling)
    assert "top functions by own time" in r.stdout and "flame graph:" in r.stdout


def test_a_remote_server_cannot_be_profiled_and_it_says_how() -> None:
    target = satpoint.Target("http://127.0.0.1:9", "m")  # never contacted: refused before any load
    observe = ObserveOptions(flamegraph=FlamegraphOptions())
    with pytest.raises(ConfigError, match="--server-pid") as e:
        satpoint.run(target, ["10:0:1"], observe=observe)
    assert "py-spy record --pid" in str(e.value)
    with pytest.raises(ConfigError, match="remote server"):
        satpoint.find(target, observe=observe)
    with pytest.raises(ConfigError, match="the plan has 1 stages"):
        third = ObserveOptions(server_pids=(1,), flamegraph=FlamegraphOptions(stage=3))
        satpoint.run(target, ["10:0:1"], observe=third)
