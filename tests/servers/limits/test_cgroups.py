"""Child cgroups with a CPU quota and a memory limit: on a fake v1 tree, the refusal, and once for real on
this machine's cgroup v1 (throttling seen, an OOM kill seen).  Cgroup v2 (satpoint's own cgroup, its ``self``
leaf, the sweep of dead runs' cgroups) is in ``test_cgroup_v2.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from satpoint.metrics.cgroup_fs import ControllerDir
from satpoint.servers.limits.cgroups import (
    CgroupUnavailable,
    ChildCgroup,
    ResourceLimits,
    check_available,
    memory_text,
    own_dirs,
    parse_cpu_limit,
    parse_memory,
)


def test_quantities_as_kubernetes_reads_them() -> None:
    assert parse_memory("256M") == 256 * 10**6
    assert parse_memory("512Mi") == 512 * 2**20
    assert parse_memory("1G") == 10**9 and parse_memory("1.5Gi") == int(1.5 * 2**30)
    assert parse_memory("2000000") == 2_000_000
    for bad in ("", "12X", "-1M", "10"):
        with pytest.raises(ValueError):
            parse_memory(bad)
    assert parse_cpu_limit("1500m") == 1.5 and parse_cpu_limit(0.5) == 0.5
    with pytest.raises(ValueError):
        parse_cpu_limit("0.001")
    assert memory_text(256 * 10**6) == "256 MB" and memory_text(512 * 2**20) == "512 MiB"


def test_limits_quota() -> None:
    lim = ResourceLimits(cpu_cores=1.5, memory_bytes=256 * 10**6)
    assert lim.quota_us == 150_000 and lim.controllers == ("cpu", "memory")
    assert ResourceLimits(cpu_cores=0.001 * 10).quota_us == 1_000


def _v1_parent(tmp_path: Path, controller: str) -> ControllerDir:
    path = tmp_path / controller
    path.mkdir()
    return ControllerDir(controller, 1, path, "/")


def test_v1_fake_tree_limits_wrap_and_removal(tmp_path: Path) -> None:
    parents = {"cpu": _v1_parent(tmp_path, "cpu"), "memory": _v1_parent(tmp_path, "memory")}
    cg = ChildCgroup.create(ResourceLimits(cpu_cores=0.5, memory_bytes=300 * 10**6), parents=parents, name="c")
    assert (tmp_path / "cpu/c/cpu.cfs_quota_us").read_text() == "50000"
    assert (tmp_path / "cpu/c/cpu.cfs_period_us").read_text() == "100000"
    assert (tmp_path / "memory/c/memory.limit_in_bytes").read_text() == "300000000"
    argv = cg.wrap(["server", "--x"])
    assert argv[-2:] == ["server", "--x"] and argv[argv.index("2") + 1 :][:2] == [
        str(tmp_path / "cpu/c/cgroup.procs"),
        str(tmp_path / "memory/c/cgroup.procs"),
    ]
    for f in (tmp_path / "cpu/c").iterdir():  # a real cgroupfs has no files to unlink; the fake does
        f.unlink()
    for f in (tmp_path / "memory/c").iterdir():
        f.unlink()
    cg.remove()
    assert not (tmp_path / "cpu/c").exists() and not (tmp_path / "memory/c").exists()


def test_refused_where_the_controller_is_absent(tmp_path: Path) -> None:
    missing = {"memory": ControllerDir("memory", 1, tmp_path / "nope", "/")}
    with pytest.raises(CgroupUnavailable, match=r"a memory limit .* cannot be applied on this machine: cannot create"):
        check_available(ResourceLimits(memory_bytes=2**28), parents=missing)


def _real_v1() -> bool:
    try:
        dirs = own_dirs(("cpu", "memory"))
    except CgroupUnavailable:
        return False
    return all(d.version == 1 for d in dirs.values())


real_v1 = pytest.mark.skipif(not _real_v1(), reason="needs writable cgroup v1 cpu and memory hierarchies (as root)")

_SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.0: pass\n"
_EAT = "x = []\nwhile True: x.append(bytearray(8 * 2**20))\n"


@real_v1
@pytest.mark.slow
@pytest.mark.alone  # the spinner must get its 20 % in every period: beside two workers it was throttled in 1 of 12
def test_real_quota_throttles_a_busy_process() -> None:
    cg = ChildCgroup.create(ResourceLimits(cpu_cores=0.2))
    try:
        check_available(ResourceLimits(cpu_cores=0.2))  # a probe beside it works too, and is gone again
        done = subprocess.run(cg.wrap([sys.executable, "-c", _SPIN]), timeout=20, check=False)
        assert done.returncode == 0
        st = cg.stats()
        assert st["periods"] >= 5 and st["throttled_periods"] >= 3
        assert st["throttled_s"] > 0.3  # 1 s of spinning at 20 % of a core stalls most of each period
    finally:
        cg.remove()
    assert cg.removed and not cg.dirs["cpu"].path.exists()
    assert cg.stats()["throttled_periods"] >= 3  # the last counters stay readable after removal


@real_v1
@pytest.mark.slow
def test_real_memory_limit_kills_an_allocating_process() -> None:
    cg = ChildCgroup.create(ResourceLimits(memory_bytes=64 * 2**20))
    try:
        done = subprocess.run(cg.wrap([sys.executable, "-c", _EAT]), timeout=30, check=False)
        assert done.returncode == -9
        assert cg.oom_kills() >= 1
        msg = cg.oom_message()
        assert msg is not None and msg.startswith("killed by the memory limit at 64 MiB")
    finally:
        cg.remove()
    assert not cg.dirs["memory"].path.exists()


@real_v1
def test_real_cgroups_of_a_dead_satpoint_are_swept(monkeypatch: pytest.MonkeyPatch) -> None:
    from satpoint.servers.limits import cgroups

    dead = next(p for p in range(32_000, 2_000, -1) if not Path(f"/proc/{p}").exists())
    left = [d.path / f"satpoint-{dead}-abcdef" for d in own_dirs(("cpu", "memory")).values()]
    for path in left:
        path.mkdir()  # what a satpoint killed with SIGKILL leaves behind
    try:
        monkeypatch.setattr(cgroups, "_swept", False)
        check_available(ResourceLimits(cpu_cores=0.5, memory_bytes=2**28))
        assert [p for p in left if p.exists()] == []
    finally:
        for path in left:
            if path.exists():
                path.rmdir()
