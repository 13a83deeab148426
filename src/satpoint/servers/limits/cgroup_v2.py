"""satpoint's own cgroup on cgroup v2, so that a server's cgroup can have controllers; and the sweep of the
cgroups a killed satpoint left behind.  Used by ``servers.limits.cgroups`` (the module docstring there says why).

The kernel's rules this follows (Documentation/admin-guide/cgroup-v2.rst):

- a controller is enabled for a cgroup's children in its ``cgroup.subtree_control`` (``+cpu``); only a
  controller listed in its ``cgroup.controllers`` (enabled by its own parent) can be;
- "no internal processes": a non-root cgroup with controllers in ``cgroup.subtree_control`` holds no
  processes: enabling one while it holds any is refused (``EBUSY``), and so is moving a process into it;
- a controller cannot be disabled while a child has it in its own ``cgroup.subtree_control``;
- a process moves by writing its pid to the destination's ``cgroup.procs`` (all its threads with it); a
  cgroup is removed by ``rmdir`` once it holds no process and no child cgroup.

``enter(parent, controllers)`` makes ``parent/satpoint-PID/``, moves satpoint (and the processes it started
that are still in ``parent``) into its leaf ``self/``, then enables the controllers in ``parent`` and in
``satpoint-PID/``; a server's cgroup is a leaf made beside ``self/``.  ``leave(run)`` undoes it once no
server leaf is left.  Every file access goes through ``read``/``put``/``mkdir``/``rmdir`` here (the tests
put a model of the kernel's rules in their place)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from satpoint.errors import ConfigError
from satpoint.metrics.cgroup_fs import ControllerDir

__all__ = ["SELF", "CgroupUnavailable", "enter", "leave", "read", "run_name", "sweep", "unmoved"]

#: the leaf of satpoint's own cgroup that satpoint itself moves into
SELF = "self"
#: the cgroups satpoint makes: ``satpoint-PID`` (v2, its own), ``satpoint-PID-XXXXXX`` and
#: ``satpoint-probe-PID-XXXXXX`` (a server's or a probe's, v1 and v2)
_OURS = re.compile(r"^satpoint-(?:probe-)?(\d+)(?:-[0-9a-f]{6})?$")
_LOCK = threading.RLock()
#: run cgroup -> the controllers satpoint enabled in its parent (disabled again by ``leave``)
_RUNS: dict[Path, list[str]] = {}


class CgroupUnavailable(ConfigError):
    """A CPU or memory limit cannot be applied on this machine; the message says why."""


def read(path: Path) -> str:
    return path.read_text()


def put(path: Path, value: str) -> None:
    path.write_text(value)


def mkdir(path: Path) -> None:
    path.mkdir()


def rmdir(path: Path) -> None:
    path.rmdir()


def run_name(pid: int | None = None) -> str:
    """The name of satpoint's own cgroup (v2): ``satpoint-PID``."""
    return f"satpoint-{os.getpid() if pid is None else pid}"


def unmoved(d: ControllerDir) -> ControllerDir:
    """satpoint's cgroup as it was before it moved itself into ``satpoint-PID/self`` (``d`` otherwise)."""
    if d.version != 2 or d.path.name != SELF or d.path.parent.name != run_name():
        return d
    cgroup = d.cgroup.rstrip("/").rsplit("/", 2)[0] or "/"
    return ControllerDir(d.controller, 2, d.path.parent.parent, cgroup)


def _enabled(cg: Path) -> list[str]:
    return read(cg / "cgroup.subtree_control").split()


def _procs(cg: Path) -> list[int]:
    try:
        return [int(x) for x in read(cg / "cgroup.procs").split()]
    except (OSError, ValueError):
        return []


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _ours(pids: Iterable[int]) -> list[int]:
    """satpoint's process and those of ``pids`` it started (its descendants), satpoint first."""
    me = os.getpid()
    out = [me]
    for pid in pids:
        p, hops = pid, 0
        while p > 1 and p != me and hops < 64:
            p, hops = _ppid(p), hops + 1
        if p == me and pid != me:
            out.append(pid)
    return out


def _move(pids: Iterable[int], to: Path) -> None:
    for pid in pids:
        try:
            put(to / "cgroup.procs", str(pid))
        except ProcessLookupError:
            continue  # gone meanwhile
        except OSError as e:
            if e.errno != errno.ESRCH:
                raise


def _refusal(parent: ControllerDir, controller: str, e: OSError, others: int) -> str:
    why = f"{e.strerror or e}"
    if others:
        why += (
            f"; {others} process{'es' if others > 1 else ''} other than satpoint's share that cgroup, and the "
            "kernel refuses while it holds any"
        )
    return (
        f"cgroup v2: the {controller} controller cannot be enabled for children of satpoint's cgroup "
        f"{parent.cgroup} ({why}): run satpoint in a cgroup of its own with the controllers delegated, e.g. "
        "systemd-run --scope -p Delegate=yes satpoint …"
    )


def enter(parent: ControllerDir, controllers: Sequence[str]) -> Path:
    """``parent/satpoint-PID/`` with satpoint in its ``self/`` leaf and ``controllers`` enabled for its
    children (made on first use, kept while it has server leaves); on any failure everything this call made
    is undone and a ``CgroupUnavailable`` says why in one line."""
    run = parent.path / run_name()
    with _LOCK:
        if run not in _RUNS:
            try:
                with contextlib.suppress(FileExistsError):
                    mkdir(run)
                with contextlib.suppress(FileExistsError):
                    mkdir(run / SELF)
            except OSError as e:
                _release(run)
                raise CgroupUnavailable(f"cannot create a cgroup in {parent.path}: {e.strerror or e}") from None
            _RUNS[run] = []
            try:
                _move(_ours(_procs(parent.path)), run / SELF)
            except OSError as e:
                _release(run)
                raise CgroupUnavailable(f"cannot move satpoint into {run / SELF}: {e.strerror or e}") from None
        try:
            _enable(parent, run, controllers)
        except BaseException:
            leave(run)
            raise
        return run


def _enable(parent: ControllerDir, run: Path, controllers: Sequence[str]) -> None:
    for c in controllers:
        try:
            in_parent = _enabled(parent.path)
            if c not in in_parent:
                try:
                    put(parent.path / "cgroup.subtree_control", f"+{c}")
                except OSError as e:
                    raise CgroupUnavailable(_refusal(parent, c, e, len(_procs(parent.path)))) from None
                _RUNS[run].append(c)
            if c not in _enabled(run):
                put(run / "cgroup.subtree_control", f"+{c}")
        except OSError as e:
            raise CgroupUnavailable(f"cannot enable {c} for the cgroups under {run}: {e.strerror or e}") from None


def _leaves(run: Path) -> list[Path]:
    try:
        return [p for p in run.iterdir() if p.is_dir() and p.name != SELF]
    except OSError:
        return []


def leave(run: Path) -> None:
    """Undo ``enter`` once ``run`` has no server leaf left: the controllers disabled again (in ``run`` and
    those satpoint enabled in its parent), satpoint's processes back in the parent, ``run`` removed.  What
    cannot be undone stays, for the sweep of a later satpoint once this one has exited."""
    with _LOCK:
        if run in _RUNS and not _leaves(run):
            _release(run)


def _release(run: Path) -> None:
    enabled_in_parent = _RUNS.pop(run, [])
    parent = run.parent
    with contextlib.suppress(OSError):
        for c in _enabled(run):
            put(run / "cgroup.subtree_control", f"-{c}")
    for c in reversed(enabled_in_parent):
        with contextlib.suppress(OSError):
            put(parent / "cgroup.subtree_control", f"-{c}")
    try:
        _move(_procs(run / SELF), parent)
    except OSError:
        return
    with contextlib.suppress(OSError):
        rmdir(run / SELF)
        rmdir(run)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_tree(path: Path) -> bool:
    try:
        for child in [p for p in path.iterdir() if p.is_dir()]:
            if not _remove_tree(child):
                return False
        rmdir(path)
    except OSError:
        return False
    return True


def sweep(parents: Iterable[Path]) -> list[Path]:
    """Remove the cgroups satpoint made (``satpoint-PID…``) directly under ``parents`` whose PID no longer
    exists (a satpoint killed with SIGKILL); one still holding a process is left alone.  What was removed."""
    removed: list[Path] = []
    for parent in dict.fromkeys(parents):
        try:
            entries = sorted(p for p in parent.iterdir() if p.is_dir())
        except OSError:
            continue
        for entry in entries:
            m = _OURS.match(entry.name)
            if m is None or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
                continue
            if _remove_tree(entry):
                removed.append(entry)
    return removed
