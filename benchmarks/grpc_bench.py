"""Generator cost of gRPC clients: CPU per request and send lag at fixed open-loop rates, one core.

A server that is not the bottleneck runs pinned to core 0 (default: a C++ gRPC callback server with a
fixed answer, compiled here from the source below against Debian's ``libgrpc++-dev``; or ``--server
aio``: a grpc.aio server in Python).  Each measurement is a fresh client process pinned to core 1 that
drives satpoint's real open-loop dispatcher (``engine.dispatcher.OpenLoopDispatcher``) at a constant
rate for ``--duration`` seconds through one transport:

* ``wire``: ``satpoint.transports.grpc.wire.GrpcPool`` (raw HTTP/2 on uvloop, pre-encoded frames);
* ``aio``: ``benchmarks/grpc_aio.py``'s ``GrpcAioPool`` (grpc.aio unary calls, pre-serialized bytes).

Reported per run, over the window from 0.5 s after the start to the last due time: client CPU
(user+sys, ``resource.getrusage``) per request sent, send lag p50/p99/max (sent - intended), completion
rate, latency p50/p99, errors, and the server's CPU share (from /proc) to show it was not the limit.
Medians over ``--repeats`` runs are printed as a Markdown table and saved as JSON.

    python benchmarks/grpc_bench.py --rates 1000,5000,8000,10000 --repeats 3 --duration 5

Loopback only; every run is bounded in time; every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CPP_SERVER = r"""
// A fixed-answer unary gRPC server for satpoint's client benchmark (C++ callback API, generic service).
#include <grpcpp/grpcpp.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/byte_buffer.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

static std::string g_resp;
static std::atomic<long> g_calls{0};

class Reactor : public grpc::ServerGenericBidiReactor {
 public:
  Reactor() { StartRead(&req_); }
  void OnReadDone(bool ok) override {
    if (!ok) { Finish(grpc::Status(grpc::StatusCode::INTERNAL, "no request")); return; }
    grpc::Slice s(g_resp);
    resp_ = grpc::ByteBuffer(&s, 1);
    g_calls++;
    StartWriteAndFinish(&resp_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnWriteDone(bool) override {}
  void OnDone() override { delete this; }
 private:
  grpc::ByteBuffer req_, resp_;
};

class Svc : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new Reactor();
  }
};

static volatile std::sig_atomic_t g_stop = 0;
static void on_sig(int) { g_stop = 1; }

static std::string unhex(const char* h) {
  std::string out;
  size_t n = strlen(h);
  for (size_t i = 0; i + 1 < n; i += 2) {
    char b[3] = {h[i], h[i + 1], 0};
    out.push_back(static_cast<char>(strtol(b, nullptr, 16)));
  }
  return out;
}

int main(int argc, char** argv) {
  if (argc < 3) { fprintf(stderr, "usage: server PORT RESPONSE_HEX\n"); return 2; }
  g_resp = unhex(argv[2]);
  Svc svc;
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort(std::string("127.0.0.1:") + argv[1], grpc::InsecureServerCredentials(), &port);
  b.RegisterCallbackGenericService(&svc);
  auto server = b.BuildAndStart();
  if (!server || port == 0) { fprintf(stderr, "cannot listen\n"); return 1; }
  printf("listening %d\n", port);
  fflush(stdout);
  signal(SIGTERM, on_sig);
  signal(SIGINT, on_sig);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  fprintf(stderr, "calls %ld\n", g_calls.load());
  return 0;
}
"""

IRIS_DOC = {"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}]}


def _messages() -> tuple[bytes, bytes]:
    sys.path.insert(0, str(ROOT / "src"))
    # the encoded request and a canned answer for the fixed C++ server: no public API builds raw messages
    from satpoint.transports.grpc.codec import encode_infer_request
    from satpoint.transports.grpc.grpc_proto import message

    req = encode_infer_request(IRIS_DOC, "sim")
    resp = message("ModelInferResponse")(model_name="sim", id="1")
    resp.outputs.add(name="output-0", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(0.5)
    return req, resp.SerializeToString()


# server side ------------------------------------------------------------------------------------------
def build_cpp(workdir: Path) -> Path:
    src = workdir / "grpc_fixed_server.cc"
    exe = workdir / "grpc_fixed_server"
    src.write_text(CPP_SERVER)
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "grpc++"], check=True, capture_output=True, text=True
    ).stdout.split()
    subprocess.run(["g++", "-O2", "-std=c++17", str(src), "-o", str(exe), *flags], check=True, timeout=300)
    return exe


async def _serve_aio(port: int, response: bytes) -> None:
    import grpc

    async def infer(request: bytes, context: Any) -> bytes:
        return response

    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)}
    )
    server.add_generic_rpc_handlers((handler,))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"listening {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0.2)


def _pin(cpu: int, rt: int) -> list[str]:
    """taskset to one core; with ``rt`` > 0 also SCHED_FIFO at that priority (root), so other work on a
    shared machine cannot preempt the measured process (the kernel still keeps 5 % for others)."""
    return (["chrt", "-f", str(rt)] if rt > 0 else []) + ["taskset", "-c", str(cpu)]


def start_server(kind: str, workdir: Path, cpu: int, rt: int = 0) -> tuple[subprocess.Popen[str], int]:
    _, resp = _messages()
    if kind == "cpp":
        cmd = [str(build_cpp(workdir)), "0", resp.hex()]
    else:
        cmd = [sys.executable, __file__, "--serve-aio", "--response-hex", resp.hex()]
    proc = subprocess.Popen([*_pin(cpu, rt), *cmd], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening"):
        stop(proc)
        raise SystemExit(f"server did not start: {line!r}")
    return proc, int(line.split()[1])


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# client side (child process) -----------------------------------------------------------------------------
def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _client(
    client: str,
    port: int,
    rate: float,
    duration: float,
    connections: int,
    inflight: int,
    wake_window_ms: float = 0.0,
    realtime: int = 0,
) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "src"))
    # below the API on purpose: two transports compared under the same dispatcher (satpoint.run picks one)
    from satpoint.engine.dispatcher import DispatchOptions, OpenLoopDispatcher
    from satpoint.metrics.records import Outcome, Records
    from satpoint.transports.grpc.wire import GrpcPool

    sys.path.insert(0, str(HERE))
    from grpc_aio import GrpcAioPool  # benchmarks/grpc_aio.py, beside this script (not in the package)

    req, _ = _messages()
    pools: list[Any] = []

    def factory(rec: Records, on_free: Any) -> Any:
        if client == "wire":
            p: Any = GrpcPool(rec, on_free, "127.0.0.1", port, [req], inflight, connections=connections)
        else:
            p = GrpcAioPool(rec, on_free, f"127.0.0.1:{port}", [req], inflight, channels=connections)
        pools.append(p)
        return p

    n = int(rate * duration)
    due = np.arange(n, dtype=np.float64) / rate
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter() + 1.0
    marks: dict[str, float] = {}
    warm_s = 0.5
    end_s = float(due[-1])

    def mark(name: str) -> None:
        marks[name] = _cpu()
        marks[name + "_t"] = time.perf_counter()

    loop.call_later(t0 + warm_s - time.perf_counter(), mark, "start")
    loop.call_later(t0 + end_s - time.perf_counter(), mark, "end")
    extra: dict[str, Any] = {"wake_window_s": wake_window_ms / 1000.0} if wake_window_ms else {}
    restore = None
    if realtime:  # as run_shard does (engine.realtime); older versions lack it
        from satpoint.engine.realtime import enter_realtime

        restore = enter_realtime(realtime)
    disp = OpenLoopDispatcher(due, t0, factory, DispatchOptions(timeout_s=10.0, drain_s=3.0, **extra))
    rec = await disp.run()
    if restore is not None:
        restore()
    win = (rec.intended >= warm_s) & (rec.intended <= end_s)
    sent = win & ~np.isnan(rec.sent)
    lag_ms = (rec.sent[sent] - rec.intended[sent]) * 1000.0
    ok = win & (rec.outcome == Outcome.OK)
    lat_ms = (rec.done[ok] - rec.intended[ok]) * 1000.0
    done_in = (rec.done >= warm_s) & (rec.done <= end_s) & (rec.outcome == Outcome.OK)
    span = end_s - warm_s
    return {
        "client": client,
        "rate": rate,
        "requests": int(win.sum()),
        "sent": int(sent.sum()),
        "ok": int(ok.sum()),
        "errors": int((win & (rec.outcome != Outcome.OK)).sum()),
        "waited": int((win & rec.waited).sum()),
        "cpu_us_per_req": (marks["end"] - marks["start"]) / max(1, int(sent.sum())) * 1e6,
        "cpu_share": (marks["end"] - marks["start"]) / (marks["end_t"] - marks["start_t"]),
        "lag_p50_ms": float(np.percentile(lag_ms, 50)) if len(lag_ms) else float("nan"),
        "lag_p99_ms": float(np.percentile(lag_ms, 99)) if len(lag_ms) else float("nan"),
        "lag_max_ms": float(lag_ms.max()) if len(lag_ms) else float("nan"),
        "throughput_rps": float(done_in.sum() / span),
        "lat_p50_ms": float(np.percentile(lat_ms, 50)) if len(lat_ms) else float("nan"),
        "lat_p99_ms": float(np.percentile(lat_ms, 99)) if len(lat_ms) else float("nan"),
    }


def child_main(args: argparse.Namespace) -> None:
    import uvloop

    a = args
    result = uvloop.run(
        _client(a.client, a.port, a.rate, a.duration, a.connections, a.inflight, a.wake_window_ms, a.realtime)
    )
    print("RESULT " + json.dumps(result), flush=True)


# driver ----------------------------------------------------------------------------------------------------
def run_one(args: argparse.Namespace, client: str, port: int, rate: float, server_pid: int) -> dict[str, Any]:
    cmd = [
        *_pin(args.client_cpu, args.rt), sys.executable, __file__, "--child", "--client", client,
        "--port", str(port), "--rate", str(rate), "--duration", str(args.duration),
        "--connections", str(args.connections), "--inflight", str(args.inflight),
        "--wake-window-ms", str(args.wake_window_ms), "--realtime", str(args.realtime),
    ]  # fmt: skip
    s0, t0 = proc_cpu_s(server_pid), time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=args.duration + 40)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    s1, t1 = proc_cpu_s(server_pid), time.perf_counter()
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"client run failed ({client} @ {rate}):\n{err[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1][7:])
    result["server_cpu_share"] = (s1 - s0) / (t1 - t0)  # includes client start-up idle time: a lower bound
    result["loadavg_1m"] = os.getloadavg()[0]  # other work on the machine makes send lag noisy
    return result


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k, v in runs[0].items() if isinstance(v, int | float)]
    row = {k: statistics.median(r[k] for r in runs) for k in keys}
    row["client"] = runs[0]["client"]
    row["runs"] = len(runs)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1000,5000,8000,10000")
    p.add_argument("--clients", default="wire,aio")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--inflight", type=int, default=512)
    p.add_argument("--server", choices=["cpp", "aio"], default="cpp")
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--rt", type=int, default=0, help="SCHED_FIFO priority for server and client (0: off)")
    p.add_argument("--out", default=str(HERE / "grpc_bench_results.json"))
    p.add_argument("--wake-window-ms", type=float, default=0.0, help="DispatchOptions.wake_window_s in ms")
    p.add_argument("--realtime", type=int, default=0, help="the client's loop at SCHED_FIFO this priority (0: off)")
    # internal
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--client", default="wire", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--rate", type=float, default=1000.0, help=argparse.SUPPRESS)
    p.add_argument("--serve-aio", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--response-hex", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child_main(args)
        return
    if args.serve_aio:
        import uvloop

        uvloop.run(_serve_aio(0, bytes.fromhex(args.response_hex)))
        return

    workdir = Path(tempfile.mkdtemp(prefix="satpoint-grpc-bench-"))
    proc, port = start_server(args.server, workdir, args.server_cpu, args.rt)
    rows: list[dict[str, Any]] = []
    raw: list[dict[str, Any]] = []
    try:
        for client in args.clients.split(","):
            for rate in [float(r) for r in args.rates.split(",")]:
                runs = []
                for _ in range(args.repeats):
                    r = run_one(args, client, port, rate, proc.pid)
                    runs.append(r)
                    raw.append(r)
                    print(
                        f"  {client:5s} {rate:7.0f} rps: {r['cpu_us_per_req']:6.1f} µs/req, "
                        f"lag p99 {r['lag_p99_ms']:.3f} ms, {r['throughput_rps']:.0f} rps done, "
                        f"errors {r['errors']}, server cpu {r['server_cpu_share']:.0%}, load {r['loadavg_1m']:.1f}",
                        flush=True,
                    )
                rows.append(median_row(runs))
    finally:
        stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(
        f"server: {args.server} on cpu {args.server_cpu}; client on cpu {args.client_cpu}; "
        f"{args.duration:g} s per run, medians of {args.repeats}; connections/channels {args.connections}"
    )
    print()
    print(
        "| client | offered rps | CPU µs/req | client CPU | send lag p50 / p99 / max ms | done rps "
        "| latency p50 / p99 ms | errors | server CPU |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['client']} | {r['rate']:.0f} | {r['cpu_us_per_req']:.1f} | {r['cpu_share']:.0%} "
            f"| {r['lag_p50_ms']:.3f} / {r['lag_p99_ms']:.3f} / {r['lag_max_ms']:.1f} "
            f"| {r['throughput_rps']:.0f} | {r['lat_p50_ms']:.2f} / {r['lat_p99_ms']:.2f} "
            f"| {r['errors']:.0f} | {r['server_cpu_share']:.0%} |"
        )
    Path(args.out).write_text(json.dumps({"args": vars(args), "medians": rows, "runs": raw}, indent=1))


if __name__ == "__main__":
    main()
