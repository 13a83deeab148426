"""Plain-language hints, each backed by a measurement in the summary (a pure function of it)."""

from __future__ import annotations

from typing import Any


def hints(summary: dict[str, Any]) -> list[str]:
    out: list[str] = []
    stages = summary.get("stages", [])
    verdicts = {s["verdict"] for s in stages}
    notes = summary.get("find_notes") or []
    ended_limited = any(n.startswith("generator-limited") for n in notes)
    if "generator_limited" in verdicts and (summary.get("kind") != "find" or ended_limited):
        out.append(
            "generator-limited: results are a lower bound; give the generator its own cores "
            "(--generator-cpus, --procs) or run it on another machine; --wake-window-ms 0.5 sends the requests "
            "due within 0.5 ms in one wake-up (about a third less CPU per request at 5 000/s), --realtime 10 "
            "keeps a process sharing its core from delaying it"
        )
    elif "generator_limited" in verdicts:
        out.append(
            "the generator fell behind in a stage and the search measured it again: the answer stands, but "
            "a generator with its own cores (--generator-cpus, --procs) gives cleaner numbers"
        )
    if "client_limited" in verdicts:
        out.append(
            "client-limited: requests waited for the generator's connections while the server answered at "
            "low-load speed; raise --max-inflight (see the stage's reasons for how many it needed)"
        )
    server = summary.get("server") or {}
    settings = server.get("settings") or {}
    if settings.get("debug") is True:
        out.append(
            "MLServer debug=true writes an access log line per request, which costs a lot of throughput; "
            "set debug to false for production and for load tests"
        )
    workers = settings.get("parallel_workers")
    cpus = server.get("cpus") or settings.get("cpus")
    ncpu = len(cpus) if cpus else None
    if workers is not None and ncpu is not None:
        if workers > ncpu:
            out.append(
                f"parallel_workers={workers} exceeds the {ncpu} CPU(s) given to the server: CPU-bound "
                "workers will contend; keep workers at or slightly above the core count"
            )
        elif workers < ncpu and summary.get("saturation_rps"):
            out.append(
                f"parallel_workers={workers} with {ncpu} CPU(s): more workers may raise the saturation "
                "point of a CPU-bound model (compare with `satpoint compare` / a workers sweep)"
            )
    sat = summary.get("saturation_rps")
    mx = summary.get("max_throughput_rps")
    if sat and mx and mx > sat * 1.15:
        out.append(
            f"max throughput {mx:.0f}/s is well above the saturation point {sat:.0f}/s: the server "
            "completes more when overloaded but with growing queues; plan on the saturation point"
        )
    if "failing" in verdicts:
        out.append("some stages failed with errors above the limit: check the error classes and server logs")
    for s in stages:
        svc, lat = s.get("service_ms", {}).get("p99"), s.get("latency_ms", {}).get("p99")
        if svc and lat and lat > 3 * svc and s["verdict"] == "stable":
            out.append(
                f"at {s['target_rps']:g} rps p99 latency ({lat:.1f} ms) is far above p99 service time "
                f"({svc:.1f} ms): requests waited to be sent; a closed-loop tool would hide this"
            )
            break
    return out
