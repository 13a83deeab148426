"""Where the generator's CPU goes per request: profilers attached to a running generator at a fixed rate.

Starts the target pinned to core 0 (REST: nginx as in ``generator_bench.py``; gRPC: the fixed-answer C++
server of ``grpc_bench.py``), runs one generator process pinned to core 1 at ``--rate`` (REST: the public
API through ``generator_bench.py --child``; gRPC: ``grpc_bench.py --child --client wire``, the real
``OpenLoopDispatcher`` over ``GrpcPool``), waits ``--settle`` s, then attaches one tool for ``--window`` s:

* ``spy``: ``py-spy record --native`` (stacks, collapsed, ``--rate`` samples/s), summarised by the leaf
  frame's kind (Python function, uvloop, httptools, a system call wrapper, numpy, ctypes...) and by the
  Python function nearest the leaf;
* ``spy-python``: ``py-spy record --nonblocking`` (Python stacks only, without pausing the process);
* ``perf``: ``perf record -g`` of the process, summarised by DSO (kernel, libpython, uvloop...) and by the
  top symbols: where the kernel's share goes (``write`` to loopback, ``epoll_wait``, ``read``);
* ``strace``: ``strace -c -f`` (the syscall mix; ptrace slows each call, so its times are inflated and
  only the counts are used);
* ``syscount``: ``perf stat`` of the syscall tracepoints (counts per request, cheap enough not to change
  the pattern) and context switches;
* ``alloc``: ``perf stat`` of uprobes on ``PyObject_Malloc``/``PyObject_Realloc``/``PyMem_Malloc`` in
  libpython (allocations that reach the allocator; free-listed floats and tuples do not), per request.

Every tool's profiler runs on core 0 (beside the target), never on the generator's core.  The window's
requests are ``rate x window`` (open loop: the schedule is fixed); the generator's user and system CPU
over the window come from ``/proc/PID/stat``.  Prints one JSON document (``--json`` writes it too).

    python benchmarks/hotpath_probe.py --transport rest --rate 5000 --tool spy --window 8

Loopback only; bounded (``--settle + --window + 60`` s); every process it starts is stopped by its PID.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generator_bench as gb  # noqa: E402  (beside this script)

LIBPYTHON_PROBES = ("PyObject_Malloc", "PyObject_Realloc", "PyMem_Malloc")


def proc_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far, its threads included."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(f[11]) / tck, int(f[12]) / tck


def libpython() -> str:
    import sysconfig

    return os.path.join(str(sysconfig.get_config_var("LIBDIR")), str(sysconfig.get_config_var("INSTSONAME")))


def leaf_kind(frame: str) -> str:
    """The kind of a py-spy frame: a Python function (file.py), or the native library it lives in."""
    m = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return "other"
    func, where = m.group(1), m.group(2)
    if where.endswith(".py"):
        return "python"
    base = os.path.basename(where)
    if "uvloop" in where or base.startswith("loop.cpython"):
        return "uvloop"
    if "httptools" in where:
        return "httptools"
    if "numpy" in where or "_multiarray" in base:
        return "numpy"
    if "ctypes" in base or "ffi" in base:
        return "ctypes/libffi"
    if base.startswith("libc") or base.startswith("libpthread"):
        sc = {"epoll_wait", "epoll_pwait", "write", "writev", "read", "recv", "recvfrom", "send", "sendto"}
        return f"libc:{func}" if func in sc or "syscall" in func or "timerfd" in func else "libc"
    if "libpython" in base or base.startswith("python"):
        return "libpython"
    return base or "other"


def summarise_spy(path: Path) -> dict[str, Any]:
    kinds: collections.Counter[str] = collections.Counter()
    natives: collections.Counter[str] = collections.Counter()
    pyfuncs: collections.Counter[str] = collections.Counter()
    total = 0
    # only the event loop's thread (the checkpoint writer's thread pool idles in a futex wait)
    lines = [ln.rpartition(" ") for ln in path.read_text().splitlines()]
    by_thread: collections.Counter[str] = collections.Counter()
    for stack, _, count in lines:
        if stack and ("run_until_complete" in stack or "uvloop" in stack):
            by_thread[stack.split(";", 1)[0]] += int(count)
    loop_thread = by_thread.most_common(1)[0][0] if by_thread else ""
    all_samples = sum(int(c) for s, _, c in lines if s)
    for stack, _, count in lines:
        if not stack or stack.split(";", 1)[0] != loop_thread:
            continue
        n = int(count)
        frames = stack.split(";")[1:]
        total += n
        kinds[leaf_kind(frames[-1])] += n
        natives[frames[-1][:90]] += n
        py = next((f for f in reversed(frames) if re.search(r"\.py:\d+\)$", f)), "(no python frame)")
        pyfuncs[re.sub(r":\d+\)$", ")", py)[:110]] += n
    return {
        "samples": total,
        "samples_other_threads": all_samples - total,
        "leaf_kind_share": {k: round(v / total, 4) for k, v in kinds.most_common()},
        "top_leaves": [(k, round(v / total, 4)) for k, v in natives.most_common(25)],
        "nearest_python_function": [(k, round(v / total, 4)) for k, v in pyfuncs.most_common(25)],
    }


def summarise_perf(data: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, sort in (("by_dso", "dso"), ("by_symbol", "dso,sym")):
        r = subprocess.run(
            ["perf", "report", "-i", str(data), "--no-children", "--sort", sort, "--stdio", "-g", "none"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        rows = []
        for line in r.stdout.splitlines():
            m = re.match(r"\s*([\d.]+)%\s+(.*)$", line)
            if m:
                rows.append((m.group(2).strip()[:100], float(m.group(1))))
        out[key] = rows[:30]
    return out


def parse_perf_stat(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,.]+)\s+([\w:.-]+)", line)
        if m and (":" in m.group(2) or m.group(2) in ("context-switches", "cpu-migrations")):
            with contextlib.suppress(ValueError):
                counts[m.group(2)] = int(m.group(1).replace(",", "").replace(".", ""))
    return counts


def attach(tool: str, pid: int, window: float, work: Path, spy_rate: int) -> dict[str, Any]:
    core0 = ["taskset", "-c", str(gb.NGINX_CORE)]
    if tool in ("spy", "spy-python"):
        out = work / "spy.folded"
        cmd = [*core0, shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"), "record"]
        # --native pauses the process for every sample (keep its rate low); Python-only stacks need no pause
        cmd += ["--native"] if tool == "spy" else ["--nonblocking"]
        cmd += ["--rate", str(spy_rate), "--duration", f"{window:g}", "--pid", str(pid), "--format", "raw", "--threads"]
        cmd += ["-o", str(out)]
        subprocess.run(cmd, capture_output=True, text=True, timeout=window + 60, check=True)
        return summarise_spy(out)
    if tool == "perf":
        data = work / "perf.data"
        cmd = [*core0, "perf", "record", "-F", "1999", "-g", "-o", str(data), "-p", str(pid), "--", "sleep"]
        subprocess.run([*cmd, f"{window:g}"], capture_output=True, text=True, timeout=window + 60, check=True)
        return summarise_perf(data)
    if tool == "strace":
        out = work / "strace.txt"
        proc = subprocess.Popen([*core0, "strace", "-c", "-f", "-o", str(out), "-p", str(pid)])
        time.sleep(window)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        return {"strace_c": out.read_text()}
    if tool == "syscount":
        events = "raw_syscalls:sys_enter,context-switches,cpu-migrations," + ",".join(
            f"syscalls:sys_enter_{s}"
            for s in ("write", "writev", "sendto", "read", "recvfrom", "epoll_wait", "epoll_pwait", "timerfd_settime")
        )
        cmd = [*core0, "perf", "stat", "-e", events, "-p", str(pid), "--", "sleep", f"{window:g}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=window + 60)
        return {"counts": parse_perf_stat(r.stderr)}
    if tool == "alloc":
        lib = libpython()
        for fn in LIBPYTHON_PROBES:
            subprocess.run(["perf", "probe", "-q", "-x", lib, fn], capture_output=True, timeout=60)
        events = ",".join(f"probe_libpython3:{fn}" for fn in LIBPYTHON_PROBES)
        cmd = [*core0, "perf", "stat", "-e", events, "-p", str(pid), "--", "sleep", f"{window:g}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=window + 60)
        return {"counts": parse_perf_stat(r.stderr)}
    raise SystemExit(f"unknown tool {tool}")


def start_grpc_server(build_dir: Path) -> tuple[subprocess.Popen[str], int]:
    """``grpc_bench.py``'s fixed-answer C++ server on core 0, compiled once into ``build_dir``."""
    import grpc_bench

    exe = build_dir / "grpc_fixed_server"
    if not exe.exists():
        build_dir.mkdir(parents=True, exist_ok=True)
        grpc_bench.build_cpp(build_dir)
    _, resp = grpc_bench._messages()
    cmd = ["taskset", "-c", str(gb.NGINX_CORE), str(exe), "0", resp.hex()]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening"):
        grpc_bench.stop(proc)
        raise SystemExit(f"server did not start: {line!r}")
    return proc, int(line.split()[1])


def per_request(doc: dict[str, Any], requests: float) -> dict[str, float]:
    counts = doc.get("counts", {})
    return {k: round(v / requests, 3) for k, v in counts.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", choices=["rest", "grpc"], default="rest")
    p.add_argument("--rate", type=float, default=5000)
    p.add_argument("--tool", choices=["spy", "spy-python", "perf", "strace", "syscount", "alloc"], default="spy")
    p.add_argument("--settle", type=float, default=5.0, help="seconds after the start before attaching")
    p.add_argument("--window", type=float, default=8.0)
    p.add_argument("--spy-rate", type=int, default=250)
    p.add_argument("--grpc-build-dir", default=os.path.join(tempfile.gettempdir(), "satpoint-grpc-fixed-server"))
    p.add_argument("--wake-window-ms", type=float, default=0.0, help="the generator's wake-up window (0: off)")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    hold = args.settle + args.window + 5.0
    work = Path(tempfile.mkdtemp(prefix="satpoint-probe-"))
    server: Any = None
    ng: gb.Nginx | None = None
    child: subprocess.Popen[str] | None = None
    try:
        if args.transport == "rest":
            ng = gb.Nginx().__enter__()
            cmd = [sys.executable, str(HERE / "generator_bench.py"), "--child", "--url", ng.url]
            cmd += ["--rate", str(args.rate), "--ramp", "1", "--hold", f"{hold:g}", "--max-inflight", "256"]
        else:
            server, port = start_grpc_server(Path(args.grpc_build_dir))
            cmd = [sys.executable, str(HERE / "grpc_bench.py"), "--child", "--client", "wire", "--port", str(port)]
            cmd += ["--rate", str(args.rate), "--duration", f"{hold + 1:g}", "--connections", "1", "--inflight", "512"]
        cmd += ["--wake-window-ms", str(args.wake_window_ms)] if args.wake_window_ms else []
        child = subprocess.Popen(["taskset", "-c", str(gb.GEN_CORE), *cmd], stdout=subprocess.PIPE, text=True)
        time.sleep(args.settle)
        u0, s0 = proc_cpu(child.pid)
        w0 = time.monotonic()
        doc = attach(args.tool, child.pid, args.window, work, args.spy_rate)
        u1, s1 = proc_cpu(child.pid)
        w1 = time.monotonic()
        out, _ = child.communicate(timeout=hold + 60)
        requests = args.rate * (w1 - w0)
        doc["per_request"] = per_request(doc, requests)
        doc.update(
            transport=args.transport,
            rate=args.rate,
            tool=args.tool,
            window_s=round(w1 - w0, 3),
            requests_in_window=round(requests),
            cpu_user_us_per_req=round((u1 - u0) / requests * 1e6, 2),
            cpu_sys_us_per_req=round((s1 - s0) / requests * 1e6, 2),
            generator_result=json.loads(out.strip().splitlines()[-1].removeprefix("RESULT ")) if out.strip() else None,
            load1=gb.loadavg1(),
        )
    finally:
        if child is not None and child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        if ng is not None:
            ng.__exit__()
        if server is not None:
            import grpc_bench

            grpc_bench.stop(server)
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(doc, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
