"""Finding a process's cgroups from /proc/PID/cgroup and mountinfo, and reading their counters (fake trees)."""

from __future__ import annotations

import math
from pathlib import Path

from satpoint.metrics.cgroup_fs import (
    ControllerDir,
    controller_dirs,
    parse_key_values,
    parse_mountinfo,
    read_stats,
)

# this machine's kind: v1 controllers mounted one per hierarchy, cgroup2 at /unified with hugetlb only
HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = """\
9:name=systemd:/
4:memory:/process_api/abc
2:cpuacct:/
1:cpu:/
0::/
"""


def test_hybrid_v1_controllers_are_found_on_their_own_mounts() -> None:
    dirs, why = controller_dirs(("cpu", "memory"), HYBRID_CGROUP, HYBRID_MOUNTINFO)
    assert why == {}
    assert dirs["cpu"] == ControllerDir("cpu", 1, Path("/sys/fs/cgroup/cpu"), "/")
    assert dirs["memory"] == ControllerDir(
        "memory", 1, Path("/sys/fs/cgroup/memory/process_api/abc"), "/process_api/abc"
    )


def test_combined_v1_mount_and_a_namespaced_root() -> None:
    mountinfo = (
        "25 20 0:22 /kubepods/pod1 /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
        "26 20 0:23 /kubepods/pod1 /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n"
    )
    membership = "3:cpu,cpuacct:/kubepods/pod1/c1\n2:memory:/kubepods/pod1/c1\n"
    dirs, why = controller_dirs(("cpu", "memory"), membership, mountinfo)
    assert not why
    assert dirs["cpu"].path == Path("/sys/fs/cgroup/cpu,cpuacct/c1")
    assert dirs["memory"].path == Path("/sys/fs/cgroup/memory/c1")


def test_v2_controllers_are_taken_from_cgroup_controllers(tmp_path: Path) -> None:
    own = tmp_path / "user.slice" / "sp"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    mountinfo = f"30 23 0:26 / {tmp_path} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    dirs, why = controller_dirs(("cpu", "memory"), "0::/user.slice/sp\n", mountinfo)
    assert not why
    assert dirs["cpu"] == ControllerDir("cpu", 2, own, "/user.slice/sp")
    assert dirs["memory"].version == 2


def test_a_controller_v2_does_not_offer_is_named_with_why(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("hugetlb\n")
    mountinfo = f"41 31 0:38 / {tmp_path} rw,relatime - cgroup2 cgroup2 rw\n"
    dirs, why = controller_dirs(("cpu",), "0::/\n", mountinfo)
    assert dirs == {}
    assert "offers no cpu controller" in why["cpu"] and "hugetlb" in why["cpu"]


def test_nothing_mounted_says_so() -> None:
    dirs, why = controller_dirs(("memory",), "0::/\n", "22 1 0:5 / /proc rw - proc proc rw\n")
    assert dirs == {} and "not mounted" in why["memory"]


def test_mountinfo_escapes_and_optional_fields() -> None:
    line = "36 35 98:0 / /mnt/c\\040g rw,noatime shared:1 master:2 - cgroup cgroup rw,memory\n"
    (h,) = parse_mountinfo(line)
    assert h.mount_point == Path("/mnt/c g") and h.controllers == {"memory"} and h.version == 1


def test_counters_v1_ns_and_v2_usec(tmp_path: Path) -> None:
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    (v1 / "cpu.stat").write_text("nr_periods 40\nnr_throttled 10\nthrottled_time 2500000000\nnr_bursts 0\n")
    (v1 / "memory.max_usage_in_bytes").write_text("104857600\n")
    (v1 / "memory.usage_in_bytes").write_text("52428800\n")
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (v2 / "cpu.stat").write_text("usage_usec 9\nnr_periods 8\nnr_throttled 4\nthrottled_usec 1500000\n")
    (v2 / "memory.peak").write_text("2097152\n")
    (v2 / "memory.current").write_text("1048576\n")
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n")
    s1 = read_stats(ControllerDir("cpu", 1, v1, "/x"), ControllerDir("memory", 1, v1, "/x"))
    assert (s1["periods"], s1["throttled_periods"], s1["throttled_s"]) == (40, 10, 2.5)
    assert (s1["memory_peak_bytes"], s1["memory_bytes"], s1["oom_kills"]) == (104857600, 52428800, 2)
    s2 = read_stats(ControllerDir("cpu", 2, v2, "/x"), ControllerDir("memory", 2, v2, "/x"))
    assert (s2["periods"], s2["throttled_periods"], s2["throttled_s"]) == (8, 4, 1.5)
    assert (s2["memory_peak_bytes"], s2["oom_kills"]) == (2097152, 1)


def test_v2_cpu_stat_without_the_controller_has_no_throttling(tmp_path: Path) -> None:
    (tmp_path / "cpu.stat").write_text("usage_usec 9\nuser_usec 5\nsystem_usec 4\n")
    s = read_stats(ControllerDir("cpu", 2, tmp_path, "/"), None)
    assert all(math.isnan(v) for v in s.values())
    assert parse_key_values("a 1\nb x\nc 3") == {"a": 1, "c": 3}
