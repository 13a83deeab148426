"""A server's process tree sampled with psutil: CPU (user/system), RSS, threads, context switches, and
the cores the server may use (CPU affinity, cgroup ``cpu.max`` quota)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

from satpoint.metrics.cgroup_fs import ControllerDir, process_dirs, read_stats


@dataclass
class _Seen:
    user: float
    system: float
    vol: float
    invol: float
    #: what the process reaped from its exited children (``count_reaped`` only)
    reaped_user: float = 0.0
    reaped_system: float = 0.0


@dataclass
class TreeSampler:
    """Samples the trees under ``roots`` (re-discovered every time: workers come and go).  CPU seconds and
    context switches are cumulative since the first sample: per process, what it used since it was
    last seen (a process first seen after the first sample adds all it used: it started since)."""

    roots: Sequence[int]
    #: the CPUs whose busy time is summed in ``cpus_busy_s`` (the server's affinity; None: all)
    cpus: Sequence[int] | None = None
    _seen: dict[int, _Seen] = field(default_factory=dict)
    _procs: dict[int, psutil.Process] = field(default_factory=dict)
    _first: bool = True
    _user: float = 0.0
    _system: float = 0.0
    _vol: float = 0.0
    _invol: float = 0.0
    #: the server's own cgroups (cpu, memory) when it has any apart from ours (None: not looked up yet)
    _cgroups: dict[str, ControllerDir] | None = None
    #: also count what the tree's processes reaped from children that left it (``children_user``/``_system``:
    #: a process per request, exited before a sample saw it); the machine's sampler, whose known CPU must not
    #: leave a server's short-lived helpers to "other work"
    count_reaped: bool = False
    #: busy time without irq/softirq (no process is charged for it: the server's own network load) and on
    #: these CPUs only (None: ``cpus``); the machine's sampler
    busy_of: Literal["all", "tasks"] = "all"

    def cgroups(self) -> dict[str, ControllerDir]:
        """The cpu and memory cgroups of the first root that are not this process's own (a server started
        with a CPU or memory limit, or one in a container): their counters describe the server alone."""
        if self._cgroups is None and self.roots:
            theirs, _ = process_dirs(self.roots[0])
            ours, _ = process_dirs("self")
            self._cgroups = {c: d for c, d in theirs.items() if c not in ours or ours[c].path != d.path}
        return self._cgroups or {}

    def processes(self) -> list[psutil.Process]:
        out: dict[int, psutil.Process] = {}
        for pid in self.roots:
            try:
                for p in [pid, *descendants(pid)]:
                    out[p] = self._procs.get(p) or psutil.Process(p)
            except psutil.Error:
                continue
        self._procs = out  # a Process object remembers its creation time: a reused pid is a new process
        return list(out.values())

    def sample(self) -> dict[str, float] | None:
        """One sample (``metrics.observed.SAMPLE_COLUMNS``), or None when no process of the tree is alive."""
        procs = self.processes()
        rss = threads = 0
        alive = 0
        seen: dict[int, _Seen] = {}
        reaped_user = reaped_system = 0.0  # what the tree's processes reaped since the last sample
        for p in procs:
            try:
                with p.oneshot():
                    ct = p.cpu_times()
                    mem = p.memory_info()
                    n_threads = p.num_threads()
                    ctx = p.num_ctx_switches()
            except psutil.Error:
                continue
            alive += 1
            rss += mem.rss
            threads += n_threads
            reaped = (ct.children_user, ct.children_system) if self.count_reaped else (0.0, 0.0)
            now = _Seen(ct.user, ct.system, float(ctx.voluntary), float(ctx.involuntary), *reaped)
            seen[p.pid] = now
            before = self._seen.get(p.pid) or (now if self._first else _Seen(0.0, 0.0, 0.0, 0.0))
            self._user += max(0.0, now.user - before.user)
            self._system += max(0.0, now.system - before.system)
            self._vol += max(0.0, now.vol - before.vol)
            self._invol += max(0.0, now.invol - before.invol)
            reaped_user += max(0.0, now.reaped_user - before.reaped_user)
            reaped_system += max(0.0, now.reaped_system - before.reaped_system)
        # a pid that vanished is forgotten; were it reused by a new process, that one starts from zero.  What
        # it used up to its last sample is counted already: its parent's reaped time, which holds all of it,
        # adds only the rest (a child no sample saw adds all of it)
        gone = [v for pid, v in self._seen.items() if pid not in seen]
        self._user += max(0.0, reaped_user - sum(v.user + v.reaped_user for v in gone))
        self._system += max(0.0, reaped_system - sum(v.system + v.reaped_system for v in gone))
        self._seen = seen
        self._first = False
        if alive == 0:
            return None
        per_cpu = psutil.cpu_times(percpu=True)
        wanted = range(len(per_cpu)) if self.cpus is None else [c for c in self.cpus if c < len(per_cpu)]
        busy_time = _busy if self.busy_of == "all" else _task_busy
        busy = sum(busy_time(per_cpu[c]) for c in wanted)
        cg = self.cgroups()
        counters = read_stats(cg.get("cpu"), cg.get("memory"))
        return {
            "mono_s": time.monotonic(),
            "unix_s": time.time(),
            "cpu_user_s": self._user,
            "cpu_system_s": self._system,
            "rss_bytes": float(rss),
            "threads": float(threads),
            "ctx_voluntary": self._vol,
            "ctx_involuntary": self._invol,
            "procs": float(alive),
            "cpus_busy_s": busy,
            "cg_periods": counters["periods"],
            "cg_throttled_periods": counters["throttled_periods"],
            "cg_throttled_s": counters["throttled_s"],
            "cg_memory_peak_bytes": counters["memory_peak_bytes"],
            "cg_oom_kills": counters["oom_kills"],
        }


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid``, from ``/proc/PID/task/TID/children`` (a few files, where psutil's
    ``children`` reads every process's ``stat``: ten times the cost); psutil where those files are missing."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
            kids = [int(k) for t in tasks for k in _read(f"/proc/{p}/task/{t}/children").split()]
        except FileNotFoundError:
            if p != pid:
                continue  # gone meanwhile
            try:
                return [c.pid for c in psutil.Process(pid).children(recursive=True)]
            except psutil.Error:
                return []
        out.extend(kids)
        todo.extend(kids)
    return out


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _busy(t: Any) -> float:
    """Seconds a CPU spent on anything but idling (``cpu_times`` of one CPU)."""
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0))


def _task_busy(t: Any) -> float:
    """Seconds a CPU ran tasks (user, nice, system) or was taken by the hypervisor (steal): not irq/softirq,
    which no process is charged for (a server's own network load would read as other work)."""
    return float(t.user + t.nice + t.system + getattr(t, "steal", 0.0))


def machine_sampler(roots: Sequence[int], parent: int) -> TreeSampler | None:
    """The sampler of the whole machine's other work (``machine_busy``): the CPU of the server's trees and
    satpoint's own (``parent``) against the busy time of the CPUs either may run on.  None where that cannot
    be told: satpoint under a CPU quota (a container without a cpuset sees the host's CPUs, whose other work is
    not its machine's)."""
    if cgroup_quota_cores(parent) is not None:
        return None
    cpus: set[int] = set()
    for pid in (*roots, parent):
        try:
            cpus |= set(os.sched_getaffinity(pid))
        except OSError:
            return None
    return TreeSampler([*roots, parent], cpus=sorted(cpus), count_reaped=True, busy_of="tasks")


def cgroup_quota_cores(pid: int, root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The tightest CPU quota (in cores) over the cgroup of ``pid`` and its parents: cgroup v2 ``cpu.max``,
    else v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (None: no quota, or nothing readable)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        _, controllers, rel = ([*line.split(":", 2), "", ""])[:3]
        if controllers == "":  # v2
            quotas += _walk(root, root / rel.lstrip("/"), _v2_quota)
        elif "cpu" in controllers.split(","):  # v1
            base = root / controllers
            quotas += _walk(base, base / rel.lstrip("/"), _v1_quota)
    return min(quotas) if quotas else None


def _walk(top: Path, path: Path, read: Callable[[Path], float | None]) -> list[float]:
    out = []
    while True:
        got = read(path)
        if got is not None:
            out.append(got)
        if path == top or top not in path.parents:
            return out
        path = path.parent


def _v2_quota(path: Path) -> float | None:
    try:
        quota, period = (path / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(path: Path) -> float | None:
    try:
        quota = int((path / "cpu.cfs_quota_us").read_text())
        period = int((path / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def allowed_cores(pids: Sequence[int]) -> dict[str, Any]:
    """The CPUs the server may run on (the first live root's affinity), the cgroup quota when one can be
    read, and ``allowed_cores``: the smaller of the two (None when nothing could be read)."""
    affinity: list[int] | None = None
    quota: float | None = None
    for pid in pids:
        try:
            affinity = sorted(psutil.Process(pid).cpu_affinity() or [])
        except (psutil.Error, AttributeError, OSError):
            continue
        quota = cgroup_quota_cores(pid)
        break
    candidates = [float(len(affinity))] if affinity else []
    if quota is not None:
        candidates.append(quota)
    allowed = min(candidates) if candidates else None
    return {
        "affinity": affinity,
        "cgroup_quota_cores": None if quota is None else round(quota, 3),
        "allowed_cores": None if allowed is None or not math.isfinite(allowed) else round(allowed, 3),
    }
