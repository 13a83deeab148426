"""The client core without the ``embedded`` extra (``pip install satpoint``): every command aimed at a server
elsewhere works with MLServer, scikit-learn and the ONNX packages made unimportable, and a command that needs the
embedded server says which extra to install, in one line, exit 2, before anything starts.

Each command runs in a subprocess whose ``sitecustomize`` puts a finder first on ``sys.meta_path`` that refuses those
packages (and their submodules), as if they were not installed: in that process and in every process it starts
(the generator's workers, the sim).  The static side of the same rule is the import-linter contract "the client core
does without the embedded extra" in pyproject.toml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from satpoint.pythonpath import satpoint_root
from satpoint.servers.embedded_base import EMBEDDED_EXTRA_HINT, EMBEDDED_MODULES

_BLOCKER = f"""
import importlib.abc
import sys

BLOCKED = {set(EMBEDDED_MODULES)!r}


class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: not in the client core)", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""
#: prints the blocked packages a process holds (none, or the blocker failed) after it touched the public API
_API = (
    "import sys, satpoint\n"
    "for name in ('load', 'run', 'find', 'report', 'SimServer', 'Target', 'RunConfig', 'LoadedResults'):\n"
    "    getattr(satpoint, name)\n"
    f"print(sorted(m for m in sys.modules if m.partition('.')[0] in {set(EMBEDDED_MODULES)!r}))\n"
)


@pytest.fixture
def core_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a process without the ``embedded`` extra's packages, importing this satpoint."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(_BLOCKER)
    env = dict(os.environ)
    paths = [str(blocker), str(satpoint_root()), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("SATPOINT_DEBUG", None)
    return env


def satpoint(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "satpoint", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.parametrize("module", EMBEDDED_MODULES)
def test_the_blocker_makes_each_package_unimportable(core_env: dict[str, str], module: str) -> None:
    # the check below means something only if the packages really are out of reach in these processes
    r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, env=core_env)
    assert r.returncode == 1
    assert "blocked: not in the client core" in r.stderr


def test_help_and_the_python_api_need_no_embedded_package(core_env: dict[str, str]) -> None:
    r = satpoint(core_env, "--help")
    assert r.returncode == 0, r.stderr
    assert "find" in r.stdout and "run" in r.stdout
    api = subprocess.run([sys.executable, "-c", _API], capture_output=True, text=True, env=core_env, timeout=60)
    assert api.returncode == 0, api.stderr
    assert api.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "command",
    [
        ["find"],
        ["find", "--demo-model", "digits", "--runtime", "onnx"],
        ["sweep", "--set", "workers=1,2"],
        ["compare"],
        ["coldstart"],
    ],
    ids=lambda c: " ".join(c),
)
def test_the_embedded_server_without_its_extra_is_refused_in_one_line(
    core_env: dict[str, str], tmp_path: Path, command: list[str]
) -> None:
    out = tmp_path / "out"
    r = satpoint(core_env, *command, "--out", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""
    assert r.stderr.strip() == f"error: {EMBEDDED_EXTRA_HINT}"
    assert not out.exists()  # refused before anything was written or started


#: a short search of a 400 rps sim: a coarse precision, short holds, no profile
FAST_FIND = ["--start-rps", "160", "--precision", "0.2", "--ramp", "0.5", "--min-hold", "2", "--max-hold", "3"]
FAST_FIND += ["--min-requests", "300", "--cooldown", "0", "--no-profile", "--no-confirm", "--budget-s", "90"]


@pytest.mark.slow
def test_run_find_report_and_diff_against_the_sim_without_embedded_packages(
    core_env: dict[str, str], tmp_path: Path
) -> None:
    sim = subprocess.Popen(
        [sys.executable, "-m", "satpoint", "sim", "--port", "0", "--slots", "4", "--service-ms", "10"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=core_env,
    )
    try:
        assert sim.stdout is not None
        line = sim.stdout.readline()  # the listening line, or the error that stopped it
        assert line.startswith("satpoint sim listening on http://127.0.0.1:"), line + sim.stdout.read()
        url = line.split()[4]
        run_dir, find_dir = tmp_path / "run", tmp_path / "find"
        r = satpoint(core_env, "run", "-u", url, "-m", "sim", "--stage", "100:0:2", "--out", str(run_dir), timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        (stage,) = json.loads((run_dir / "summary.json").read_text())["stages"]
        assert stage["throughput_rps"] > 0
        r = satpoint(core_env, "find", "-u", url, "-m", "sim", "--out", str(find_dir), *FAST_FIND, timeout=150)
        assert r.returncode == 0, r.stdout + r.stderr
        saturation = json.loads((find_dir / "summary.json").read_text())["saturation_rps"]
        assert 0 < saturation <= 1.05 * 400  # the sim's capacity: 4 slots / 10 ms
    finally:
        sim.terminate()
        try:
            sim.wait(10)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait(10)
    r = satpoint(core_env, "report", str(run_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (run_dir / "report.html").is_file()
    r = satpoint(core_env, "diff", str(run_dir), str(run_dir))
    assert r.returncode in (0, 3), r.stdout + r.stderr  # a verdict, not an import error
    assert "Traceback" not in r.stdout + r.stderr
