"""CPU limits as CFS quotas and memory limits the way Kubernetes sets them, for a server satpoint starts.

``ChildCgroup.create(ResourceLimits(cpu_cores=1.5, memory_bytes=512 * 10**6))`` makes one child cgroup of
satpoint's *own* cgroup per controller needed (``cpu``, ``memory``; never any other cgroup), sets

- the CPU quota as kubelet does for ``limits.cpu``: ``cores × 100 000`` µs per 100 ms period (v1
  ``cpu.cfs_quota_us``/``cpu.cfs_period_us``, v2 ``cpu.max``);
- the memory limit as for ``limits.memory`` (v1 ``memory.limit_in_bytes``, v2 ``memory.max``): a breach
  is an OOM kill, never a slow-down;

``wrap(argv)`` runs a command inside it from its first instruction (``sh`` writes its own pid to each
``cgroup.procs``, then ``exec``s the command: same pid, no ``preexec_fn``), ``stats()`` reads the counters
(``metrics.cgroup_fs.read_stats``), and ``remove()`` kills whatever is left in it (only processes started
in it: the server's), waits until it is empty and removes it (``rmdir``).

On cgroup v2 a controller must be enabled in the parent's ``cgroup.subtree_control``, which the kernel
refuses while that parent holds processes ("no internal processes", the root cgroup excepted).  So satpoint
makes a cgroup of its own under its cgroup P, ``P/satpoint-PID/``, moves itself (every thread, and the
processes it started that are still in P) into its leaf ``satpoint-PID/self/``, and only then enables the
controllers: in P (empty now, unless other processes share it: then refused, saying so) and in
``satpoint-PID/``.  Each server gets a leaf beside ``self/`` (``server-XXXXXX``).  When the last server leaf
is removed, satpoint undoes it: the controllers it enabled in P are disabled, its processes go back to P and
``satpoint-PID/`` is removed.  In a cgroup shared with other processes (a login session) that cannot work;
``systemd-run --scope -p Delegate=yes satpoint …`` gives satpoint a delegated cgroup of its own where it does.

A satpoint killed with SIGKILL leaves its cgroups behind (empty once its server died): the first cgroup
made by a later satpoint removes every ``satpoint-PID…`` cgroup of a PID that no longer exists beside it
(one that still holds processes is left alone).

``check_available`` tries all this once (an empty probe cgroup, made and removed) so a knob that cannot
work is refused before anything starts, with one line saying why."""

from __future__ import annotations

import contextlib
import math
import os
import re
import secrets
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from satpoint.metrics.cgroup_fs import ControllerDir, process_dirs, read_stats
from satpoint.servers.limits import cgroup_v2
from satpoint.servers.limits.cgroup_v2 import CgroupUnavailable

__all__ = [
    "CPU_PERIOD_US",
    "CgroupUnavailable",
    "ChildCgroup",
    "ResourceLimits",
    "check_available",
    "memory_text",
    "parse_cpu_limit",
    "parse_memory",
]

#: the CFS period Kubernetes uses (kubelet ``--cpu-cfs-quota-period`` default)
CPU_PERIOD_US = 100_000
#: the kernel's smallest quota (1 ms)
MIN_QUOTA_US = 1_000
_REMOVE_TIMEOUT_S = 5.0
_swept = False  # the cgroups of dead satpoints removed (once per process)
_ENTER = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 71; shift; n=$((n - 1)); done; exec "$@"'
# Kubernetes quantities: decimal (k, M, G, T) and binary (Ki, Mi, Gi, Ti) suffixes
_UNITS = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_UNITS |= {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKMGT]i?|)\s*[bB]?\s*$")


def parse_memory(text: str) -> int:
    """A memory limit in bytes from a Kubernetes quantity: ``256M`` (10^6), ``256Mi`` (2^20), ``1G``,
    ``1.5Gi``, plain bytes; a ValueError otherwise."""
    m = _QUANTITY.match(str(text))
    if m is None or m.group(2) not in _UNITS:
        raise ValueError(f"a memory limit is a size such as 256M, 512Mi or 1G; got {text!r}")
    value = int(float(m.group(1)) * _UNITS[m.group(2)])
    if value < 2**20:
        raise ValueError(f"a memory limit below 1 MiB cannot hold a server; got {text!r}")
    return value


def memory_text(n_bytes: float) -> str:
    """A memory size as people read it: ``256 MB`` for 256M, ``512 MiB`` for 512Mi."""
    if n_bytes % 2**20 == 0 and n_bytes % 10**6 != 0:
        return f"{n_bytes / 2**20:g} MiB"
    return f"{n_bytes / 1e6:.4g} MB"


def parse_cpu_limit(text: str | float) -> float:
    """A CPU limit in cores (``1.5``, or Kubernetes millicores ``1500m``); a ValueError otherwise."""
    raw = str(text).strip()
    try:
        cores = float(raw[:-1]) / 1000 if raw.endswith("m") else float(raw)
    except ValueError:
        raise ValueError(f"a CPU limit is a number of cores (0.5, 1.5) or millicores (500m); got {text!r}") from None
    if not math.isfinite(cores) or cores * CPU_PERIOD_US < MIN_QUOTA_US:
        raise ValueError(f"a CPU limit must be at least 0.01 cores (1 ms per 100 ms period); got {text!r}")
    return cores


@dataclass(frozen=True)
class ResourceLimits:
    """What a server is limited to, as Kubernetes ``resources.limits``: ``cpu_cores`` (a CFS quota) and
    ``memory_bytes`` (a cgroup memory limit); None: no limit of that kind."""

    cpu_cores: float | None = None
    memory_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.cpu_cores is not None:
            parse_cpu_limit(self.cpu_cores)
        if self.memory_bytes is not None and self.memory_bytes < 2**20:
            raise ValueError(f"memory_bytes must be at least 1 MiB, got {self.memory_bytes}")

    @property
    def any(self) -> bool:
        return self.cpu_cores is not None or self.memory_bytes is not None

    @property
    def controllers(self) -> tuple[str, ...]:
        return (("cpu",) if self.cpu_cores is not None else ()) + (("memory",) if self.memory_bytes else ())

    @property
    def quota_us(self) -> int | None:
        return None if self.cpu_cores is None else max(MIN_QUOTA_US, round(self.cpu_cores * CPU_PERIOD_US))

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpu_limit_cores": self.cpu_cores,
            "cpu_quota_us": self.quota_us,
            "cpu_period_us": CPU_PERIOD_US if self.cpu_cores is not None else None,
            "memory_limit_bytes": self.memory_bytes,
        }


def _what(limits: ResourceLimits) -> str:
    parts = []
    if limits.cpu_cores is not None:
        parts.append(f"a CPU limit ({limits.cpu_cores:g} cores)")
    if limits.memory_bytes is not None:
        parts.append(f"a memory limit ({memory_text(limits.memory_bytes)})")
    return " and ".join(parts)


def own_dirs(controllers: Sequence[str]) -> dict[str, ControllerDir]:
    """satpoint's own cgroup folder per controller; ``CgroupUnavailable`` naming the first one missing."""
    found, why = process_dirs("self", tuple(controllers))
    for c in controllers:
        if c not in found:
            raise CgroupUnavailable(why.get(c, f"no {c} cgroup found"))
    return {c: cgroup_v2.unmoved(d) for c, d in found.items()}  # v2: the cgroup satpoint_PID/self is under


class ChildCgroup:
    """A child cgroup of satpoint's own, per controller, with the limits set; see the module docstring."""

    def __init__(self, limits: ResourceLimits, dirs: Mapping[str, ControllerDir]) -> None:
        self.limits = limits
        self.dirs = dict(dirs)
        self.final: dict[str, float] | None = None  # the counters read just before removal
        self.removed = False
        self.run: Path | None = None  # v2: satpoint's own cgroup this is a leaf of (``cgroup_v2.enter``)

    @classmethod
    def create(
        cls, limits: ResourceLimits, *, parents: Mapping[str, ControllerDir] | None = None, name: str | None = None
    ) -> ChildCgroup:
        """Make the child cgroups under ``parents`` (default: satpoint's own) and set the limits; on any
        failure remove what was made and raise ``CgroupUnavailable`` saying why."""
        if not limits.any:
            raise ValueError("no limit to apply")
        parents = dict(parents) if parents is not None else own_dirs(limits.controllers)
        global _swept
        if not _swept:  # once per process: the cgroups of satpoints killed before they could remove them
            _swept = True
            cgroup_v2.sweep(d.path for d in parents.values())
        name = name or f"satpoint-{os.getpid()}-{secrets.token_hex(3)}"
        child = cls(limits, {})
        made = child.dirs  # filled as the folders are made: a failure removes exactly those
        try:
            v2 = [c for c in limits.controllers if parents[c].version == 2]
            for c in limits.controllers:
                parent = parents[c]
                base = parent.path
                if parent.version == 2:  # satpoint's own cgroup, itself in its leaf, the controllers enabled
                    child.run = base = cgroup_v2.enter(parent, v2)
                path = base / name
                if c == "memory" and "cpu" in made and made["cpu"].path == path:
                    made[c] = ControllerDir(c, parent.version, path, made["cpu"].cgroup)  # one v2 cgroup, both
                    continue
                try:
                    cgroup_v2.mkdir(path)
                except OSError as e:
                    raise CgroupUnavailable(f"cannot create a cgroup in {base}: {e.strerror or e}") from None
                inside = parent.cgroup.rstrip("/") + "/" + (f"{base.name}/{name}" if base != parent.path else name)
                made[c] = ControllerDir(c, parent.version, path, inside)
            for c, d in made.items():
                if c == "cpu":
                    _set_cpu(d, limits)
                else:
                    _set_memory(d, limits)
        except BaseException:
            child.remove()
            raise
        return child

    @property
    def procs_files(self) -> list[Path]:
        return list(dict.fromkeys(d.path / "cgroup.procs" for d in self.dirs.values()))

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this cgroup from its first instruction (``sh`` joins it, then ``exec``s)."""
        sh = shutil.which("sh") or "/bin/sh"
        files = [str(f) for f in self.procs_files]
        return [sh, "-c", _ENTER, "satpoint-cgroup", str(len(files)), *files, *argv]

    def pids(self) -> list[int]:
        out: set[int] = set()
        for f in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                out.update(int(x) for x in cgroup_v2.read(f).split())
        return sorted(out)

    def stats(self) -> dict[str, float]:
        """Throttling, memory peak and OOM kills so far (after ``remove``: as they were just before)."""
        if self.removed:
            return dict(self.final or {})
        return read_stats(self.dirs.get("cpu"), self.dirs.get("memory"))

    def oom_kills(self) -> int:
        n = self.stats().get("oom_kills", math.nan)
        return int(n) if math.isfinite(n) else 0

    def oom_message(self) -> str | None:
        """``killed by the memory limit at N MB (…)`` when the kernel OOM-killed a process here, else None."""
        st = self.stats()
        n = self.oom_kills()
        if not n or self.limits.memory_bytes is None:
            return None
        peak = st.get("memory_peak_bytes", math.nan)
        seen = f", peak {memory_text(peak)}" if math.isfinite(peak) else ""
        return (
            f"killed by the memory limit at {memory_text(self.limits.memory_bytes)} "
            f"({n} out-of-memory kill{'s' if n > 1 else ''} in its cgroup{seen})"
        )

    def remove(self, timeout_s: float = _REMOVE_TIMEOUT_S) -> None:
        """Read the counters one last time, kill what is left inside (processes started in it: ours), wait
        until it is empty and remove it.  Idempotent; raises ``OSError`` when a folder cannot be removed."""
        if self.removed:
            return
        self.final = read_stats(self.dirs.get("cpu"), self.dirs.get("memory"))
        deadline = time.monotonic() + timeout_s
        killed = False
        while (left := self.pids()) and time.monotonic() < deadline:
            if not killed and time.monotonic() > deadline - timeout_s / 2:
                for pid in left:  # only our server's processes can be in a cgroup satpoint made for it
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                killed = True
            time.sleep(0.05)
        errors = []
        for path in dict.fromkeys(d.path for d in self.dirs.values()):
            for _ in range(50):
                try:
                    cgroup_v2.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        errors.append(f"{path}: {e.strerror or e}")
                        break
                    time.sleep(0.05)
        self.removed = True
        if self.run is not None and not errors:
            cgroup_v2.leave(self.run)  # the last leaf gone: satpoint back where it was
        if errors:
            raise OSError("could not remove the server's cgroup: " + "; ".join(errors))

    def info(self) -> dict[str, Any]:
        """For the results header: the limits, the cgroup folders, and the counters now (or final)."""
        st = self.stats()
        return {
            **self.limits.to_dict(),
            "cgroups": {c: {"version": d.version, "path": str(d.path)} for c, d in self.dirs.items()},
            "stats": {k: (v if math.isfinite(v) else None) for k, v in st.items()},
        }


def _write(path: Path, value: str) -> None:
    try:
        cgroup_v2.put(path, value)
    except OSError as e:
        raise CgroupUnavailable(f"cannot write {value.strip()!r} to {path}: {e.strerror or e}") from None


def _set_cpu(d: ControllerDir, limits: ResourceLimits) -> None:
    quota = limits.quota_us
    assert quota is not None
    if d.version == 1:
        _write(d.path / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(d.path / "cpu.cfs_quota_us", str(quota))
    else:
        _write(d.path / "cpu.max", f"{quota} {CPU_PERIOD_US}")


def _set_memory(d: ControllerDir, limits: ResourceLimits) -> None:
    limit = str(limits.memory_bytes)
    if d.version == 2:
        _write(d.path / "memory.max", limit)
        if (d.path / "memory.swap.max").exists():
            _write(d.path / "memory.swap.max", "0")  # as Kubernetes without swap: the limit is the memory
        return
    memsw = d.path / "memory.memsw.limit_in_bytes"
    try:
        (d.path / "memory.limit_in_bytes").write_text(limit)
    except OSError:
        # memory+swap must stay >= memory: when it is the lower one, it goes first
        if not memsw.exists():
            raise
        _write(memsw, limit)
        _write(d.path / "memory.limit_in_bytes", limit)
    if memsw.exists():
        _write(memsw, limit)  # no swap beyond the limit (none is configured on most hosts anyway)


def check_available(limits: ResourceLimits, *, parents: Mapping[str, ControllerDir] | None = None) -> None:
    """Refuse ``limits`` that cannot be applied here, before anything starts: a ``CgroupUnavailable``
    with one line saying why (controller absent, no permission, read-only cgroupfs…).  Makes an empty
    probe cgroup with the limits and removes it."""
    if not limits.any:
        return
    try:
        ChildCgroup.create(
            limits, parents=parents, name=f"satpoint-probe-{os.getpid()}-{secrets.token_hex(3)}"
        ).remove()
    except CgroupUnavailable as e:
        raise CgroupUnavailable(f"{_what(limits)} cannot be applied on this machine: {e}") from None
    except OSError as e:
        raise CgroupUnavailable(f"{_what(limits)} cannot be applied on this machine: {e}") from None
