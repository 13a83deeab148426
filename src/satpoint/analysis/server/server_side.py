"""What the server did in each stage: a pure function of the observer's samples and scrapes.

Per stage (its steady window, on the segment's run clock):

- ``server``: the process tree's CPU (cores used = ΔCPU seconds / Δwall, mean and p95 over the sample
  intervals, user/system split), CPU µs per request (and per inference when a request carries a batch),
  peak RSS, threads, processes, context switches per second, and the cores the server was allowed;
- ``server_metrics``: per Prometheus endpoint, the counters' deltas between the scrapes that fall in the
  steady window (or, when too few do, the scrapes that bracket it): requests the server counted, its
  mean latency, queue vs compute time and achieved batch size where it exposes them (MLServer, Triton,
  Seldon Core 2's agent), and a cross-check of the server's count against the answers satpoint got
  over the whole segment (the start and end scrapes bracket exactly its requests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.engine.lead import start_lead_s
from satpoint.metrics.observed import Observations, PromSample, Scrape
from satpoint.metrics.records import Outcome
from satpoint.metrics.results import Results, Segment
from satpoint.metrics.stats import StageMetrics

#: the server's count may differ from satpoint's by this fraction before the cross-check fails
CROSS_CHECK_TOLERANCE = 0.01
#: the scrapes inside a steady window must span this fraction of it to describe it
MIN_SCRAPE_SPAN_FRAC = 0.5

Filter = Callable[[dict[str, str]], bool]


def run_clock(
    seg: Segment, mono_s: npt.NDArray[np.float64], unix_s: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Observer times on the segment's run clock: exact through the generator's clock origin
    (``t0_monotonic``), else approximated from the wall clock."""
    t0 = seg.generator.get("t0_monotonic")
    if isinstance(t0, (int, float)):
        return mono_s - float(t0)
    lead = start_lead_s(int(seg.generator.get("procs", 1) or 1))
    return unix_s - seg.started_unix - lead


# -- resources ------------------------------------------------------------------------------------------


def stage_throttling(
    s: dict[str, npt.NDArray[np.float64]], idx: npt.NDArray[np.intp], wall_s: float
) -> dict[str, Any] | None:
    """CFS throttling of the server's own cgroup over the samples ``idx`` (None: no cgroup counters):
    periods, periods throttled and their share, seconds throttled (summed over the CPUs) and per second."""
    cols = ("cg_periods", "cg_throttled_periods", "cg_throttled_s")
    if any(c not in s for c in cols):
        return None
    first, last = idx[0], idx[-1]
    vals = [(float(s[c][first]), float(s[c][last])) for c in cols]
    if not all(np.isfinite(v).all() for v in vals):
        return None
    periods, throttled, secs = (max(0.0, b - a) for a, b in vals)
    return {
        "periods": int(periods),
        "throttled_periods": int(throttled),
        "throttled_share": round(throttled / periods, 4) if periods else None,
        "throttled_s": round(secs, 4),
        "throttled_ms_per_s": round(secs * 1000 / wall_s, 2) if wall_s > 0 else None,
    }


def stage_resources(
    seg: Segment, m: StageMetrics, obs: Observations, allowed: float | None, batch_size: int
) -> dict[str, Any] | None:
    """The ``server`` block of a stage (None when fewer than two samples cover its steady window)."""
    s = obs.samples
    if obs.n_samples < 2:
        return None
    t = run_clock(seg, s["mono_s"], s["unix_s"])
    ws, we = m.window_start_s, m.window_end_s
    idx = np.flatnonzero((t >= ws) & (t <= we))
    if len(idx) < 2:  # a short window: the samples just around it
        before = np.flatnonzero(t <= ws)
        after = np.flatnonzero(t >= we)
        if not len(before) or not len(after) or t[after[0]] - t[before[-1]] > 2 * (we - ws) + 1.0:
            return None
        idx = np.arange(before[-1], after[0] + 1)
    dt = np.diff(t[idx])
    good = dt > 0
    if not good.any():
        return None
    user = np.diff(s["cpu_user_s"][idx])[good]
    system = np.diff(s["cpu_system_s"][idx])[good]
    dt = dt[good]
    wall = float(dt.sum())
    cores = (user + system) / dt
    mean = float((user.sum() + system.sum()) / wall)
    out: dict[str, Any] = {
        "samples": len(idx),
        "cpu_cores": {"mean": round(mean, 4), "p95": round(float(np.percentile(cores, 95)), 4)},
        "cpu_user_cores": round(float(user.sum()) / wall, 4),
        "cpu_system_cores": round(float(system.sum()) / wall, 4),
        "allowed_cores": allowed,
        "cpu_utilisation": round(mean / allowed, 4) if allowed else None,
        "cpus_busy_cores": None,
        "other_cores": None,
        "machine_other_cores": None,
        "cpu_us_per_request": None,
        "cpu_us_per_inference": None,
        "rss_mb": {"max": round(float(s["rss_bytes"][idx].max()) / 2**20, 2)},
        "threads_max": int(s["threads"][idx].max()),
        "procs_max": int(s["procs"][idx].max()),
        "ctx_switches_per_s": {
            "voluntary": round(float(np.diff(s["ctx_voluntary"][idx])[good].sum()) / wall, 1),
            "involuntary": round(float(np.diff(s["ctx_involuntary"][idx])[good].sum()) / wall, 1),
        },
    }
    busy = s["cpus_busy_s"][idx]
    if np.isfinite(busy).all():  # the allowed CPUs' busy time, by any process: were they shared?
        cores_busy = float(np.diff(busy)[good].sum()) / wall
        out["cpus_busy_cores"] = round(cores_busy, 4)
        out["other_cores"] = round(max(0.0, cores_busy - mean), 4)
    if (
        "machine_busy_s" in s
        and np.isfinite(s["machine_busy_s"][idx]).all()
        and np.isfinite(s["known_cpu_s"][idx]).all()
    ):
        other = np.diff(s["machine_busy_s"][idx])[good].sum() - np.diff(s["known_cpu_s"][idx])[good].sum()
        out["machine_other_cores"] = round(max(0.0, float(other) / wall), 4)
    out["gpus"] = stage_gpus(seg, m, obs)
    out["cpu_throttling"] = stage_throttling(s, idx, wall)
    peak = s["cg_memory_peak_bytes"][idx] if "cg_memory_peak_bytes" in s else np.array([])
    out["cgroup_memory_peak_mb"] = round(float(peak.max()) / 2**20, 2) if np.isfinite(peak).any() else None
    if m.completed_rps and m.completed_rps > 0:
        per_req = mean / m.completed_rps * 1e6
        out["cpu_us_per_request"] = round(per_req, 2)
        if batch_size > 1:
            out["cpu_us_per_inference"] = round(per_req / batch_size, 2)
    return out


def stage_gpus(seg: Segment, m: StageMetrics, obs: Observations) -> list[dict[str, Any]]:
    """Per GPU, over the stage's steady window: utilisation (mean and max of NVML's readings), memory
    used (max) and the device's memory; [] when no GPU was sampled (none, or no NVML)."""
    g = obs.gpus
    if not g or not len(g.get("mono_s", ())):
        return []
    t = run_clock(seg, g["mono_s"], g["unix_s"])
    inside = (t >= m.window_start_s) & (t <= m.window_end_s)
    out = []
    for dev in sorted({int(d) for d in g["device"][inside] if np.isfinite(d)}):
        sel = inside & (g["device"] == dev)
        util, mem_util = g["util_percent"][sel], g["mem_util_percent"][sel]
        used, total = g["mem_used_bytes"][sel], g["mem_total_bytes"][sel]
        out.append(
            {
                "device": dev,
                "samples": int(np.count_nonzero(sel)),
                "util_percent": {"mean": round(float(np.mean(util)), 2), "max": round(float(np.max(util)), 2)},
                "mem_util_percent": {"mean": round(float(np.mean(mem_util)), 2)},
                "mem_used_mb": {"max": round(float(np.max(used)) / 2**20, 2)},
                "mem_total_mb": round(float(np.max(total)) / 2**20, 2),
            }
        )
    return out


# -- Prometheus ------------------------------------------------------------------------------------------


def _names(*base: str) -> tuple[str, ...]:
    """A counter's sample names with and without ``_total`` (exporters and parsers differ)."""
    out: list[str] = []
    for b in base:
        out += [b, f"{b}_total"] if not b.endswith(("_sum", "_count", "_total")) else [b]
    return tuple(out)


def _total(samples: Iterable[PromSample], names: tuple[str, ...], keep: Filter) -> float | None:
    found, total = False, 0.0
    for name, labels, value in samples:
        if name in names and keep(labels):
            found = True
            total += value
    return total if found else None


def _model_filter(model: str | None) -> Filter:
    def keep(labels: dict[str, str]) -> bool:
        return model is None or "model" not in labels or labels["model"] == model

    return keep


class _Delta:
    """Counter deltas between two scrapes of one endpoint (None: a series missing, or reset between)."""

    def __init__(self, a: Scrape, b: Scrape, model: str | None) -> None:
        self.a, self.b = a, b
        self.model = _model_filter(model)

    def __call__(self, *names: str, keep: Filter | None = None) -> float | None:
        def both(labels: dict[str, str]) -> bool:
            return self.model(labels) and (keep is None or keep(labels))

        ns = _names(*names)
        va, vb = _total(self.a.samples, ns, both), _total(self.b.samples, ns, both)
        if va is None or vb is None or vb < va:
            return None
        return vb - va

    def ratio(self, num: str, den: str, scale: float = 1.0, keep: Filter | None = None) -> float | None:
        n, d = self(num, keep=keep), self(den, keep=keep)
        return round(n / d * scale, 4) if n is not None and d else None


def _has(scrape: Scrape, prefix: str) -> bool:
    return any(name.startswith(prefix) for name, _, _ in scrape.samples)


def source_of(scrape: Scrape) -> str | None:
    """Which server's metrics an endpoint exposes: mlserver, triton, seldon (or None: unknown)."""
    if _has(scrape, "triton_stats_"):
        return "triton_stats"
    if _has(scrape, "nv_inference_"):
        return "triton"
    if _has(scrape, "seldon_model_infer"):
        return "seldon"
    if _has(scrape, "model_infer_request_"):
        return "mlserver"
    return None


def requests_counted(d: _Delta, source: str | None) -> float | None:
    """Successful inference requests the server counted between two scrapes."""
    if source == "triton":
        return d("nv_inference_request_success")
    if source == "triton_stats":
        return d("triton_stats_success_count")
    if source == "seldon":
        return d("seldon_model_infer")
    if source == "mlserver":
        return d("model_infer_request_success")
    return None


def interpret(a: Scrape, b: Scrape, model: str | None) -> dict[str, Any]:
    """What two scrapes of one endpoint say about the time between them."""
    d = _Delta(a, b, model)
    src = source_of(b)
    span = b.mono_s - a.mono_s
    n = requests_counted(d, src)
    out: dict[str, Any] = {
        "source": src,
        "requests": None if n is None else round(n),
        "failures": None,
        "rps": round(n / span, 3) if n is not None and span > 0 else None,
        "mean_latency_ms": None,
        "handler_mean_ms": None,
        "queue_ms": None,
        "compute_ms": None,
        "batch_size": None,
        "batch_queue_mean": None,
        "parallel_queue_mean": None,
        "pending_requests_mean": None,
    }
    if src == "mlserver":
        fail = d("model_infer_request_failure")
        out["failures"] = None if fail is None else round(fail)
        out["mean_latency_ms"] = d.ratio("model_infer_request_duration_sum", "model_infer_request_duration_count", 1e3)
        rest = d.ratio(
            "rest_server_request_duration_seconds_sum",
            "rest_server_request_duration_seconds_count",
            1e3,
            keep=lambda lab: "infer" in lab.get("path", ""),
        )
        grpc = d.ratio(
            "grpc_server_handling_seconds_sum",
            "grpc_server_handling_seconds_count",
            1e3,
            keep=lambda lab: lab.get("grpc_method") == "ModelInfer",
        )
        out["handler_mean_ms"] = rest if rest is not None else grpc
        out["batch_queue_mean"] = d.ratio("batch_request_queue_sum", "batch_request_queue_count")
        out["parallel_queue_mean"] = d.ratio("parallel_request_queue_sum", "parallel_request_queue_count")
    elif src == "triton":
        fail = d("nv_inference_request_failure")
        out["failures"] = None if fail is None else round(fail)
        if n:
            us = 1e-3 / n
            req, queue = d("nv_inference_request_duration_us"), d("nv_inference_queue_duration_us")
            parts = [d(f"nv_inference_compute_{p}_duration_us") for p in ("input", "infer", "output")]
            out["mean_latency_ms"] = None if req is None else round(req * us, 4)
            out["queue_ms"] = None if queue is None else round(queue * us, 4)
            out["compute_ms"] = None if any(p is None for p in parts) else round(sum(p or 0.0 for p in parts) * us, 4)
        out["batch_size"] = d.ratio("nv_inference_count", "nv_inference_exec_count")
        out["pending_requests_mean"] = _gauge_mean([a, b], "nv_inference_pending_request_count", d.model)
    elif src == "seldon":
        out["mean_latency_ms"] = d.ratio("seldon_model_infer_seconds", "seldon_model_infer", 1e3)
    elif src == "triton_stats":
        out.update(triton_stats_figures(d))
    return out


def triton_stats_figures(d: _Delta) -> dict[str, Any]:
    """What two reads of Triton's statistics say: mean time per request in the queue and in each compute
    phase, the requests and batches executed, and the batch size achieved (inferences / executions)."""
    fail = d("triton_stats_fail_count")
    out: dict[str, Any] = {"failures": None if fail is None else round(fail)}
    for phase in ("queue", "compute_input", "compute_infer", "compute_output", "success"):
        out[f"{phase}_ms"] = d.ratio(f"triton_stats_{phase}_ns", f"triton_stats_{phase}_count", 1e-6)
    parts = [out[f"compute_{p}_ms"] for p in ("input", "infer", "output")]
    out["compute_ms"] = None if any(p is None for p in parts) else round(sum(parts), 4)
    out["mean_latency_ms"] = out.pop("success_ms")
    inferences, executions = d("triton_stats_inference_count"), d("triton_stats_execution_count")
    out["inferences"] = None if inferences is None else round(inferences)
    out["executions"] = None if executions is None else round(executions)
    out["batch_size"] = d.ratio("triton_stats_inference_count", "triton_stats_execution_count")
    return out


def _gauge_mean(scrapes: list[Scrape], name: str, keep: Filter) -> float | None:
    vals = [v for s in scrapes if (v := _total(s.samples, (name,), keep)) is not None]
    return round(float(np.mean(vals)), 3) if vals else None


def _by_url(obs: Observations) -> dict[str, list[Scrape]]:
    out: dict[str, list[Scrape]] = {}
    for s in obs.scrapes:
        out.setdefault(s.url, []).append(s)
    for v in out.values():
        v.sort(key=lambda s: s.mono_s)
    return out


def _scrape_t(seg: Segment, s: Scrape) -> float:
    return float(run_clock(seg, np.array([s.mono_s]), np.array([s.unix_s]))[0])


def cross_check(seg: Segment, scrapes: list[Scrape], model: str | None) -> dict[str, Any] | None:
    """The server's count of successful requests vs satpoint's answers, over the whole segment."""
    ok = [s for s in scrapes if s.error is None]
    a = next((s for s in ok if s.tag == f"start {seg.index}"), None)
    b = next((s for s in ok if s.tag == f"end {seg.index}"), None)
    if a is None or b is None:
        return None
    counted = requests_counted(_Delta(a, b, model), source_of(b))
    if counted is None:
        return None
    rec = seg.records
    answered = int(np.count_nonzero(rec.ok_mask()))
    diff = (counted - answered) / answered if answered else (0.0 if counted == 0 else None)
    agrees = diff is not None and abs(diff) <= CROSS_CHECK_TOLERANCE
    why: list[str] = []
    lost = int(np.count_nonzero(np.isin(rec.outcome, [Outcome.TIMEOUT, Outcome.UNFINISHED, Outcome.CONN_RESET])))
    retried = int(np.count_nonzero(rec.retried))
    # more counted than answered, by no more than the requests satpoint stopped waiting for (or sent twice)
    explained = not agrees and answered <= counted <= answered + lost + retried
    if not agrees:
        if counted > answered and lost:
            why.append(
                f"{lost} requests timed out, were cut off or lost their connection: the server may have "
                "answered them after satpoint stopped waiting"
            )
        if counted > answered and retried:
            why.append(f"{retried} requests were sent twice (the first attempt failed): the server may count both")
        errors = int(np.count_nonzero(rec.error_mask()))
        if counted < answered:
            why.append("the server counted fewer than satpoint got answers for: another model, replica or endpoint?")
        elif not why:
            why.append("other clients may have used the server during the segment")
        if errors:
            why.append(f"{errors} requests got errors (the server counts failures apart)")
    return {
        "window": "segment",
        "segment": seg.index,
        "server_requests": round(counted),
        "client_answers": answered,
        "difference": None if diff is None else round(diff, 5),
        "agrees": agrees,
        "explained": explained,
        "note": "; ".join(why) or None,
    }


def stage_metrics_blocks(seg: Segment, m: StageMetrics, obs: Observations, model: str | None) -> list[dict[str, Any]]:
    """The ``server_metrics`` blocks of a stage, one per endpoint."""
    out = []
    ws, we = m.window_start_s, m.window_end_s
    for url, scrapes in _by_url(obs).items():
        ok = [(s, _scrape_t(seg, s)) for s in scrapes if s.error is None]
        inside = [(s, t) for s, t in ok if ws <= t <= we]
        if len(inside) >= 2 and inside[-1][1] - inside[0][1] >= MIN_SCRAPE_SPAN_FRAC * (we - ws):
            (a, ta), (b, tb), window = inside[0], inside[-1], "steady"
        else:
            # the segment's own start and end scrapes bracket all of it, whatever their clock says: the end
            # one follows the last answer, which at a low rate comes before the last stage's nominal end
            # (by up to one gap between requests), so a time test alone would leave that stage without a pair
            first, last = f"start {seg.index}", f"end {seg.index}"
            before = [
                (s, t) for s, t in ok if (t <= ws and (s.tag != "tick" or t >= ws - (we - ws) - 5)) or s.tag == first
            ]
            after = [(s, t) for s, t in ok if t >= we or s.tag == last]
            if not before or not after:
                continue
            (a, ta), (b, tb), window = before[-1], after[0], "bracketing"
        block: dict[str, Any] = {"url": url, "window": window, "from_s": round(ta, 3), "to_s": round(tb, 3)}
        block.update(interpret(a, b, model))
        block["cross_check"] = cross_check(seg, scrapes, model)
        out.append(block)
    return out


# -- the summary's blocks -------------------------------------------------------------------------------


def observed_block(results: Results) -> dict[str, Any] | None:
    """summary.json's ``observed``: what was watched, the server's allowed cores, what could not be seen."""
    head = results.header.get("observe")
    if not isinstance(head, dict):
        return None
    obs = results.observed
    not_seen = list(head.get("not_seen") or [])
    problems = list(head.get("problems") or [])
    scrapes = obs.scrapes if obs is not None else []
    for url in head.get("metrics_urls") or []:
        mine = [s for s in scrapes if s.url == url]
        failed = [s for s in mine if s.error is not None]
        if mine and len(failed) == len(mine):
            not_seen.append(f"server-side metrics: every scrape of {url} failed ({failed[-1].error})")
        elif failed:
            problems.append(f"{len(failed)} of {len(mine)} scrapes of {url} failed (last: {failed[-1].error})")
        elif mine and source_of(mine[-1]) is None:
            problems.append(f"{url} exposes no metric satpoint understands (kept raw in server-metrics.jsonl)")
    if head.get("server_pids") and (obs is None or obs.n_samples == 0):
        not_seen.append("server resources: no sample of the server's processes (were they gone?)")
    return {
        "server_pids": list(head.get("server_pids") or []),
        "metrics_urls": list(head.get("metrics_urls") or []),
        "affinity": head.get("affinity"),
        "cgroup_quota_cores": head.get("cgroup_quota_cores"),
        "allowed_cores": head.get("allowed_cores"),
        "samples": obs.n_samples if obs is not None else 0,
        "scrapes": len(scrapes),
        "gpus": list(head.get("gpus") or []),
        "not_seen": not_seen,
        "problems": problems,
    }


def add_server_fields(
    results: Results, stage_docs: list[dict[str, Any]], stages: list[tuple[int, StageMetrics]]
) -> None:
    """Add ``server`` and ``server_metrics`` to every stage document (None and [] when nothing was seen)."""
    obs = results.observed
    head = results.header.get("observe") or {}
    allowed = head.get("allowed_cores")
    target = results.header.get("target", {})
    model = None if results.header.get("mix") else target.get("model")  # a mix: the stage counts every model
    batch = int(target.get("batch_size") or 1)
    segs = {s.index: s for s in results.segments}
    for doc, (i, m) in zip(stage_docs, stages, strict=True):
        seg = segs[i]
        doc["server"] = stage_resources(seg, m, obs, allowed, batch) if obs is not None else None
        doc["server_metrics"] = stage_metrics_blocks(seg, m, obs, model) if obs is not None else []
