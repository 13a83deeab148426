"""Where a process's cgroups are and what their counters say, read-only (cgroup v1 and v2).

A process's cgroup per controller comes from ``/proc/PID/cgroup`` (``id:controllers:path``; the v2 line is
``0::path``) and the mount of each hierarchy from ``/proc/self/mountinfo`` (mount point, and in field 4 the
root of the hierarchy the mount shows: under a cgroup namespace it is not ``/``).  Nothing is assumed about
paths: v1 controllers may be mounted one per hierarchy (``/sys/fs/cgroup/cpu``) or together
(``/sys/fs/cgroup/cpu,cpuacct``), and cgroup2 may sit at ``/sys/fs/cgroup`` or ``/sys/fs/cgroup/unified``
(hybrid layouts).  A controller is taken from v1 when a v1 hierarchy has it, else from v2 when the v2
cgroup lists it in ``cgroup.controllers``.

The counters satpoint reports (``read_stats``): CFS bandwidth (``cpu.stat``: ``nr_periods``,
``nr_throttled``, and ``throttled_time`` in ns on v1 / ``throttled_usec`` on v2), the memory peak (v1
``memory.max_usage_in_bytes``, v2 ``memory.peak``), current usage and OOM kills (v1 ``memory.oom_control``
``oom_kill``, v2 ``memory.events`` ``oom_kill``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "STAT_KEYS",
    "ControllerDir",
    "Hierarchy",
    "controller_dirs",
    "parse_key_values",
    "parse_membership",
    "parse_mountinfo",
    "read_stats",
]

#: the counters of ``read_stats`` (NaN where not readable)
STAT_KEYS = ("periods", "throttled_periods", "throttled_s", "memory_peak_bytes", "memory_bytes", "oom_kills")


@dataclass(frozen=True)
class Hierarchy:
    """One mounted cgroup hierarchy: its version, controllers (v1: from the mount's options; v2: empty,
    read per cgroup), the hierarchy path the mount shows at its mount point, and that mount point."""

    version: int
    controllers: frozenset[str]
    root: str
    mount_point: Path


@dataclass(frozen=True)
class ControllerDir:
    """A controller's cgroup folder for one process."""

    controller: str
    version: int
    path: Path
    #: the cgroup's path inside its hierarchy (as ``/proc/PID/cgroup`` says)
    cgroup: str


def _unescape(field: str) -> str:
    """Mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Hierarchy]:
    """The cgroup (v1) and cgroup2 mounts of a ``/proc/PID/mountinfo`` text, in order."""
    out: list[Hierarchy] = []
    for line in text.splitlines():
        parts = line.split()
        if "-" not in parts:
            continue
        sep = parts.index("-")
        if sep < 6 or len(parts) < sep + 3:
            continue
        fstype, super_opts = parts[sep + 1], parts[sep + 3] if len(parts) > sep + 3 else ""
        root, mount_point = _unescape(parts[3]), Path(_unescape(parts[4]))
        if fstype == "cgroup2":
            out.append(Hierarchy(2, frozenset(), root, mount_point))
        elif fstype == "cgroup":
            opts = {o for o in super_opts.split(",") if o and "=" not in o and o not in ("rw", "ro")}
            out.append(Hierarchy(1, frozenset(opts), root, mount_point))
    return out


def parse_membership(text: str) -> list[tuple[int, frozenset[str], str]]:
    """``/proc/PID/cgroup`` as (version, controllers, path); the v2 line has version 2 and no controllers."""
    out: list[tuple[int, frozenset[str], str]] = []
    for line in text.splitlines():
        hid, sep1, rest = line.partition(":")
        ctrls, sep2, path = rest.partition(":")
        if not sep1 or not sep2:
            continue
        if hid == "0" and ctrls == "":
            out.append((2, frozenset(), path))
        else:
            out.append((1, frozenset(c for c in ctrls.split(",") if c), path))
    return out


def _inside(mount: Hierarchy, path: str) -> Path | None:
    """The folder of cgroup ``path`` under ``mount`` (None when the mount does not show it)."""
    root = mount.root.rstrip("/")
    if root and path != root and not path.startswith(root + "/"):
        return None
    rel = path[len(root) :].lstrip("/")
    return mount.mount_point / rel if rel else mount.mount_point


def controller_dirs(
    controllers: tuple[str, ...], membership: str, mountinfo: str
) -> tuple[dict[str, ControllerDir], dict[str, str]]:
    """Each controller's cgroup folder for the process whose ``/proc/PID/cgroup`` is ``membership``, and for
    each controller not found, why (not mounted, the cgroup not visible in this mount namespace, not
    enabled on cgroup v2)."""
    mounts = parse_mountinfo(mountinfo)
    lines = parse_membership(membership)
    found: dict[str, ControllerDir] = {}
    why: dict[str, str] = {}
    for c in controllers:
        v1 = next((m for m in mounts if m.version == 1 and c in m.controllers), None)
        if v1 is not None:
            line = next((p for v, cs, p in lines if v == 1 and c in cs), None)
            folder = _inside(v1, line) if line is not None else None
            if line is None or folder is None:
                why[c] = f"the process's cgroup v1 {c} path is not under the {c} mount at {v1.mount_point}"
                continue
            found[c] = ControllerDir(c, 1, folder, line)
            continue
        v2 = next((m for m in mounts if m.version == 2), None)
        line2 = next((p for v, _, p in lines if v == 2), None)
        if v2 is None or line2 is None:
            why[c] = f"the {c} controller is not mounted (no cgroup v1 {c} hierarchy, no cgroup2 mount)"
            continue
        folder = _inside(v2, line2)
        if folder is None:
            why[c] = f"the process's cgroup2 path {line2} is not under the cgroup2 mount at {v2.mount_point}"
            continue
        try:
            enabled = (folder / "cgroup.controllers").read_text().split()
        except OSError as e:
            why[c] = f"cannot read {folder / 'cgroup.controllers'}: {e.strerror or e}"
            continue
        if c not in enabled:
            shown = " ".join(enabled) or "none"
            why[c] = f"cgroup v2 at {v2.mount_point} offers no {c} controller here (cgroup.controllers: {shown})"
            continue
        found[c] = ControllerDir(c, 2, folder, line2)
    return found, why


def process_dirs(
    pid: int | str, controllers: tuple[str, ...] = ("cpu", "memory")
) -> tuple[dict[str, ControllerDir], dict[str, str]]:
    """``controller_dirs`` of a live process (``"self"`` for this one)."""
    try:
        membership = Path(f"/proc/{pid}/cgroup").read_text()
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError as e:
        return {}, {c: f"cannot read the process's cgroups: {e.strerror or e}" for c in controllers}
    return controller_dirs(controllers, membership, mountinfo)


def parse_key_values(text: str) -> dict[str, int]:
    """A flat-keyed cgroup file (``cpu.stat``, ``memory.events``, ``memory.oom_control``) as numbers."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        try:
            out[key] = int(value.strip())
        except ValueError:
            continue
    return out


def _read_int(path: Path) -> float:
    try:
        return float(int(path.read_text().strip()))
    except (OSError, ValueError):
        return math.nan


def _read_kv(path: Path) -> dict[str, int]:
    try:
        return parse_key_values(path.read_text())
    except OSError:
        return {}


def read_stats(cpu: ControllerDir | None, memory: ControllerDir | None) -> dict[str, float]:
    """The counters of ``STAT_KEYS`` (cumulative since the cgroup was made; NaN where not readable)."""
    out = dict.fromkeys(STAT_KEYS, math.nan)
    if cpu is not None:
        st = _read_kv(cpu.path / "cpu.stat")
        if "nr_periods" in st:
            out["periods"] = float(st["nr_periods"])
            out["throttled_periods"] = float(st.get("nr_throttled", 0))
            if cpu.version == 1:
                out["throttled_s"] = st.get("throttled_time", 0) / 1e9
            else:
                out["throttled_s"] = st.get("throttled_usec", 0) / 1e6
    if memory is not None:
        if memory.version == 1:
            out["memory_peak_bytes"] = _read_int(memory.path / "memory.max_usage_in_bytes")
            out["memory_bytes"] = _read_int(memory.path / "memory.usage_in_bytes")
            oom = _read_kv(memory.path / "memory.oom_control")
        else:
            out["memory_peak_bytes"] = _read_int(memory.path / "memory.peak")
            out["memory_bytes"] = _read_int(memory.path / "memory.current")
            oom = _read_kv(memory.path / "memory.events")
        if "oom_kill" in oom:
            out["oom_kills"] = float(oom["oom_kill"])
    return out
