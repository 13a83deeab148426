"""satpoint's saturation search against a plain linear staircase of equal precision, on known capacities.

Targets are ``satpoint sim`` servers (``c`` slots of mean service time ``S``: capacity exactly ``c/S``).
Two ways to find the highest stable rate are compared:

* **satpoint**: ``satpoint.procedures.saturation.run_search`` (geometric staircase, then bisection to ``precision``),
  with ``FindOptions(cooldown_s=1.0)`` and a cool-down that just sleeps;
* **linear**: one monotonic sequence of stages at ``start, start+Δ, start+2Δ, ...`` with
  ``Δ = precision × c/S`` (it is told the true capacity, which a real user does not know), stopping at
  the first stage that is not stable; its answer is the last stable rate.

Both use the same ``measure`` (one segment per stage, each stage ramping from the previous target), the
same stage lengths (``FindOptions.ramp_s`` and ``analysis.search.steps.hold_for``), the same verdict rules
(``VerdictRules()``, with the low-load p50 baseline taken from the first stable stage, as ``satpoint
find`` does) and the same start rate.

``--mode real`` (default): each method gets a fresh ``python -m satpoint.servers.sim.server`` subprocess pinned
to core 0; the generator runs in this process pinned to core 1, through the same code as ``satpoint
find`` without the live view::

    prepared = prepare(Target(url=..., model="sim"), 256)
    run_segment(prepared, stages, LoadOptions(max_inflight=256, drain_s=5), index=index, purpose=purpose,
                seed_offset=index, start_rps=start_rps, abort_when=overload_rule(baseline))

(``abort_when`` is ``satpoint find``'s early stop of clearly overloaded stages; ``--no-early-stop``
turns it off.)  The start rate comes from ``probe_service_s`` + ``start_rate_from_probe``, as in find.

``--mode offline``: the same searches on ``satpoint.servers.sim.offline.simulate`` (the sim's queueing
model without a network: simulated seconds, no early stop), over ``--seeds`` seeds; start rate
``start_rate_from_probe(S)``.

Reported per method: seconds of offered load (sum over stages of the time from the first to the last
due request), total wall seconds (real mode: including cool-downs, drains and connection set-up;
offline: load seconds + cool-downs), number of stages, the estimate and its ratio to ``c/S``.

    python benchmarks/search_bench.py --mode real --sims 4:10:const,2:5:exp,50:20:lognormal
    python benchmarks/search_bench.py --mode offline --seeds 5

Loopback only; every stage is bounded in time; every sim process (``satpoint.servers.sim.process.SimServer``)
is stopped with its whole process group.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

# Internal imports on purpose: both methods must share one measure (segments appended to one results
# folder, each stage ramping from the previous target, the same cool-down), the linear staircase needs
# per-stage verdicts and start_rps, and offline mode drives run_search with a fake measure; the public
# API (satpoint.find / satpoint.run) runs whole searches and runs against a live target only.
from satpoint.analysis.search.steps import hold_for
from satpoint.analysis.search.verdicts import Verdict
from satpoint.analysis.summary.build import build_summary, segment_stage_metrics
from satpoint.config import FindOptions, RunConfig, VerdictRules
from satpoint.engine.schedule import due_times
from satpoint.metrics.results import Results, Segment, append_segment, new_header
from satpoint.plan import Stage
from satpoint.procedures.saturation import overload_rule, run_search, start_rate_from_probe
from satpoint.procedures.search_run import Measure, SearchRun
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.process import SimServer

SIM_CORE, GEN_CORE = 0, 1


@dataclass(frozen=True)
class SimSpec:
    slots: int
    service_ms: float
    dist: str

    @classmethod
    def parse(cls, text: str) -> SimSpec:
        c, s, d = text.split(":")
        return cls(int(c), float(s), d)

    @property
    def capacity(self) -> float:
        return self.slots / (self.service_ms / 1000)

    def label(self) -> str:
        return f"c={self.slots}, S={self.service_ms:g} ms {self.dist}"


def loadavg1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def core_busy(window_s: float = 3.0) -> float:
    """The busier of the two benchmark cores over ``window_s`` (from /proc/stat)."""

    def ticks() -> dict[str, tuple[int, int]]:
        out = {}
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith(("cpu0 ", "cpu1 ")):
                v = [int(x) for x in line.split()[1:9]]
                out[line[:4]] = (sum(v) - v[3] - v[4], sum(v))
        return out

    a = ticks()
    time.sleep(window_s)
    b = ticks()
    return max((b[k][0] - a[k][0]) / max(1, b[k][1] - a[k][1]) for k in a)


def wait_quiet(limit: float, max_wait_s: float, idle_busy: float = 0.10) -> float:
    """Wait (at most ``max_wait_s``) until the 1-minute load average is below ``limit`` or both cores
    were at most ``idle_busy`` busy for 3 s; returns the load average then."""
    t0 = time.monotonic()
    while loadavg1() >= limit and time.monotonic() - t0 < max_wait_s:
        if core_busy() <= idle_busy:
            break
    return loadavg1()


# --------------------------------------------------------------------------------------------------
# the sim server
# --------------------------------------------------------------------------------------------------
def sim_server(spec: SimSpec, seed: int) -> SimServer:
    """``python -m satpoint.servers.sim.server`` pinned to one core (started on enter, its group stopped on exit)."""
    return SimServer(spec.slots, spec.service_ms, dist=spec.dist, seed=seed, cpus=[SIM_CORE])


# --------------------------------------------------------------------------------------------------
# measures
# --------------------------------------------------------------------------------------------------
def real_measure(prepared: Any, results: Results, early_stop: bool) -> Measure:
    from satpoint.config import LoadOptions
    from satpoint.procedures.session import run_segment

    opts = LoadOptions(max_inflight=256, drain_s=5)

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        baseline = results.header.get("config", {}).get("rules", {}).get("baseline_p50_ms")
        return run_segment(
            prepared,
            stages,
            opts,
            index=index,
            purpose=purpose,
            seed_offset=index,
            start_rps=start_rps,
            abort_when=overload_rule(baseline) if early_stop else None,
        )

    return measure


def offline_measure(cfg: SimConfig) -> Measure:
    from satpoint.servers.sim.offline import simulate

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        due = due_times(stages, "constant", seed=index, start_rps=start_rps)
        return Segment(index, purpose, stages, "constant", index, 0.0, simulate(due, cfg), start_rps=start_rps)

    return measure


def load_seconds(seg: Segment) -> float:
    """Seconds during which the segment offered load: from its origin to its last due request."""
    return float(seg.records.intended[-1]) if len(seg.records) else 0.0


# --------------------------------------------------------------------------------------------------
# the two methods
# --------------------------------------------------------------------------------------------------
def stage_details(results: Results) -> list[dict[str, Any]]:
    """Per measured stage: rate, verdict and why, and the generator's own send lag."""
    out = []
    for st in build_summary(results)["stages"]:
        out.append(
            {
                "rate": round(st["target_rps"], 1),
                "verdict": st["verdict"],
                "reasons": st["reasons"],
                "throughput": round(st["throughput_rps"], 1),
                "latency_p50_ms": st["latency_ms"].get("p50"),
                "generator_lag_p99_ms": st["generator_lag_ms"].get("p99"),
                "send_lag_max_ms": st["send_lag_ms"].get("max"),
                "requests": st["requests"],
            }
        )
    return out


def new_results(kind: str, fopts: FindOptions, start: float, target: str) -> Results:
    return Results(new_header(RunConfig(kind=kind, find=fopts.describe(start, {})), {"url": target}, time.time()))


MeasureFor = Callable[[Results], Measure]  # a measure that may read the results being written


def satpoint_search(
    measure_for: MeasureFor, fopts: FindOptions, start: float, out: Path, cooldown: Callable[[float], None]
) -> dict[str, Any]:
    results = new_results("find", fopts, start, str(out))
    measure = measure_for(results)
    cooled = [0.0]

    def cool(s: float, most_s: float = float("inf")) -> None:
        cooled[0] += s
        cooldown(s)

    t0 = time.monotonic()
    history = run_search(SearchRun(results, out, measure, fopts, cooldown=cool), VerdictRules(), start)
    wall = time.monotonic() - t0
    summary = build_summary(results)
    return {
        "estimate": summary["saturation_rps"],
        "unstable": summary["unstable_rps"],
        "stages": len(history),
        "steps": [(round(h.rate_rps, 1), h.verdict) for h in history],
        "load_s": sum(load_seconds(s) for s in results.segments),
        "cooldown_s": cooled[0],
        "wall_s": wall,
        "early_stops": sum(1 for s in results.segments if s.stopped == "overload"),
        "gen_cpu_s": sum(float(s.generator.get("cpu_s", 0.0)) for s in results.segments),
        "details": stage_details(results),
    }


def linear_staircase(
    measure_for: MeasureFor, fopts: FindOptions, start: float, delta: float, out: Path, max_stages: int = 200
) -> dict[str, Any]:
    results = new_results("run", fopts, start, str(out))
    measure = measure_for(results)
    rules = VerdictRules()
    rate, prev, last_stable = start, 0.0, None
    steps: list[tuple[float, str]] = []
    t0 = time.monotonic()
    for _ in range(max_stages):
        hold = hold_for(rate, fopts.min_requests, fopts.min_hold_s, fopts.max_hold_s)
        seg = measure([Stage(rate, fopts.ramp_s, hold)], prev, len(results.segments), "staircase")
        append_segment(out, results, seg)
        judged = segment_stage_metrics(seg, rules)
        verdict = judged[0].verdict if judged else "no_window"
        steps.append((round(rate, 1), verdict))
        if verdict != Verdict.STABLE:
            break
        if rules.baseline_p50_ms is None and judged[0].latency_ms.get("p50") is not None:
            # same latency-knee baseline as run_search: the first stable stage's p50
            rules = replace(rules, baseline_p50_ms=judged[0].latency_ms["p50"])
            results.header["config"]["rules"]["baseline_p50_ms"] = rules.baseline_p50_ms
        last_stable = rate
        prev = rate
        rate += delta
    wall = time.monotonic() - t0
    return {
        "estimate": last_stable,
        "unstable": steps[-1][0] if steps and steps[-1][1] != Verdict.STABLE else None,
        "stages": len(steps),
        "steps": steps,
        "load_s": sum(load_seconds(s) for s in results.segments),
        "cooldown_s": 0.0,
        "wall_s": wall,
        "early_stops": sum(1 for s in results.segments if s.stopped == "overload"),
        "gen_cpu_s": sum(float(s.generator.get("cpu_s", 0.0)) for s in results.segments),
        "details": stage_details(results),
    }


# --------------------------------------------------------------------------------------------------
# drivers
# --------------------------------------------------------------------------------------------------
def run_real(spec: SimSpec, args: argparse.Namespace, fopts: FindOptions, seed: int) -> dict[str, Any]:
    from satpoint.endpoints.prepare import prepare, probe_service_s
    from satpoint.endpoints.spec import Target

    out: dict[str, Any] = {"sim": spec.label(), "capacity": spec.capacity, "seed": seed}
    delta = args.precision * spec.capacity
    for method in args.methods:
        la = wait_quiet(args.load_limit, args.max_wait)
        with sim_server(spec, seed) as sim, tempfile.TemporaryDirectory(prefix="satpoint-search-") as tmp_dir:
            tmp = _keep_dir(args, f"real-{spec.slots}-{spec.service_ms:g}-{spec.dist}-s{seed}-{method}") or tmp_dir
            prepared = prepare(Target(url=sim.url, model="sim"), 256)
            svc = probe_service_s(prepared)
            start = start_rate_from_probe(svc) if svc else 10.0
            early = not args.no_early_stop

            def measure_for(results: Results, prepared: Any = prepared, early: bool = early) -> Measure:
                return real_measure(prepared, results, early)

            if method == "satpoint":
                r = satpoint_search(measure_for, fopts, start, Path(tmp), time.sleep)
            else:
                r = linear_staircase(measure_for, fopts, start, delta, Path(tmp))
        r.update({"start_rps": start, "probe_ms": svc * 1000 if svc else None, "load1": la, "load1_after": loadavg1()})
        out[method] = r
        print(
            f"  [{spec.label()}] {method}: estimate {r['estimate']} ({_ratio(r['estimate'], spec.capacity)}), "
            f"{r['stages']} stages, load {r['load_s']:.1f} s, wall {r['wall_s']:.1f} s, load avg {la:.2f} "
            f"steps {r['steps']}",
            file=sys.stderr,
            flush=True,
        )
    return out


def _keep_dir(args: argparse.Namespace, name: str) -> str | None:
    """Where to keep a method's results folder (``--keep DIR``), or None for a temporary one."""
    if not args.keep:
        return None
    d = Path(args.keep) / name
    d.mkdir(parents=True, exist_ok=True)
    return str(d)


def run_offline(spec: SimSpec, args: argparse.Namespace, fopts: FindOptions, seed: int) -> dict[str, Any]:
    cfg = SimConfig(slots=spec.slots, service_ms=spec.service_ms, dist=spec.dist, seed=seed)  # type: ignore[arg-type]
    start = start_rate_from_probe(spec.service_ms / 1000)
    out: dict[str, Any] = {"sim": spec.label(), "capacity": spec.capacity, "seed": seed}
    with tempfile.TemporaryDirectory(prefix="satpoint-search-") as tmp:
        for method in args.methods:
            d = Path(tmp) / method
            if method == "satpoint":
                r = satpoint_search(lambda _: offline_measure(cfg), fopts, start, d, lambda s: None)
            else:
                r = linear_staircase(lambda _: offline_measure(cfg), fopts, start, args.precision * spec.capacity, d)
            r["wall_s"] = r["load_s"] + r["cooldown_s"]  # simulated seconds
            r["start_rps"] = start
            out[method] = r
    return out


def _ratio(est: float | None, cap: float) -> str:
    return f"{est / cap:.3f}" if est else "-"


def med_range(vals: list[float | None], fmt: str = "{:.1f}") -> str:
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    m = statistics.median(v)
    return (
        fmt.format(m)
        if len(v) == 1 or min(v) == max(v)
        else f"{fmt.format(m)} ({fmt.format(min(v))}–{fmt.format(max(v))})"
    )


def loads(ms: list[dict[str, Any]]) -> str:
    return ", ".join(f"{x['load1']:.2f}" for x in ms) if "load1" in ms[0] else "-"


def table(rows: list[dict[str, Any]], methods: list[str], simulated: bool) -> str:
    unit = "simulated s" if simulated else "s"
    head = (
        f"| target (capacity) | method | load ({unit}) | total ({unit}) | stages | estimate (rps) | "
        f"estimate / capacity | early-stopped stages | load avg |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    by_sim: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_sim.setdefault(r["sim"], []).append(r)
    for sim, rs in by_sim.items():
        cap = rs[0]["capacity"]
        for m in methods:
            ms = [r[m] for r in rs]
            lines.append(
                f"| {sim} ({cap:g} rps) | {m} | {med_range([x['load_s'] for x in ms])} "
                f"| {med_range([x['wall_s'] for x in ms])} | {med_range([x['stages'] for x in ms], '{:.0f}')} "
                f"| {med_range([x['estimate'] for x in ms])} "
                f"| {med_range([x['estimate'] / cap if x['estimate'] else None for x in ms], '{:.3f}')} "
                f"| {med_range([x['early_stops'] for x in ms], '{:.0f}')} "
                f"| {loads(ms)} |"
            )
        if "satpoint" in methods and "linear" in methods:
            ratios = [r["linear"]["load_s"] / r["satpoint"]["load_s"] for r in rs if r["satpoint"]["load_s"]]
            lines.append(f"| {sim} | linear ÷ satpoint load time | {med_range(ratios, '{:.2f}')}× | | | | | | |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("real", "offline"), default="real")
    p.add_argument("--sims", default="4:10:const,2:5:exp,50:20:lognormal", help="SLOTS:SERVICE_MS:DIST,...")
    p.add_argument("--methods", default="satpoint,linear")
    p.add_argument("--precision", type=float, default=0.05)
    p.add_argument("--seeds", type=int, default=1, help="repeats (sim seeds 1..N)")
    p.add_argument("--budget-s", type=float, default=270.0, help="satpoint's search budget (FindOptions.budget_s)")
    p.add_argument("--no-early-stop", action="store_true", help="real mode: no overload early stop")
    p.add_argument("--load-limit", type=float, default=0.6)
    p.add_argument("--max-wait", type=float, default=180.0)
    p.add_argument("--json", default=None)
    p.add_argument("--keep", default=None, help="real mode: keep each method's results folder under this directory")
    args = p.parse_args()
    args.methods = [m for m in args.methods.split(",") if m]
    specs = [SimSpec.parse(s) for s in args.sims.split(",") if s]
    fopts = FindOptions(cooldown_s=1.0, precision=args.precision, budget_s=args.budget_s, profile=False)
    if args.mode == "real":
        os.sched_setaffinity(0, {GEN_CORE})
    rows = []
    for seed in range(1, args.seeds + 1):
        for spec in specs:
            rows.append(
                run_real(spec, args, fopts, seed) if args.mode == "real" else run_offline(spec, args, fopts, seed)
            )
            if args.mode == "offline":
                r = rows[-1]
                print(
                    f"  [{spec.label()} seed {seed}] "
                    + "; ".join(
                        f"{m}: {r[m]['estimate']} in {r[m]['stages']} stages, {r[m]['wall_s']:.1f} s"
                        for m in args.methods
                    ),
                    file=sys.stderr,
                )
    print(table(rows, args.methods, args.mode == "offline"))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
