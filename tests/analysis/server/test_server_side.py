"""analysis.server.server_side and analysis.server.diagnosis on a results folder made offline: known server samples and
scrapes written beside simulated rows give known per-stage figures, cross-checks and diagnosis lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from satpoint.analysis.server.diagnosis import diagnose, spikes
from satpoint.analysis.summary.build import build_summary
from satpoint.analysis.summary.model import parse_summary
from satpoint.metrics.observed import SAMPLES_FILE, SCRAPES_FILE, Scrape, format_sample_row, samples_header
from satpoint.metrics.results import Results, load_results
from satpoint.plan import Stage
from satpoint.servers.sim.model import SimConfig
from tests.reports.html.test_html import make_run
from tests.test_api import _assert_mirrors

T0_MONO = 5000.0  # the generator's clock origin on CLOCK_MONOTONIC
STAGES = [Stage(100, 1, 6), Stage(200, 1, 6)]  # stage 1: [0, 7] s, stage 2: [7, 14] s on the run clock
URL = "http://127.0.0.1:8082/metrics"
STAGE_END_S = 14.0  # the last stage's nominal end


def cpu_cores_at(t: float) -> float:
    return 0.4 if t < 7 else 0.9


def write_observations(
    out: Path,
    results: Results,
    *,
    count_extra: int = 0,
    times: list[tuple[float, str]] | None = None,
    others: float | None = None,
) -> None:
    """Samples every 0.25 s (0.4 cores in stage 1, 0.9 in stage 2, RSS growing) and MLServer scrapes every
    second whose success counter follows the simulated answers exactly (plus ``count_extra`` at the end);
    ``others``: other work on the machine, in cores, from 5 s on (None: the machine was not sampled)."""
    seg = results.segments[0]
    seg.generator["t0_monotonic"] = T0_MONO
    rec = seg.records
    ok_done = np.sort(rec.done[rec.ok_mask()])
    cpu = 0.0
    lines = [samples_header()]
    for t in np.arange(-0.5, 15.01, 0.25):
        lines.append(
            format_sample_row(
                {
                    "mono_s": T0_MONO + t,
                    "unix_s": 1e9 + t,
                    "cpu_user_s": 0.75 * cpu,
                    "cpu_system_s": 0.25 * cpu,
                    "rss_bytes": (100 + 10 * t) * 2**20,
                    "threads": 12,
                    "ctx_voluntary": 100 * (t + 1),
                    "ctx_involuntary": 10 * (t + 1),
                    "procs": 2,
                    "cpus_busy_s": 1.05 * cpu,
                    **(
                        {}
                        if others is None
                        else {"machine_busy_s": 2.0 * cpu + others * max(0.0, t - 5.0), "known_cpu_s": 2.0 * cpu}
                    ),
                }
            )
        )
        cpu += 0.25 * cpu_cores_at(t + 0.125)
    (out / SAMPLES_FILE).write_text("".join(lines))
    scrapes = []
    times = times or [(-0.4, "start 0"), *((float(t), "tick") for t in range(1, 15)), (15.5, "end 0")]
    for t, tag in times:
        n = float(np.searchsorted(ok_done, t, side="right")) + (count_extra if tag.startswith("end") else 0)
        samples = [
            ("model_infer_request_success_total", {"model": "sim", "version": ""}, n),
            ("model_infer_request_success_total", {"model": "other", "version": ""}, 7.0 * t),
            ("model_infer_request_duration_count", {"model": "sim", "version": ""}, n),
            ("model_infer_request_duration_sum", {"model": "sim", "version": ""}, n * 0.002),
            ("parallel_request_queue_count", {}, n),
            ("parallel_request_queue_sum", {}, 1.5 * n),
            ("something_unknown", {}, 42.0),
        ]
        scrapes.append(json.dumps(Scrape(T0_MONO + t, 1e9 + t, URL, tag, tuple(samples)).to_json()))
    (out / SCRAPES_FILE).write_text("\n".join(scrapes) + "\n")
    results.header["observe"] = {
        "server_pids": [1234],
        "metrics_urls": [URL],
        "affinity": [0],
        "cgroup_quota_cores": None,
        "allowed_cores": 1.0,
        "not_seen": [],
        "problems": [],
    }


def folder(tmp_path: Path, **kw: Any) -> Results:
    out = tmp_path / "run"
    results = make_run(out, SimConfig(slots=4, service_ms=10.0), STAGES)
    results.header["target"]["model"] = "sim"
    write_observations(out, results, **kw)
    # what load() reads back: the header (with the clock origin) and the observer's files
    from satpoint.metrics.results import write_header

    write_header(out, results)
    return load_results(out)


def test_each_stage_gets_the_servers_cpu_memory_and_metrics(tmp_path: Path) -> None:
    doc = build_summary(folder(tmp_path))
    s1, s2 = doc["stages"]
    for stage, cores in ((s1, 0.4), (s2, 0.9)):
        srv = stage["server"]
        assert abs(srv["cpu_cores"]["mean"] - cores) < 0.01
        assert abs(srv["cpu_user_cores"] - 0.75 * cores) < 0.01
        assert srv["allowed_cores"] == 1.0 and abs(srv["cpu_utilisation"] - cores) < 0.01
        assert abs(srv["other_cores"] - 0.05 * cores) < 0.01  # the CPU was busy 5 % more than the server used
        # CPU per request = cores / answers per second
        assert abs(srv["cpu_us_per_request"] - cores / stage["completed_rps"] * 1e6) < 1
        assert srv["cpu_us_per_inference"] is None  # one row per request
        assert srv["procs_max"] == 2 and srv["threads_max"] == 12
        assert abs(srv["ctx_switches_per_s"]["voluntary"] - 100) < 1
        (met,) = stage["server_metrics"]
        assert met["source"] == "mlserver" and met["window"] == "steady"
        assert stage["window_start_s"] <= met["from_s"] < met["to_s"] <= stage["window_end_s"]
        assert abs(met["rps"] - stage["target_rps"]) < 0.05 * stage["target_rps"]  # the other model left out
        assert met["mean_latency_ms"] == 2.0 and met["parallel_queue_mean"] == 1.5
        check = met["cross_check"]
        assert check["agrees"] and check["difference"] == 0 and check["window"] == "segment"
        assert check["server_requests"] == check["client_answers"] > 0
    assert s2["server"]["rss_mb"]["max"] > s1["server"]["rss_mb"]["max"]
    assert doc["observed"]["samples"] > 50 and doc["observed"]["scrapes"] == 16
    assert doc["observed"]["allowed_cores"] == 1.0
    kinds = [d["kind"] for d in doc["diagnosis"]]
    assert "counts_agree" in kinds
    assert "cpu_bound" not in kinds and "not_cpu_bound" not in kinds  # no stage saturated: nothing to say
    _assert_mirrors(parse_summary(doc), doc)


def test_the_segments_end_scrape_closes_its_last_stage_even_before_the_stages_nominal_end(tmp_path: Path) -> None:
    """At a low rate the segment ends with its last answer, up to one gap between requests before the last
    stage's nominal end: the end scrape, taken then, still closes that stage's bracketing pair."""
    out = tmp_path / "run"
    results = make_run(out, SimConfig(slots=4, service_ms=10.0), STAGES)
    results.header["target"]["model"] = "sim"
    write_observations(out, results, times=[(-0.4, "start 0"), (STAGE_END_S - 0.01, "end 0")])
    from satpoint.metrics.results import write_header

    write_header(out, results)
    doc = build_summary(load_results(out))
    assert doc["stages"][-1]["window_end_s"] == STAGE_END_S
    for stage in doc["stages"]:
        (met,) = stage["server_metrics"]
        assert met["window"] == "bracketing" and met["source"] == "mlserver"


def test_a_count_that_disagrees_says_so(tmp_path: Path) -> None:
    doc = build_summary(folder(tmp_path, count_extra=50))
    check = doc["stages"][0]["server_metrics"][0]["cross_check"]
    assert not check["agrees"] and not check["explained"] and check["difference"] > 0.01
    assert "other clients" in check["note"]
    (line,) = [d for d in doc["diagnosis"] if d["kind"].startswith("counts")]
    assert line["kind"] == "counts_disagree"


def test_nothing_observed_leaves_the_fields_empty(tmp_path: Path) -> None:
    results = make_run(tmp_path / "run", SimConfig(slots=4, service_ms=10.0), STAGES)
    doc = build_summary(results)
    assert all(s["server"] is None and s["server_metrics"] == [] for s in doc["stages"])
    assert doc["observed"] is None and doc["diagnosis"] == []


def _stage(i: int, rps: float, verdict: str, cores: float | None, **more: Any) -> dict[str, Any]:
    server = None
    if cores is not None:
        server = {"cpu_cores": {"mean": cores, "p95": cores}, "allowed_cores": 1.0, "cpu_us_per_request": 1500.0}
        server.update(more.pop("server", {}))
    return {
        "index": 0,
        "segment": i,
        "target_rps": rps,
        "offered_rps": rps,
        "verdict": verdict,
        "service_ms": {"p50": more.pop("svc", 1.0)},
        "server": server,
        "server_metrics": more.pop("metrics", []),
    }


def find_summary(stages: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"kind": "find", "saturation_rps": 500.0, "stages": stages, "observed": {"not_seen": []}, **more}


def test_diagnosis_cpu_bound_or_not() -> None:
    bound = diagnose(find_summary([_stage(0, 400, "stable", 0.8), _stage(1, 600, "saturated", 0.97)]), {})
    assert bound[0]["kind"] == "cpu_bound" and bound[0]["evidence"]["cpu_cores"] == 0.97
    assert "0.97 of its 1 allowed cores" in bound[0]["text"] and "1500 µs" in bound[0]["text"]
    shared = diagnose(
        find_summary([_stage(1, 600, "saturated", 0.7, server={"cpus_busy_cores": 0.98, "other_cores": 0.28})]), {}
    )
    assert shared[0]["kind"] == "cpu_bound" and shared[0]["evidence"]["shared"] is True
    free = diagnose(find_summary([_stage(0, 500, "stable", 0.3), _stage(1, 600, "saturated", 0.35)]), {})
    assert free[0]["kind"] == "not_cpu_bound" and "concurrency limit" in free[0]["text"]
    blind = diagnose(
        find_summary([_stage(1, 600, "saturated", None)], observed={"not_seen": ["server resources: no pid"]}), {}
    )
    assert blind[0]["kind"] == "cpu_unknown" and "server resources: no pid" in blind[0]["text"]
    run = {"kind": "run", "stages": [_stage(0, 100, "stable", 0.1)]}
    assert diagnose(run, {}) == []  # never saturated: nothing to say about the CPU at saturation


def test_diagnosis_queue_batching_and_memory() -> None:
    triton = {"url": URL, "source": "triton", "queue_ms": 8.0, "compute_ms": 2.0, "batch_size": 1.05}
    batching = {"model_config": {"max_batch_size": 8, "max_queue_delay_us": 0}}  # a dynamic batcher
    lines = diagnose(
        find_summary([_stage(1, 600, "saturated", 0.5, metrics=[triton])], server={"settings": {}}, triton=batching),
        {},
    )
    kinds = {d["kind"]: d for d in lines}
    assert kinds["queue_dominates"]["evidence"] == {"stage": 1, "queue_ms": 8.0, "compute_ms": 2.0}
    assert kinds["batching_idle"]["evidence"]["batch"] == 1.05
    mlserver = {"url": URL, "source": "mlserver", "mean_latency_ms": 0.5, "batch_queue_mean": 1.0}
    lines = diagnose(
        find_summary(
            [_stage(1, 600, "saturated", 0.5, metrics=[mlserver], svc=12.0)],
            server={"settings": {"max_batch_size": 8}},
        ),
        {},
    )
    kinds = {d["kind"]: d for d in lines}
    assert kinds["queue_dominates"]["evidence"]["service_p50_ms"] == 12.0
    assert kinds["batching_idle"]["evidence"]["max_batch_size"] == 8
    growing = [_stage(i, 100 * (i + 1), "stable", 0.2, server={"rss_mb": {"max": 200 + 40 * i}}) for i in range(4)]
    lines = diagnose({"kind": "run", "stages": growing}, {})
    assert [d["kind"] for d in lines] == ["memory_growing"]
    assert lines[0]["evidence"] == {"first_mb": 200.0, "last_mb": 320.0, "stages": 4}


def test_periodic_latency_spikes() -> None:
    calm = [(t, 2.0, 3.0) for t in range(20)]
    assert spikes(calm) is None
    every5 = [(t, 2.0, 80.0 if t % 5 == 2 else 3.0) for t in range(20)]
    got = spikes(every5)
    assert got == {"spikes": 4, "period_s": 5.0, "spike_p99_ms": 80.0, "median_p50_ms": 2.0}
    irregular = [(t, 2.0, 80.0 if t in (1, 2, 9, 11, 19) else 3.0) for t in range(20)]
    assert spikes(irregular) is None
    lines = diagnose({"kind": "run", "stages": [_stage(0, 100, "stable", None)]}, {(0, 0): every5})
    assert lines[0]["kind"] == "latency_spikes" and lines[0]["evidence"]["period_s"] == 5.0


def test_gpus_per_stage_and_the_flamegraph_block(tmp_path: Path) -> None:
    """GPU samples (two devices) are aggregated over each steady window; the flame graph recorded in the
    header becomes summary.flamegraph; the typed summary mirrors both."""
    from satpoint.metrics.observed import GPU_FILE, format_gpu_row, gpus_header
    from satpoint.metrics.results import write_header

    out = tmp_path / "run"
    results = make_run(out, SimConfig(slots=4, service_ms=10.0), STAGES)
    results.header["target"]["model"] = "sim"
    write_observations(out, results)
    rows = [gpus_header()]
    for t in np.arange(-0.5, 15.01, 0.25):
        for dev in (0, 1):
            util = (30.0 if t <= 7 else 80.0) + 10 * dev
            rows.append(
                format_gpu_row(
                    {
                        "mono_s": T0_MONO + t,
                        "unix_s": 1e9 + t,
                        "device": dev,
                        "util_percent": util,
                        "mem_util_percent": util / 2,
                        "mem_used_bytes": (1 + t / 10) * 2**30,
                        "mem_total_bytes": 16 * 2**30,
                    }
                )
            )
    (out / GPU_FILE).write_text("".join(rows))
    results.header["observe"]["gpus"] = [{"device": 0, "name": "Fake A"}, {"device": 1, "name": "Fake B"}]
    results.header["flamegraph"] = {
        "segment": 0,
        "stage": 1,
        "target_rps": 200.0,
        "pid": 1234,
        "seconds": 6.0,
        "samples": 600,
        "speedscope": "profile.speedscope.json",
        "top": [{"function": "predict", "file": "m.py", "line": 3, "own_fraction": 0.5, "total_fraction": 0.6}],
        "error": None,
    }
    write_header(out, results)
    doc = build_summary(load_results(out))
    s1, s2 = doc["stages"]
    g1, g2 = s1["server"]["gpus"], s2["server"]["gpus"]
    assert [g["device"] for g in g1] == [0, 1]
    assert g1[0]["util_percent"] == {"mean": 30.0, "max": 30.0} and g2[1]["util_percent"]["mean"] == 90.0
    assert g1[1]["mem_util_percent"]["mean"] == 20.0 and g2[0]["mem_total_mb"] == 16 * 1024
    assert g2[0]["mem_used_mb"]["max"] > g1[0]["mem_used_mb"]["max"]
    assert doc["observed"]["gpus"][1]["name"] == "Fake B"
    fg = doc["flamegraph"]
    assert fg["stage"] == 2 and fg["svg"] == "flamegraph.svg" and fg["top"][0]["function"] == "predict"
    _assert_mirrors(parse_summary(doc), doc)


def test_no_gpu_samples_means_an_empty_list(tmp_path: Path) -> None:
    doc = build_summary(folder(tmp_path))
    assert all(s["server"]["gpus"] == [] for s in doc["stages"])
    assert doc["flamegraph"] is None


def test_a_streamed_run_gets_the_same_server_side_its_streams_and_both_report_sections(tmp_path: Path) -> None:
    """``run --stream --server-pid --metrics-url``, offline: the same samples and scrapes beside streamed rows
    (MLServer counts a stream once it has ended, at the rows' done times) give the same server figures,
    cross-check and diagnosis as the unary folder, the streams' own block, and a report with both sections."""
    from satpoint.config import RunConfig
    from satpoint.engine.schedule import due_times
    from satpoint.metrics.results import Segment, append_segment, new_header, write_header
    from satpoint.reports.html.report import write_report
    from satpoint.servers.sim.offline_stream import simulate_stream

    sim = SimConfig(slots=4, stream=True, stream_first_ms=4, stream_gap_ms=1, stream_chunks=7)  # 10 ms a stream
    out = tmp_path / "streamed"
    target = {"url": "http://sim.invalid:8080", "model": "sim", "protocol": "rest", "stream": True}
    results = Results(new_header(RunConfig.from_header({"kind": "run", "config": {"mode": "open_loop"}}), target, 0))
    rec = simulate_stream(due_times(STAGES, "constant"), sim)
    append_segment(out, results, Segment(0, "run", STAGES, "constant", 0, 0.0, rec))
    write_observations(out, results)
    write_header(out, results)
    streamed, unary = build_summary(load_results(out)), build_summary(folder(tmp_path))
    assert streamed["target"]["stream"] is True and unary["target"]["stream"] is not True
    for s, u in zip(streamed["stages"], unary["stages"], strict=True):
        assert s["stream"]["chunks_per_request"] == 7 and s["stream"]["ttfc_ms"]["p50"] > 0
        assert s["server"]["cpu_cores"] == u["server"]["cpu_cores"] and s["server"]["rss_mb"] == u["server"]["rss_mb"]
        assert s["server"]["cpu_us_per_request"] > 0 and s["server"]["procs_max"] == 2
        (met,) = s["server_metrics"]
        assert met["source"] == "mlserver" and met["window"] == "steady" and met["cross_check"]["agrees"]
    assert [d["kind"] for d in streamed["diagnosis"]] == [d["kind"] for d in unary["diagnosis"]]
    assert streamed["observed"] == unary["observed"]
    _assert_mirrors(parse_summary(streamed), streamed)
    page = write_report([out], out / "report.html").read_text()
    for section in ('id="stream"', 'id="stream-timeline-0"', 'id="server"', 'id="plot-server"', "Inside the server"):
        assert section in page, section
    assert 'id="plot-server-vs-client"' in page


def test_other_work_on_the_machine_is_measured_per_stage_and_a_busy_stage_said(tmp_path: Path) -> None:
    """Other processes took 0.5 cores from 5 s on: the first stage's window saw some of it, the second all of
    it; the second is busy (>= 0.25 cores), said in ``machine_busy`` and first among the warnings."""
    out = tmp_path / "run"
    results = make_run(out, SimConfig(slots=4, service_ms=10.0), STAGES)
    results.header["target"]["model"] = "sim"
    write_observations(out, results, others=0.5)
    from satpoint.metrics.results import write_header

    write_header(out, results)
    doc = build_summary(load_results(out))
    s1, s2 = doc["stages"]
    assert s2["server"]["machine_other_cores"] == pytest.approx(0.5, abs=0.02)
    assert 0.0 < s1["server"]["machine_other_cores"] < 0.25
    busy = doc["machine_busy"]
    assert busy["threshold_cores"] == 0.25 and busy["max_other_cores"] == pytest.approx(0.5, abs=0.02)
    assert [b["segment"] for b in busy["stages"]] == [s2["segment"]]
    assert doc["warnings"][0].startswith("BUSY MACHINE: other work took up to 0.5")
    _assert_mirrors(parse_summary(doc), doc)
    # a machine not sampled (a folder from before, or no local server): no figure, no block, no warning
    quiet = build_summary(folder(tmp_path / "q"))
    assert quiet["stages"][0]["server"]["machine_other_cores"] is None and quiet["machine_busy"] is None
    assert not any(w.startswith("BUSY MACHINE") for w in quiet["warnings"])
