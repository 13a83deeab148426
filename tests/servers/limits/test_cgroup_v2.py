"""Cgroup v2: satpoint makes a cgroup of its own (``satpoint-PID/``), moves itself into its ``self/`` leaf and
only then enables the controllers, so a server's leaf beside it can be limited; what a SIGKILLed satpoint left
behind is swept at the next start.

On ``KernelModel``, a fake tree that keeps the kernel's rules (Documentation/admin-guide/cgroup-v2.rst: no
controller enabled in a non-root cgroup holding processes, no process moved into one with controllers
enabled, no controller disabled while a child uses it, rmdir only when empty), and once on this machine's
real cgroup2 hierarchy with whatever controller it offers (as root)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from satpoint.metrics.cgroup_fs import ControllerDir, parse_mountinfo
from satpoint.servers.limits import cgroup_v2, cgroups
from satpoint.servers.limits.cgroups import CgroupUnavailable, ChildCgroup, ResourceLimits, check_available


def _busy() -> OSError:
    return OSError(errno.EBUSY, os.strerror(errno.EBUSY))


class KernelModel:
    """cgroup v2 as the kernel keeps it: real folders under ``root`` (so ``iterdir`` works), the interface
    files' contents in dictionaries; installed in place of ``cgroup_v2``'s file accesses."""

    def __init__(self, root: Path, controllers: tuple[str, ...] = ("cpu", "memory")) -> None:
        self.root = root
        self.procs: dict[Path, set[int]] = {root: set()}
        self.subtree: dict[Path, set[str]] = {root: set(controllers)}
        self.offered = set(controllers)
        self.files: dict[Path, str] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> KernelModel:
        for name in ("read", "put", "mkdir", "rmdir"):
            monkeypatch.setattr(cgroup_v2, name, getattr(self, name))
        monkeypatch.setattr(cgroups, "_swept", True)
        return self

    def make(self, name: str, procs: tuple[int, ...] = ()) -> Path:
        path = self.root / name
        self.mkdir(path)
        for pid in procs:
            self.put(path / "cgroup.procs", str(pid))
        return path

    def controllers(self, cg: Path) -> set[str]:
        return self.offered if cg == self.root else set(self.subtree[cg.parent])

    def mkdir(self, path: Path) -> None:
        if path.parent not in self.procs:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        if path in self.procs:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
        path.mkdir()
        self.procs[path], self.subtree[path] = set(), set()

    def rmdir(self, path: Path) -> None:
        if path not in self.procs:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        if self.procs[path] or any(p.parent == path for p in self.procs):
            raise _busy()
        del self.procs[path], self.subtree[path]
        self.files = {f: v for f, v in self.files.items() if f.parent != path}
        path.rmdir()

    def read(self, path: Path) -> str:
        cg, name = path.parent, path.name
        if cg not in self.procs:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        if name == "cgroup.procs":
            return "".join(f"{p}\n" for p in sorted(self.procs[cg]))
        if name == "cgroup.subtree_control":
            return " ".join(sorted(self.subtree[cg])) + "\n"
        if name == "cgroup.controllers":
            return " ".join(sorted(self.controllers(cg))) + "\n"
        if path in self.files:
            return self.files[path]
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))

    def put(self, path: Path, value: str) -> None:
        cg, name = path.parent, path.name
        if cg not in self.procs:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        if name == "cgroup.procs":
            pid = int(value)
            if cg != self.root and self.subtree[cg]:
                raise _busy()  # no process into a cgroup whose controllers are enabled for its children
            for members in self.procs.values():
                members.discard(pid)
            self.procs[cg].add(pid)
        elif name == "cgroup.subtree_control":
            for token in value.split():
                op, c = token[0], token[1:]
                if op == "+":
                    if c not in self.controllers(cg):
                        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
                    if cg != self.root and self.procs[cg]:
                        raise _busy()  # "no internal processes"
                    self.subtree[cg].add(c)
                else:
                    if any(c in self.subtree[k] for k in self.procs if k.parent == cg):
                        raise _busy()
                    self.subtree[cg].discard(c)
        else:
            if name.split(".")[0] not in self.controllers(cg):
                raise PermissionError(errno.EACCES, "no such interface file")  # absent without the controller
            self.files[path] = value


def _v2(kernel: KernelModel, cg: Path) -> dict[str, ControllerDir]:
    return {c: ControllerDir(c, 2, cg, "/" + cg.name) for c in ("cpu", "memory")}


ME = os.getpid()
LIMITS = ResourceLimits(cpu_cores=1.5, memory_bytes=2**30)


def test_the_kernel_model_refuses_what_the_kernel_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = KernelModel(tmp_path).install(monkeypatch)
    scope = kernel.make("scope", (ME,))
    with pytest.raises(OSError, match="busy"):
        kernel.put(scope / "cgroup.subtree_control", "+cpu")  # what satpoint used to do in its own cgroup
    kernel.make("scope/leaf")
    kernel.put(scope / "cgroup.procs", "1")
    kernel.put(scope / "leaf/cgroup.procs", "1")
    with pytest.raises(OSError, match="busy"):
        kernel.put(scope / "cgroup.subtree_control", "+cpu")  # satpoint is still there
    kernel.put(scope / "leaf/cgroup.procs", str(ME))
    kernel.put(scope / "cgroup.subtree_control", "+cpu")
    with pytest.raises(OSError, match="busy"):
        kernel.put(scope / "cgroup.procs", str(ME))


def test_satpoint_moves_itself_into_a_leaf_of_its_own_cgroup_and_the_server_leaf_is_limited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = KernelModel(tmp_path).install(monkeypatch)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])  # a process satpoint started
    try:
        scope = kernel.make("scope", (ME, child.pid))  # systemd-run --scope -p Delegate=yes satpoint …
        cg = ChildCgroup.create(LIMITS, parents=_v2(kernel, scope), name="server-a")
        run = scope / f"satpoint-{ME}"
        assert kernel.procs[scope] == set() and kernel.procs[run / "self"] == {ME, child.pid}
        assert kernel.subtree[scope] == {"cpu", "memory"} and kernel.subtree[run] == {"cpu", "memory"}
        assert kernel.files[run / "server-a/cpu.max"] == "150000 100000"
        assert kernel.files[run / "server-a/memory.max"] == str(2**30)
        assert cg.procs_files == [run / "server-a/cgroup.procs"]
        assert cg.dirs["cpu"].cgroup == f"/scope/satpoint-{ME}/server-a"
        kernel.put(run / "server-a/cgroup.procs", "4242")  # the server, as wrap() puts it there
        assert cg.pids() == [4242]
        second = ChildCgroup.create(LIMITS, parents=_v2(kernel, scope), name="server-b")  # a leaf beside it
        kernel.procs[run / "server-a"].clear()  # the server exited
        cg.remove()
        assert run.is_dir() and kernel.procs[run / "self"] == {ME, child.pid}  # server-b is still there
        second.remove()
        # the last leaf gone: satpoint back where it was found, the controllers it enabled disabled again
        assert not run.exists() and kernel.procs[scope] == {ME, child.pid} and kernel.subtree[scope] == set()
    finally:
        child.kill()
        child.wait()


def test_refused_in_one_line_when_other_processes_share_satpoint_s_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = KernelModel(tmp_path).install(monkeypatch)
    session = kernel.make("session", (ME, 1))  # a login session: the shell is not satpoint's
    with pytest.raises(CgroupUnavailable) as e:
        check_available(ResourceLimits(cpu_cores=1.0), parents=_v2(kernel, session))
    msg = str(e.value)
    assert msg.startswith("a CPU limit (1 cores) cannot be applied on this machine: cgroup v2: the cpu controller")
    assert "1 process other than satpoint's share that cgroup" in msg and "Delegate=yes" in msg and "\n" not in msg
    assert kernel.procs[session] == {ME, 1} and kernel.subtree[session] == set()  # as it was
    assert [p.name for p in session.iterdir()] == []  # nothing left behind


def test_own_cgroup_after_the_move_is_the_one_it_was() -> None:
    moved = ControllerDir("cpu", 2, Path(f"/sys/fs/cgroup/a.scope/satpoint-{ME}/self"), f"/a.scope/satpoint-{ME}/self")
    assert cgroup_v2.unmoved(moved) == ControllerDir("cpu", 2, Path("/sys/fs/cgroup/a.scope"), "/a.scope")
    other = ControllerDir("cpu", 2, Path("/sys/fs/cgroup/satpoint-1/self"), "/satpoint-1/self")
    assert cgroup_v2.unmoved(other) == other  # another satpoint's


def _dead_pid() -> int:
    for pid in range(32_000, 2_000, -1):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            continue
    raise AssertionError("no free pid found")


def test_the_cgroups_of_dead_satpoints_are_swept_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = KernelModel(tmp_path).install(monkeypatch)
    monkeypatch.setattr(cgroups, "_swept", False)
    scope = kernel.make("scope")
    dead = _dead_pid()
    stale = [f"satpoint-{dead}", f"satpoint-{dead}/self", f"satpoint-{dead}/satpoint-{dead}-0a1b2c",
             f"satpoint-{dead}-abcdef", f"satpoint-probe-{dead}-abcdef"]  # fmt: skip
    for name in stale:
        kernel.make(f"scope/{name}")
    kept = ["satpoint-1-abcdef", f"satpoint-{dead}-fedcba", "other"]  # a live pid; one still holding a process
    for name in kept:
        kernel.make(f"scope/{name}")
    kernel.put(scope / f"satpoint-{dead}-fedcba/cgroup.procs", "1")
    kernel.put(scope / "cgroup.procs", str(ME))
    ChildCgroup.create(LIMITS, parents=_v2(kernel, scope), name="server-a").remove()
    assert sorted(p.name for p in scope.iterdir()) == sorted(kept)
    assert cgroups._swept


def _real_v2_controller() -> tuple[Path, str] | None:
    """This machine's cgroup2 mount and a controller its root offers, when satpoint runs as root."""
    if os.geteuid() != 0:
        return None
    try:
        mounts = [m for m in parse_mountinfo(Path("/proc/self/mountinfo").read_text()) if m.version == 2]
        if not mounts or mounts[0].root != "/":
            return None
        top = mounts[0].mount_point
        offered = (top / "cgroup.controllers").read_text().split()
    except OSError:
        return None
    return (top, offered[0]) if offered else None


_SCRIPT = textwrap.dedent(
    """
    import os, subprocess, sys
    from pathlib import Path
    from satpoint.metrics.cgroup_fs import ControllerDir
    from satpoint.servers.limits import cgroup_v2
    scope, c = Path(sys.argv[1]), sys.argv[2]
    (scope / "cgroup.procs").write_text(str(os.getpid()))  # satpoint started in a cgroup of its own
    try:
        (scope / "cgroup.subtree_control").write_text("+" + c)
        print("enabled in place")
    except OSError as e:
        print("refused in place", e.errno)
    parent = ControllerDir(c, 2, scope, "/" + scope.name)
    try:
        run = cgroup_v2.enter(parent, (c,))
    except cgroup_v2.CgroupUnavailable as e:
        print("refused:", e)
        print("in", Path("/proc/self/cgroup").read_text().strip().split(":")[-1])
        print("left", sorted(p.name for p in scope.iterdir() if p.is_dir()))
        sys.exit(0)
    print("in", Path("/proc/self/cgroup").read_text().strip().split(":")[-1])
    (run / "server").mkdir()
    print("leaf offers", (run / "server" / "cgroup.controllers").read_text().split())
    sh = "echo $$ > " + str(run / "server" / "cgroup.procs") + " && cat /proc/self/cgroup"
    print("server in", subprocess.run(["sh", "-c", sh], capture_output=True, text=True).stdout.strip().split(":")[-1])
    (run / "server").rmdir()
    cgroup_v2.leave(run)
    print("back in", Path("/proc/self/cgroup").read_text().strip().split(":")[-1])
    enabled = (scope / "cgroup.subtree_control").read_text().split()
    print("left", sorted(p.name for p in scope.iterdir() if p.is_dir()), enabled)
    """
)


@pytest.mark.skipif(_real_v2_controller() is None, reason="needs a cgroup2 mount offering a controller, as root")
def test_on_this_machine_s_cgroup2_the_layout_is_what_the_kernel_accepts() -> None:
    found = _real_v2_controller()
    assert found is not None
    top, c = found
    root_had = c in (top / "cgroup.subtree_control").read_text().split()
    scope = top / f"satpoint-test-{ME}"
    other: subprocess.Popen[bytes] | None = None
    try:
        if not root_had:
            (top / "cgroup.subtree_control").write_text(f"+{c}")  # the root cgroup may hold processes
        scope.mkdir()
        argv = [sys.executable, "-c", _SCRIPT, str(scope), c]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        out = done.stdout.splitlines()
        assert done.returncode == 0, done.stderr
        name = f"/{scope.name}"
        assert out[0] == f"refused in place {errno.EBUSY}"  # the kernel's rule, as satpoint met it before
        assert out[1].startswith(f"in {name}/satpoint-") and out[1].endswith("/self")
        assert out[2] == f"leaf offers [{c!r}]"
        assert out[3].startswith(f"server in {name}/satpoint-") and out[3].endswith("/server")
        assert out[4] == f"back in {name}" and out[5] == "left [] []"
        # the same with another process in the cgroup (a shell): refused, and everything as it was
        other = subprocess.Popen(["sleep", "30"])
        (scope / "cgroup.procs").write_text(str(other.pid))
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        out = done.stdout.splitlines()
        assert out[1].startswith(f"refused: cgroup v2: the {c} controller cannot be enabled"), done.stdout
        assert "1 process other than satpoint's" in out[1] and out[2] == f"in {name}" and out[3] == "left []"
    finally:
        if other is not None:
            other.kill()
            other.wait()
        for _ in range(50):
            try:
                scope.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
        if not root_had:
            (top / "cgroup.subtree_control").write_text(f"-{c}")
