"""satpoint beside Triton's perf_analyzer on one embedded Triton, at the same fixed request rates.

One embedded Triton (the iris demo model, PyTriton, pinned to CPU 0) serves both tools in the same run;
each client is pinned with ``taskset`` to CPU 1 and runs alone, one rate at a time:

- ``perf_analyzer -i http --request-rate-range R:R:1 --request-distribution constant`` (its own warm-up
  and stability windows, then a CSV report: throughput, p50/p90/p99 in µs);
- ``satpoint run --stage R:RAMP:HOLD`` (open loop, constant arrivals): the steady window's throughput,
  latency from the *intended* send time (``latency_ms``) and from the actual send (``service_ms``).

Client CPU per request is the same for both: the client process's user+system CPU (``os.wait4``) divided
by the requests Triton counted during that process (its statistics endpoint read before and after), so
start-up, warm-up and the stability windows are inside both figures.  satpoint's own figure for its
measuring loop (``generator.cpu_us_per_request``) is given beside it.

A second part measures ``--binary-data`` (Triton's binary tensor extension) against JSON on the
digits-mlp model (64 features): the request size and satpoint's generator CPU per request at one rate.

perf_analyzer is not a Python package here: ``perf-analyzer`` on PyPI is a placeholder.  The binary ships
in ``tritonclient`` wheels up to 2.49 (``tritonclient-2.49.0.data/data/bin/perf_analyzer``); this script
extracts it from that wheel (``--wheel``, or ``pip download --no-deps tritonclient==2.49.0``) into a cache
folder, never installing it, and links the two shared libraries it needs (``libb64.so.0d``,
``libcudart.so.12``) from the copies PyTriton's wheel carries.

Run (about 3 minutes):

    PYTHONPATH=src python benchmarks/perf_analyzer_compare.py --rates 100,200,400 --out /tmp/pa-compare

It prints a Markdown table and writes ``results.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from satpoint.analysis.server.server_side import interpret
from satpoint.metrics.observed import Scrape
from satpoint.observe.triton_stats import stats_samples
from satpoint.payloads.binary import encode_binary_body
from satpoint.payloads.build import from_metadata
from satpoint.servers.triton.server import TritonSettings, TritonTarget, pytriton_available
from satpoint.transports.rest import rest_control
from satpoint.transports.rest.pool import encode_json_body

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "satpoint-bench" / "perf_analyzer"
MEMBER = "tritonclient-2.49.0.data/data/bin/perf_analyzer"
LIBS = {"libb64.so.0d": "libb64-*.so.0d", "libcudart.so.12": "libcudart-*.so.12*"}
CLIENT_TIMEOUT_S = 120.0


def perf_analyzer(wheel: Path | None) -> tuple[Path, Path]:
    """The perf_analyzer binary and the folder of the libraries it needs (extracted once into CACHE)."""
    binary, libdir = CACHE / "perf_analyzer", CACHE / "lib"
    if not binary.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        if wheel is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(CACHE),
                 "--platform", "manylinux1_x86_64", "tritonclient==2.49.0"],
                check=True,
            )  # fmt: skip
            wheel = next(CACHE.glob("tritonclient-2.49.0-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            binary.write_bytes(z.read(MEMBER))
        binary.chmod(0o755)
    libdir.mkdir(parents=True, exist_ok=True)
    import pytriton

    bundled = Path(pytriton.__file__).resolve().parent.parent / "nvidia_pytriton.libs"
    for name, pattern in LIBS.items():
        found = sorted(glob.glob(str(bundled / pattern)))
        if not found:
            raise SystemExit(f"{pattern} not found in {bundled}: perf_analyzer cannot start")
        link = libdir / name
        if not link.exists():
            link.symlink_to(found[0])
    return binary, libdir


def read_stats(url: str, model: str) -> Scrape:
    """Triton's statistics of ``model`` now, as the observer records them."""
    status, doc = rest_control.call_json(url, f"/v2/models/{model}/stats")
    assert status == 200, doc
    return Scrape(time.monotonic(), time.time(), url, "bench", tuple(stats_samples(doc)))


def run_client(argv: list[str], env: dict[str, str], url: str, model: str) -> dict[str, Any]:
    """Run one client to completion; its CPU seconds, wall time and the requests Triton counted meanwhile."""
    before = read_stats(url, model)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = t0 + CLIENT_TIMEOUT_S
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{argv[0]} exited with {code}:\n{out[-3000:]}")
    server = interpret(before, read_stats(url, model), model)  # what Triton saw during this client's run
    requests = int(server["requests"] or 0)
    cpu = usage.ru_utime + usage.ru_stime
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 2), "requests": requests,
            "cpu_us_per_request": round(cpu / requests * 1e6, 1) if requests else None,
            "triton_queue_ms": server["queue_ms"], "triton_compute_ms": server["compute_ms"],
            "triton_batch": server["batch_size"], "triton_compute_input_ms": server["compute_input_ms"],
            "output": out[-2000:]}  # fmt: skip


def perf_analyzer_at(
    rate: int, binary: Path, libdir: Path, server: TritonTarget, out: Path, cpu: int, stability: int
) -> dict[str, Any]:
    report = out / f"perf_analyzer-{rate}.csv"
    host = server.rest_url.removeprefix("http://")
    argv = ["taskset", "-c", str(cpu), str(binary), "-m", server.model_name, "-u", host, "-i", "http",
            "--request-rate-range", f"{rate}:{rate}:1", "--request-distribution", "constant",
            "--measurement-interval", "4000", "--max-trials", "8", "-s", str(stability), "--max-threads", "16",
            "--input-data", "random", "-b", "1", "-f", str(report)]  # fmt: skip
    env = {**os.environ, "LD_LIBRARY_PATH": f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    proc = run_client(argv, env, server.rest_url, server.model_name)
    with report.open() as f:
        row = next(csv.DictReader(f))
    us = 1e-3
    return {
        "tool": "perf_analyzer 2.49",
        "rate": rate,
        "throughput_rps": round(float(row["Inferences/Second"]), 1),
        "p50_ms": round(float(row["p50 latency"]) * us, 2),
        "p90_ms": round(float(row["p90 latency"]) * us, 2),
        "p99_ms": round(float(row["p99 latency"]) * us, 2),
        "client": proc,
    }


def satpoint_at(
    rate: int, server: TritonTarget, out: Path, cpu: int, hold_s: float, extra: list[str]
) -> dict[str, Any]:
    folder = out / ("-".join(["satpoint", str(rate), *(x.strip("-") for x in extra)]))
    argv = ["taskset", "-c", str(cpu), sys.executable, "-m", "satpoint", "run", "--url", server.rest_url,
            "--model", server.model_name, "--stage", f"{rate}:2:{hold_s:g}", "--no-html", "--out", str(folder),
            *extra]  # fmt: skip
    proc = run_client(argv, dict(os.environ), server.rest_url, server.model_name)
    summary = json.loads((folder / "summary.json").read_text())
    st = summary["stages"][0]
    return {
        "tool": "satpoint",
        "rate": rate,
        "throughput_rps": round(st["throughput_rps"], 1),
        "p50_ms": st["latency_ms"]["p50"],
        "p90_ms": st["latency_ms"]["p90"],
        "p99_ms": st["latency_ms"]["p99"],
        "service_p50_ms": st["service_ms"]["p50"],
        "service_p90_ms": st["service_ms"]["p90"],
        "service_p99_ms": st["service_ms"]["p99"],
        "send_lag_p99_ms": st["send_lag_ms"]["p99"],
        "verdict": st["verdict"],
        "generator_cpu_us_per_request": summary["generator"]["cpu_us_per_request"],
        "client": proc,
    }


def body_bytes(server: TritonTarget, *, binary: bool, rows: int) -> int:
    """The size of the request body satpoint sends (built from the model's metadata, as ``prepare`` does)."""
    meta = rest_control.model_metadata(server.rest_url, server.model_name)
    doc = from_metadata(meta, rows, 1)[0]
    return len(encode_binary_body(doc)[0]) if binary else len(encode_json_body(doc))


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| rate | tool | throughput/s | p50 ms | p90 ms | p99 ms | client CPU µs/req (process) | satpoint loop µs/req "
        "| Triton queue ms | Triton compute ms | Triton batch |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        svc = ""
        if "service_p50_ms" in r:
            svc = f" (from actual send: {r['service_p50_ms']:.2f} / {r['service_p90_ms']:.2f} / {r['service_p99_ms']:.2f})"
        lines.append(
            f"| {r['rate']} | {r['tool']} | {r['throughput_rps']:.1f} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | "
            f"{r['p99_ms']:.2f}{svc} | {r['client']['cpu_us_per_request']} | {r.get('generator_cpu_us_per_request', '–')} "
            f"| {r['client']['triton_queue_ms']} | {r['client']['triton_compute_ms']} | {r['client']['triton_batch']} |"
        )
    return "\n".join(lines)


def encoding_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| rows × 64 FP32 | encoding | body bytes | throughput/s | p50 ms | p99 ms | satpoint loop µs/req "
        "| process µs/req | Triton compute_input ms |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['rows_per_request']} | {r['encoding']} | {r['payload_bytes']} | {r['throughput_rps']:.1f} | "
            f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['generator_cpu_us_per_request']} | "
            f"{r['client']['cpu_us_per_request']} | {r['client']['triton_compute_input_ms']} |"
        )
    return "\n".join(lines)


def measure_encodings(args: argparse.Namespace, server_cpu: int, client_cpu: int) -> list[dict[str, Any]]:
    """satpoint at one rate on digits-mlp (64 FP32 per row), JSON and then binary, 1 and 16 rows a request."""
    out: list[dict[str, Any]] = []
    with TritonTarget(TritonSettings(demo_model="digits-mlp", cpus=(server_cpu,))) as server:
        for rows_per_request in (1, 16):
            for extra in ([], ["--binary-data"]):
                batch = ["--batch-size", str(rows_per_request)]
                r = satpoint_at(args.binary_rate, server, args.out, client_cpu, args.hold, [*extra, *batch])
                r["encoding"] = "binary" if extra else "json"
                r["rows_per_request"] = rows_per_request
                r["payload_bytes"] = body_bytes(server, binary=bool(extra), rows=rows_per_request)
                out.append(r)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="100,200,400", help="comma-separated request rates")
    ap.add_argument("--hold", type=float, default=12.0, help="satpoint's hold per rate, seconds")
    ap.add_argument("--wheel", type=Path, default=None, help="a local tritonclient 2.49.0 wheel (else pip download)")
    ap.add_argument("--binary-rate", type=int, default=200, help="rate of the JSON vs --binary-data comparison")
    ap.add_argument(
        "--stability", type=int, default=20, help="perf_analyzer -s: how far (percent) its windows may differ"
    )
    ap.add_argument("--no-encoding", action="store_true", help="leave out the JSON vs --binary-data part")
    ap.add_argument("--out", type=Path, default=Path("/tmp/satpoint-perf-analyzer"))
    ap.add_argument(
        "--tables", type=Path, default=None, help="print the tables of an earlier results.json; run nothing"
    )
    args = ap.parse_args()
    if args.tables is not None:
        doc = json.loads(args.tables.read_text())
        print(table(doc["rows"]) + "\n\n" + encoding_table(doc["encoding"]))
        return 0
    if not pytriton_available():
        raise SystemExit("needs the triton extra: pip install 'satpoint[triton]'")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("needs two CPUs: one for Triton, one for the client")
    server_cpu, client_cpu = cpus[0], cpus[1]
    binary, libdir = perf_analyzer(args.wheel)
    args.out.mkdir(parents=True, exist_ok=True)
    rates = [int(r) for r in args.rates.split(",")]
    rows: list[dict[str, Any]] = []
    with TritonTarget(TritonSettings(cpus=(server_cpu,))) as server:
        for rate in rates:
            rows.append(perf_analyzer_at(rate, binary, libdir, server, args.out, client_cpu, args.stability))
            rows.append(satpoint_at(rate, server, args.out, client_cpu, args.hold, []))
            print(table(rows[-2:]).splitlines()[-2:], flush=True)
    encoding = [] if args.no_encoding else measure_encodings(args, server_cpu, client_cpu)
    doc = {"server_cpu": server_cpu, "client_cpu": client_cpu, "rows": rows, "encoding": encoding}
    (args.out / "results.json").write_text(json.dumps(doc, indent=2))
    print(table(rows))
    print()
    print(encoding_table(encoding))
    return 0


if __name__ == "__main__":
    sys.exit(main())
