"""Cost of satpoint's open-loop REST generator: CPU per request and send lag at fixed rates, one core.

A trivial OIP target that is never the bottleneck (Debian's nginx returning a fixed answer, config in
``benchmarks/nginx/``) runs from a private temporary prefix, one worker, pinned to core 0.  Each
measurement is a fresh Python process pinned to core 1 (``taskset``) that drives the generator through
the public API, exactly the code path of ``satpoint run`` without the live view:

    result = satpoint.run(satpoint.Target(url, "bench"), [satpoint.Stage(rate, ramp, hold)],
                          load=satpoint.LoadOptions(max_inflight=..., generator_cpus=(1,), ...),
                          out=TMPDIR, html=False, on_event=...)
    rows = satpoint.load(TMPDIR).rows()

Reported per run:

* CPU µs per request over the whole segment (``result.summary.generator.cpu_us_per_request``: process
  CPU measured around the dispatcher's event loop, connection warm-up and drain included; writing the
  results folder afterwards is not in it) and over the hold only (process CPU sampled on every
  ``satpoint.Snapshot`` event, every 0.25 s, divided by the requests due between the two samples that
  bound the hold);
* send lag (sent - intended) p50/p99/max over the hold, late fraction (> 1 ms, or never sent),
  requests that waited for a connection, errors, achieved throughput (OK answers per second of hold);
* the 1-minute load average before the run and, from ``/proc/stat``, how busy each of the two cores was
  during the run (core 1 minus the generator's own CPU = interference from other processes).

Medians and ranges over ``--repeats`` runs (interleaved: all rates, then again) are printed as Markdown
and saved as JSON.  Then, unless ``--no-scan``, the highest rate that keeps the median p99 send lag
<= 1 ms is searched upwards from ``--scan-from`` in steps of ``--scan-step``; and, unless ``--no-wrk``,
Debian's ``wrk`` (closed loop, C) is run against the same nginx for its CPU per request.

    python benchmarks/generator_bench.py --rates 1000,5000,10000,20000 --repeats 3 --hold 8

Loopback only; every run is bounded in time (``--hold`` + 60 s hard limit); every process this script
starts is stopped by its PID.  ``--cprofile FILE`` runs one extra profiled measurement (cProfile) at
``--profile-rate`` and saves the stats.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NGINX_TEMPLATE = HERE / "nginx" / "nginx.conf.template"
NGINX_CORE, GEN_CORE = 0, 1
MODEL = "bench"


# --------------------------------------------------------------------------------------------------
# machine and load facts
# --------------------------------------------------------------------------------------------------
def loadavg1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def wait_quiet(limit: float, max_wait_s: float, idle_busy: float = 0.10, log: bool = True) -> tuple[float, float]:
    """Poll until the machine is quiet or ``max_wait_s`` passed: the 1-minute load average is below
    ``limit``, or both benchmark cores were at most ``idle_busy`` busy over the last 3 s (the load
    average lags by a minute; other people's short test runs keep it high long after they end).
    Returns (load average at the start of the measurement, seconds waited)."""
    t0 = time.monotonic()
    while True:
        la = loadavg1()
        waited = time.monotonic() - t0
        if la < limit or waited >= max_wait_s:
            break
        a = core_ticks()
        time.sleep(3.0)
        busy = busy_fraction(a, core_ticks())
        if max(busy.get(NGINX_CORE, 1.0), busy.get(GEN_CORE, 1.0)) <= idle_busy:
            break
    la, waited = loadavg1(), time.monotonic() - t0
    if log and la >= limit:
        print(f"  (load {la:.2f} >= {limit}; waited {waited:.0f} s)", file=sys.stderr)
    return la, waited


def core_ticks() -> dict[int, tuple[int, int]]:
    """(busy, total) jiffies per core from /proc/stat."""
    out: dict[int, tuple[int, int]] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3].isdigit():
            parts = line.split()
            vals = [int(v) for v in parts[1:]]
            idle = vals[3] + vals[4]  # idle + iowait
            out[int(parts[0][3:])] = (sum(vals[:8]) - idle, sum(vals[:8]))
    return out


def busy_fraction(a: dict[int, tuple[int, int]], b: dict[int, tuple[int, int]]) -> dict[int, float]:
    return {k: (b[k][0] - a[k][0]) / max(1, b[k][1] - a[k][1]) for k in a if k in b}


def machine_facts() -> dict[str, Any]:
    cpu_model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "?",
    )
    versions: dict[str, str | None] = {}
    from importlib import metadata

    for d in ("satpoint", "uvloop", "httptools", "numpy"):
        try:
            versions[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            versions[d] = None
    nginx = (
        subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
        if shutil.which("nginx")
        else None
    )
    wrk = shutil.which("wrk")
    wrk_v = None
    if wrk:
        r = subprocess.run([wrk, "-v"], capture_output=True, text=True)
        text = (r.stdout + r.stderr).strip()
        wrk_v = " ".join(text.splitlines()[0].split()[:2]) if text else None  # "wrk debian/4.1.0-3+b2"
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "versions": versions,
        "nginx": nginx,
        "wrk": wrk_v,
    }


# --------------------------------------------------------------------------------------------------
# nginx
# --------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Nginx:
    """nginx in the foreground from a private prefix, pinned to one core; stopped by its PID."""

    def __init__(self, core: int = NGINX_CORE) -> None:
        self.core = core
        self.prefix = Path(tempfile.mkdtemp(prefix="satpoint-nginx-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Nginx:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        conf = NGINX_TEMPLATE.read_text().replace("@PREFIX@", str(self.prefix)).replace("@PORT@", str(self.port))
        (self.prefix / "nginx.conf").write_text(conf)
        os.chmod(self.prefix, 0o755)
        cmd = [
            "taskset",
            "-c",
            str(self.core),
            nginx,
            "-p",
            str(self.prefix),
            "-c",
            str(self.prefix / "nginx.conf"),
            "-e",
            str(self.prefix / "error.log"),
            "-g",
            "daemon off;",
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"nginx exited: {err}")
            try:
                with urllib.request.urlopen(self.url + "/v2/health/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("nginx did not become ready in 10 s")

    def worker_pids(self) -> list[int]:
        if self.proc is None:
            return []
        try:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return []
        return [int(k) for k in kids]

    def accepts(self) -> int:
        """Connections nginx has accepted so far (stub_status)."""
        with urllib.request.urlopen(self.url + "/nginx_status", timeout=2) as r:
            return int(r.read().decode().splitlines()[2].split()[0])

    def cpu_s(self) -> float:
        """CPU seconds used so far by the master and its workers."""
        tck = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for pid in [self.proc.pid if self.proc else -1, *self.worker_pids()]:
            try:
                f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(f[11]) + int(f[12])) / tck
            except (OSError, IndexError):
                pass
        return total

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGQUIT)  # graceful stop of master and workers
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.prefix, ignore_errors=True)


# --------------------------------------------------------------------------------------------------
# one measurement (runs in a fresh process pinned to the generator core)
# --------------------------------------------------------------------------------------------------
def child(
    url: str,
    rate: float,
    ramp: float,
    hold: float,
    max_inflight: int,
    cprofile: str | None,
    arrival: str = "constant",
    wake_window_ms: float = 0.0,
    realtime: int = 0,
) -> dict[str, Any]:
    import numpy as np

    import satpoint

    # the names of rows()'s outcome codes (the API names error classes only in the summary's steady window)
    from satpoint.metrics.records import Outcome

    samples: list[tuple[float, float]] = []  # (run clock, process CPU)

    def on_event(ev: Any) -> None:
        if isinstance(ev, satpoint.Snapshot):
            samples.append((ev.snapshot.now_s, time.process_time()))

    extra: dict[str, Any] = {"wake_window_ms": wake_window_ms} if wake_window_ms else {}  # older versions lack it
    if realtime:
        extra["realtime_priority"] = realtime
    load = satpoint.LoadOptions(
        max_inflight=max_inflight,
        timeout_s=10.0,
        drain_s=5.0,
        generator_cpus=(GEN_CORE,),
        arrival=arrival,  # type: ignore[arg-type]
        **extra,
    )
    stages = [satpoint.Stage(rate, ramp, hold)]
    with tempfile.TemporaryDirectory(prefix="satpoint-genbench-") as out:

        def run() -> Any:
            return satpoint.run(satpoint.Target(url, MODEL), stages, load=load, out=out, html=False, on_event=on_event)

        if cprofile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
            result = run()
            prof.disable()
            prof.dump_stats(cprofile)
        else:
            result = run()
        loaded = satpoint.load(out)
        rec = loaded.rows()
        wall_s = loaded.segments[0].generator.get("wall_s")
    gen = result.summary.generator
    stage = result.summary.stages[0] if result.summary.stages else None
    intended, sent_t, done, outcome = rec["intended"], rec["sent"], rec["done"], rec["outcome"]
    h0, h1 = ramp, ramp + hold
    in_hold = (intended >= h0) & (intended < h1)
    lag = (sent_t - intended)[in_hold]
    sent = ~np.isnan(lag)
    lag_ms = lag[sent] * 1000
    n_hold = int(in_hold.sum())
    late = int(np.count_nonzero(lag_ms > 1.0)) + int(np.count_nonzero(~sent))
    ok = outcome == Outcome.OK
    ok_in_hold = int(np.count_nonzero(ok & (done >= h0) & (done < h1)))
    svc = (done - sent_t)[in_hold & ok] * 1000
    # CPU over the hold: the two snapshot samples that bound the hold most tightly from inside
    inside = [s for s in samples if h0 <= s[0] <= h1]
    cpu_hold = None
    if len(inside) >= 2:
        (ta, ca), (tb, cb) = inside[0], inside[-1]
        n_ab = int(np.count_nonzero((intended >= ta) & (intended < tb)))
        cpu_hold = (cb - ca) / n_ab * 1e6 if n_ab else None
    errors = {
        Outcome(int(o)).name.lower(): int(np.count_nonzero(outcome == o))
        for o in np.unique(outcome)
        if int(o) != Outcome.OK
    }

    def pct(a: Any, q: float) -> float | None:
        return round(float(np.percentile(a, q)), 4) if len(a) else None

    return {
        "rate": rate,
        "requests": gen.requests,
        "cpu_s": gen.cpu_s,
        "wall_s": wall_s,
        "cpu_us_per_req": gen.cpu_us_per_request,
        "cpu_us_per_req_hold": round(cpu_hold, 2) if cpu_hold is not None else None,
        "lag_p50_ms": pct(lag_ms, 50),
        "lag_p99_ms": pct(lag_ms, 99),
        "lag_max_ms": round(float(lag_ms.max()), 4) if len(lag_ms) else None,
        "late_frac": late / n_hold if n_hold else None,
        "waited": int(np.count_nonzero(rec["waited"])),
        "errors": errors,
        "throughput_rps": round(ok_in_hold / hold, 1),
        "service_p50_ms": pct(svc, 50),
        "service_p99_ms": pct(svc, 99),
        # the summary's own judgement of the stage (steady window: the hold minus its settle period)
        "verdict": stage.verdict if stage else None,
        "window_send_lag_p99_ms": stage.send_lag_ms.p99 if stage else None,
        "window_errors": stage.errors if stage else None,
    }


def run_child(
    url: str, rate: float, args: argparse.Namespace, nginx: Nginx, cprofile: str | None = None
) -> dict[str, Any]:
    la, waited = wait_quiet(args.load_limit, args.max_wait, args.idle_busy)
    cmd = [
        "taskset",
        "-c",
        str(GEN_CORE),
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--url",
        url,
        "--rate",
        str(rate),
        "--ramp",
        str(args.ramp),
        "--hold",
        str(args.hold),
        "--max-inflight",
        str(args.max_inflight),
        "--arrival",
        args.arrival,
        "--wake-window-ms",
        str(args.wake_window_ms),
        "--realtime",
        str(args.realtime),
    ]
    if cprofile:
        cmd += ["--cprofile", cprofile]
    import resource

    ticks0, ng0, acc0 = core_ticks(), nginx.cpu_s(), nginx.accepts()
    ru0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=args.ramp + args.hold + 60)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"generator run at {rate} rps exceeded its time limit") from None
    ticks1, ng1, acc1 = core_ticks(), nginx.cpu_s(), nginx.accepts()
    ru1, w1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    if proc.returncode != 0:
        raise RuntimeError(f"generator run at {rate} rps failed:\n{err}")
    res: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    busy = busy_fraction(ticks0, ticks1)
    res["load1"] = la
    res["waited_for_load_s"] = round(waited, 1)
    res["core_busy"] = {str(k): round(v, 3) for k, v in busy.items()}
    res["nginx_cpu_s"] = round(ng1 - ng0, 3)
    # minus satpoint.run's three control requests (prepare: urllib, one connection each) and the closing status request
    res["connections"] = acc1 - acc0 - 4
    # CPU of other processes on the generator's core: its busy time minus the child's whole CPU
    child_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    res["core1_other"] = round(max(0.0, busy.get(GEN_CORE, 0.0) - child_cpu / max(w1 - w0, 1e-9)), 3)
    return res


# --------------------------------------------------------------------------------------------------
# wrk (closed loop, for context)
# --------------------------------------------------------------------------------------------------
WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[0.1,0.2,0.3,0.4]}]}'
"""


def run_wrk(url: str, args: argparse.Namespace, nginx: Nginx) -> dict[str, Any]:
    la, _ = wait_quiet(args.load_limit, args.max_wait, args.idle_busy)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(WRK_LUA)
        lua = f.name
    cmd = [
        "taskset",
        "-c",
        str(GEN_CORE),
        "wrk",
        "-t1",
        f"-c{args.wrk_conns}",
        f"-d{int(args.hold)}s",
        "-s",
        lua,
        url + f"/v2/models/{MODEL}/infer",
    ]
    ticks0, ng0 = core_ticks(), nginx.cpu_s()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, _ = proc.communicate(timeout=args.hold + 30)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError("wrk exceeded its time limit") from None
    finally:
        os.unlink(lua)
    ticks1, ng1 = core_ticks(), nginx.cpu_s()
    reqs = 0
    for line in out.splitlines():
        if "requests in" in line:
            reqs = int(line.split()[0])
    busy = busy_fraction(ticks0, ticks1)
    return {
        "requests": reqs,
        "stdout": out,
        "load1": la,
        "core_busy": {str(k): round(v, 3) for k, v in busy.items()},
        "nginx_cpu_s": round(ng1 - ng0, 3),
    }


def wrk_measure(url: str, args: argparse.Namespace, nginx: Nginx) -> dict[str, Any]:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run_wrk(url, args, nginx)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the only child reaped in between is wrk (taskset execs it, so it is the same process)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    r["cpu_s"] = round(cpu, 3)
    r["cpu_us_per_req"] = round(cpu / r["requests"] * 1e6, 2) if r["requests"] else None
    r["rps"] = round(r["requests"] / args.hold, 1)
    return r


# --------------------------------------------------------------------------------------------------
# aggregation and output
# --------------------------------------------------------------------------------------------------
def med_range(vals: list[float | None], fmt: str = "{:.1f}") -> str:
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    m = statistics.median(v)
    if len(v) == 1:
        return fmt.format(m)
    return f"{fmt.format(m)} ({fmt.format(min(v))}–{fmt.format(max(v))})"


def loads(rs: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['load1']:.2f}" for r in rs)


def table(runs: dict[float, list[dict[str, Any]]]) -> str:
    head = (
        "| rate (rps) | CPU µs/req (segment) | CPU µs/req (hold) | send lag p50 ms | p99 ms | max ms "
        "| late >1 ms | waited | conns opened | errors | throughput rps | core 1 busy | other load on core 1 | load1 |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for rate in sorted(runs):
        rs = runs[rate]
        errs = [sum(r["errors"].values()) for r in rs]
        lines.append(
            f"| {rate:,.0f} | {med_range([r['cpu_us_per_req'] for r in rs])} "
            f"| {med_range([r['cpu_us_per_req_hold'] for r in rs])} "
            f"| {med_range([r['lag_p50_ms'] for r in rs], '{:.3f}')} "
            f"| {med_range([r['lag_p99_ms'] for r in rs], '{:.3f}')} "
            f"| {med_range([r['lag_max_ms'] for r in rs], '{:.2f}')} "
            f"| {med_range([100 * r['late_frac'] for r in rs], '{:.2f}')} % "
            f"| {med_range([r['waited'] for r in rs], '{:.0f}')} "
            f"| {med_range([r.get('connections') for r in rs], '{:.0f}')} "
            f"| {sum(errs)} "
            f"| {med_range([r['throughput_rps'] for r in rs], '{:.0f}')} "
            f"| {med_range([100 * r['core_busy'].get(str(GEN_CORE), 0) for r in rs], '{:.0f}')} % "
            f"| {med_range([100 * r['core1_other'] for r in rs if 'core1_other' in r], '{:.0f}')} % "
            f"| {loads(rs)} |"
        )
    return "\n".join(lines)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1000,5000,10000,20000")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ramp", type=float, default=1.0)
    p.add_argument("--hold", type=float, default=8.0)
    p.add_argument("--max-inflight", type=int, default=256)
    p.add_argument("--load-limit", type=float, default=0.6, help="wait for the 1-min load average below this")
    p.add_argument("--max-wait", type=float, default=180.0, help="longest wait for a quiet machine, s")
    p.add_argument(
        "--idle-busy", type=float, default=0.10, help="also start once both cores were at most this busy over 3 s"
    )
    p.add_argument("--no-scan", action="store_true", help="skip the highest-rate scan")
    p.add_argument("--scan-from", type=float, default=20000)
    p.add_argument("--scan-step", type=float, default=5000)
    p.add_argument("--scan-max", type=float, default=60000)
    p.add_argument("--no-wrk", action="store_true")
    p.add_argument("--wrk-conns", type=int, default=16)
    p.add_argument("--cprofile", default=None, help="also run one cProfile'd measurement, stats to this file")
    p.add_argument("--profile-rate", type=float, default=5000)
    p.add_argument("--arrival", default="constant", help="the arrival process (constant, poisson, ...)")
    p.add_argument(
        "--wake-window-ms", type=float, default=0.0, help="LoadOptions.wake_window_ms (0: each request on time)"
    )
    p.add_argument("--realtime", type=int, default=0, help="LoadOptions.realtime_priority (SCHED_FIFO; 0: off)")
    p.add_argument("--json", default=None, help="write all raw results here")
    # internal: one measurement in this process
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", default=None, help=argparse.SUPPRESS)
    p.add_argument("--rate", type=float, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()

    signal.signal(signal.SIGTERM, _terminate)  # clean up (nginx, temp prefix) on SIGTERM too
    if args.child:
        res = child(
            args.url,
            args.rate,
            args.ramp,
            args.hold,
            args.max_inflight,
            args.cprofile,
            args.arrival,
            args.wake_window_ms,
            args.realtime,
        )
        print(json.dumps(res))
        return 0

    if os.cpu_count() is None or os.cpu_count() < 2:  # type: ignore[operator]
        print("needs two cores (nginx on core 0, the generator on core 1)", file=sys.stderr)
        return 2
    facts = machine_facts()
    print(json.dumps(facts, indent=2), file=sys.stderr)
    rates = [float(r) for r in args.rates.split(",") if r]
    all_out: dict[str, Any] = {
        "facts": facts,
        "args": {k: v for k, v in vars(args).items() if k not in ("child", "url", "rate")},
    }
    with Nginx() as ng:
        print(f"nginx pid {ng.proc.pid if ng.proc else '?'} at {ng.url}, pinned to core {NGINX_CORE}", file=sys.stderr)
        runs: dict[float, list[dict[str, Any]]] = {r: [] for r in rates}
        for rep in range(args.repeats):
            for rate in rates:
                res = run_child(ng.url, rate, args, ng)
                runs[rate].append(res)
                print(
                    f"  rep {rep + 1} {rate:>8,.0f} rps: {res['cpu_us_per_req']} µs/req "
                    f"(hold {res['cpu_us_per_req_hold']}), lag p99 {res['lag_p99_ms']} ms, max {res['lag_max_ms']} ms, "
                    f"late {res['late_frac']:.4f}, tp {res['throughput_rps']}, errors {res['errors']}, "
                    f"load {res['load1']:.2f}, busy {res['core_busy']}",
                    file=sys.stderr,
                )
        all_out["fixed"] = {str(k): v for k, v in runs.items()}
        print("\n### Fixed rates\n\n" + table(runs))

        if not args.no_scan:
            scan: dict[float, list[dict[str, Any]]] = {}
            rate = args.scan_from
            best = None
            while rate <= args.scan_max:
                scan[rate] = []
                for rep in range(args.repeats):
                    res = run_child(ng.url, rate, args, ng)
                    scan[rate].append(res)
                    print(
                        f"  scan rep {rep + 1} {rate:>8,.0f} rps: lag p99 {res['lag_p99_ms']} ms, "
                        f"{res['cpu_us_per_req_hold']} µs/req, tp {res['throughput_rps']}, load {res['load1']:.2f}",
                        file=sys.stderr,
                    )
                p99 = statistics.median([r["lag_p99_ms"] for r in scan[rate] if r["lag_p99_ms"] is not None])
                if p99 > 1.0:
                    break
                best = rate
                rate += args.scan_step
            all_out["scan"] = {str(k): v for k, v in scan.items()}
            all_out["max_rate_p99_le_1ms"] = best
            print("\n### Highest rate scan\n\n" + table(scan))
            print(f"\nhighest rate with median p99 send lag <= 1 ms on one core: {best}")

        if not args.no_wrk and shutil.which("wrk"):
            wr = [wrk_measure(ng.url, args, ng) for _ in range(args.repeats)]
            for w in wr:
                print(
                    f"  wrk: {w['rps']} rps, {w['cpu_us_per_req']} µs/req, load {w['load1']:.2f}, "
                    f"busy {w['core_busy']}",
                    file=sys.stderr,
                )
            all_out["wrk"] = wr
            print(f"\n### wrk (closed loop, -t1 -c{args.wrk_conns}, {args.hold:g} s)\n")
            print("| client | requests/s | CPU µs/req | core 0 (nginx) busy | core 1 busy | load1 |")
            print("|---|---|---|---|---|---|")
            print(
                f"| {facts['wrk'] or 'wrk'} | {med_range([w['rps'] for w in wr], '{:.0f}')} "
                f"| {med_range([w['cpu_us_per_req'] for w in wr], '{:.2f}')} "
                f"| {med_range([100 * w['core_busy'].get(str(NGINX_CORE), 0) for w in wr], '{:.0f}')} % "
                f"| {med_range([100 * w['core_busy'].get(str(GEN_CORE), 0) for w in wr], '{:.0f}')} % "
                f"| {loads(wr)} |"
            )

        if args.cprofile:
            res = run_child(ng.url, args.profile_rate, args, ng, cprofile=os.path.abspath(args.cprofile))
            all_out["profiled"] = res
            print(
                f"\ncProfile'd run at {args.profile_rate:g} rps: {res['cpu_us_per_req_hold']} µs/req under the "
                f"profiler; stats in {args.cprofile}",
                file=sys.stderr,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(all_out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
