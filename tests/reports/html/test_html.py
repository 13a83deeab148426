"""report.html from results folders made offline (the queue twin of the simulator, no network)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from satpoint.analysis.summary.build import build_summary
from satpoint.config import FindOptions, RunConfig, VerdictRules
from satpoint.engine.schedule import due_times
from satpoint.metrics.observed import SAMPLES_FILE, SCRAPES_FILE, Scrape, format_sample_row, samples_header
from satpoint.metrics.records import Outcome
from satpoint.metrics.results import Results, Segment, append_segment, load_results, new_header, write_header
from satpoint.plan import Stage
from satpoint.procedures.saturation import run_profile, run_search
from satpoint.procedures.search_run import Measure, SearchRun
from satpoint.reports.html.data import (
    build_series,
    folder_labels,
    spectrum_points,
    timeline_offsets,
    window_latencies_s,
)
from satpoint.reports.html.plots import PLOTS, phase_series, plots_for, throughput_vs_offered
from satpoint.reports.html.report import load_folders, write_report
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate

T0 = 1_700_000_000.0
SECRET = "Bearer sk-very-secret"


def offline_measure(cfg: SimConfig, t0: float = T0, cooldown_s: float = 2.0) -> Measure:
    """Segments as ``satpoint find`` records them, on a wall clock that advances with each segment."""
    clock = [t0]

    def measure(stages: list[Stage], start_rps: float, index: int, purpose: str) -> Segment:
        due = due_times(stages, "constant", seed=index, start_rps=start_rps)
        seg = Segment(index, purpose, stages, "constant", index, clock[0], simulate(due, cfg), start_rps=start_rps)
        seg.generator = {"cpu_s": 0.01 * len(due) / 1000}
        clock[0] += sum(s.duration_s for s in stages) + cooldown_s
        return seg

    return measure


def make_find(out: Path, cfg: SimConfig, start_rps: float) -> Results:
    opts = FindOptions(
        budget_s=1e9, cooldown_s=0, min_requests=400, min_hold_s=3.0, max_hold_s=4.0, ramp_s=1.0, peak_rps=1000.0
    )
    config = {"mode": "open_loop", "rules": {}, "find": opts.describe(start_rps, {}), "load": {"procs": 1}}
    target = {
        "url": "http://sim.invalid:8080",
        "model": "sim",
        "protocol": "rest",
        "headers": [f"Authorization: {SECRET}", "X-Team: ml"],
    }
    results = Results(new_header(RunConfig.from_header({"kind": "find", "config": config}), target, T0))
    results.header["server"] = {"kind": "offline twin", "slots": cfg.slots, "service_ms": cfg.service_ms}
    measure = offline_measure(cfg)
    run = SearchRun(results, out, measure, opts)
    history = run_search(run, VerdictRules(), start_rps)  # cooldown_s=0: no waiting
    assert history
    sat = build_summary(results)["saturation_rps"]
    assert sat is not None
    run_profile(run, sat)
    return results


SPEEDSCOPE = {
    "shared": {
        "frames": [
            {"name": "handle", "file": "mlserver/rest/app.py", "line": 10},
            {"name": "predict", "file": "sklearn/base.py", "line": 20},
        ]
    },
    "profiles": [{"type": "sampled", "name": "Process 1", "samples": [[0, 1], [0], [0, 1]], "weights": [1, 1, 1]}],
}


def add_server_side(out: Path, results: Results, cpu_s_per_request: float = 0.004) -> None:
    """What the observer would have written for a server on one core that spends ``cpu_s_per_request``
    per answer (samples every 0.5 s through every segment, MLServer scrapes at the segments' ends and
    every 2 s), and a flame graph of the last segment's stage."""
    samples, scrapes = [samples_header()], []
    cpu = counted = 0.0
    url = "http://127.0.0.1:8082/metrics"
    for seg in results.segments:
        rec = seg.records
        ok_done = np.sort(rec.done[rec.ok_mask()])
        base = seg.started_unix + 0.2  # the run clock's origin (no t0_monotonic: the wall clock maps it)
        end = float(np.nanmax(rec.done)) + 0.5 if len(rec) else 1.0
        prev = 0.0
        for t in np.arange(-0.25, end, 0.5):
            done = float(np.searchsorted(ok_done, t, side="right"))
            cpu += (done - prev) * cpu_s_per_request
            row = {"mono_s": base + t, "unix_s": base + t, "cpu_user_s": cpu * 0.8, "cpu_system_s": cpu * 0.2}
            row |= {"rss_bytes": 300 * 2**20, "threads": 20, "ctx_voluntary": 10 * t + 1000 * seg.index}
            row |= {"ctx_involuntary": t + 100 * seg.index, "procs": 2, "cpus_busy_s": cpu}
            samples.append(format_sample_row(row))
            prev = done
        marks = [(-0.3, f"start {seg.index}"), *((float(t), "tick") for t in range(2, int(end), 2))]
        for t, tag in [*marks, (end, f"end {seg.index}")]:
            n = counted + float(np.searchsorted(ok_done, t, side="right"))
            metrics = [
                ("model_infer_request_success_total", {"model": "sim", "version": ""}, n),
                ("model_infer_request_duration_count", {"model": "sim", "version": ""}, n),
                ("model_infer_request_duration_sum", {"model": "sim", "version": ""}, n * 0.003),
                ("rest_server_request_duration_seconds_count", {"path": "/v2/models/sim/infer"}, n),
                ("rest_server_request_duration_seconds_sum", {"path": "/v2/models/sim/infer"}, n * 0.005),
            ]
            scrapes.append(json.dumps(Scrape(base + t, base + t, url, tag, tuple(metrics)).to_json()))
        counted += len(ok_done)
    (out / SAMPLES_FILE).write_text("".join(samples))
    (out / SCRAPES_FILE).write_text("\n".join(scrapes) + "\n")
    (out / "profile.speedscope.json").write_text(json.dumps(SPEEDSCOPE))
    results.header["target"]["model"] = "sim"
    results.header["observe"] = {
        "server_pids": [4321],
        "metrics_urls": [url],
        "affinity": [0],
        "allowed_cores": 1.0,
        "gpus": [],
        "not_seen": ["GPU (utilisation, memory): no GPU/NVML (test)"],
        "problems": [],
    }
    last = results.segments[-1]
    results.header["flamegraph"] = {
        "segment": last.index,
        "stage": len(last.stages) - 1,
        "target_rps": last.stages[-1].target_rps,
        "pid": 4321,
        "command": "py-spy record --pid 4321 --subprocesses --format speedscope",
        "seconds": 4.0,
        "samples": 3,
        "speedscope": "profile.speedscope.json",
        "top": [{"function": "predict", "file": "sklearn/base.py", "line": 20, "own_fraction": 0.6667}],
        "error": None,
    }
    write_header(out, results)


def make_run(out: Path, cfg: SimConfig, stages: list[Stage], timeouts: int = 0) -> Results:
    config = {"mode": "open_loop", "rules": {"max_error_rate": 0.01}, "load": {"procs": 1, "max_inflight": 64}}
    target = {"url": "http://sim.invalid:8080", "model": "<b>sim</b>", "protocol": "rest"}
    results = Results(new_header(RunConfig.from_header({"kind": "run", "config": config}), target, T0))
    rec = simulate(due_times(stages, "constant"), cfg)
    if timeouts:  # the last requests time out: a second error class
        idx = np.arange(len(rec) - timeouts, len(rec))
        rec.outcome[idx] = Outcome.TIMEOUT
        rec.status[idx] = 0
        rec.done[idx] = rec.intended[idx] + 0.5
    append_segment(out, results, Segment(0, "run", stages, "constant", 0, T0, rec))
    return results


@pytest.fixture(scope="module")
def find_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reports") / "find-before"
    make_find(out, SimConfig(slots=4, service_ms=10.0, dist="exp", seed=3), 100.0)
    return out


@pytest.fixture(scope="module")
def find_after_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reports") / "find-after"
    make_find(out, SimConfig(slots=8, service_ms=10.0, dist="exp", seed=4), 200.0)
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reports") / "run-errors"
    stages = [Stage(50, 1, 4), Stage(150, 1, 4)]
    make_run(out, SimConfig(slots=2, service_ms=10.0, dist="exp", seed=1, error_rate=0.05), stages, timeouts=20)
    return out


def _plot_ids() -> list[str]:
    return [p.div_id for p in PLOTS]


def _shown(*dirs: Path) -> int:
    """How many plots a report of these folders draws (the server's only where it was watched)."""
    return len(plots_for(load_folders(list(dirs))))


def _assert_offline(page: str, plots: int) -> None:
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I), "no external scripts"
    assert not re.search(r"<link[^>]*\bhref\s*=\s*[\"']?https?://", page, re.I), "no external stylesheets/fonts"
    assert not re.search(r"@import|url\(\s*['\"]?https?://", page.split("<script", 1)[0]), "no external CSS"
    assert page.count('<script type="text/javascript">') == 1
    assert page.count("Plotly.newPlot(") == plots


def test_find_report_has_every_plot_and_table(find_dir: Path) -> None:
    out = write_report([find_dir], find_dir / "report.html")
    assert out == find_dir / "report.html" and out.exists()
    page = out.read_text()
    _assert_offline(page, _shown(find_dir))
    for p in plots_for(load_folders([find_dir])):
        assert f'id="{p.div_id}"' in page
        assert p.title in page
    assert 'id="plot-server"' not in page  # nothing was seen of the server: no empty server plots
    for title in (
        "Achieved throughput vs offered rate",
        "Latency percentiles vs offered rate",
        "Latency and throughput over time",
        "Latency percentile spectrum",
        "Send lag over time",
        "Errors per second by class",
    ):
        assert title in page
    summary = build_summary(load_results(find_dir))
    assert f"{summary['saturation_rps']:,.1f} rps" in page  # the headline
    assert f"{summary['recommendation']['target_rps_per_replica']:,.1f} rps" in page
    assert "replicas for peak" in page and "Latency at fractions of the saturation point" in page
    assert "no errors recorded" in page  # an empty errors plot is still drawn
    assert "saturation " in page  # the saturation line's label
    assert SECRET not in page and "Authorization: Bearer ***" in page and "X-Team: ml" in page
    assert "offline twin" in page  # header["server"]
    assert len(page) < 6_500_000  # plotly.js (~4.8 MB) plus aggregates


def test_run_report_shows_errors_escapes_text_and_warns(run_dir: Path, tmp_path: Path) -> None:
    results = load_results(run_dir)
    results.segments[0].notes.append("<script>alert(1)</script> a note")
    from satpoint.metrics.results import write_header

    write_header(run_dir, results)
    page = write_report([run_dir], tmp_path / "sub" / "r.html").read_text()
    _assert_offline(page, _shown(run_dir))
    assert "<b>sim</b>" not in page and "&lt;b&gt;sim&lt;/b&gt;" in page
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; a note" in page
    assert 'class="warnings"' in page
    assert "http_500" in page and "timeout" in page
    assert "no errors recorded" not in page
    assert "Latency at fractions" not in page  # only for find


def test_overlay_of_two_folders_labels_both(
    find_dir: Path, find_after_dir: Path, run_dir: Path, tmp_path: Path
) -> None:
    out = write_report([find_dir, find_after_dir, run_dir], tmp_path / "compare.html")
    page = out.read_text()
    _assert_offline(page, _shown(find_dir, find_after_dir, run_dir))
    for label in ("find-before", "find-after"):  # a trace group per folder and phase
        assert f'"name":"{label} · staircase"' in page and f'"name":"{label} · profile"' in page
        assert f'"{label} · p99 · staircase"' in page
        assert f"{label}</th>" in page  # a column of the headline table
    assert '"name":"run-errors"' in page and '"run-errors · latency p99"' in page  # one phase: one trace
    assert "#1f77b4" in page and "#ff7f0e" in page and "#17becf" in page  # distinct colours


def test_segments_of_a_find_are_laid_end_to_end(find_dir: Path) -> None:
    results = load_results(find_dir)
    offsets = timeline_offsets(results.segments)
    assert offsets[0] == 0.0
    ends = [offsets[s.index] + s.spans[-1].end_s for s in results.segments]
    for seg, prev_end in zip(results.segments[1:], ends, strict=False):
        assert offsets[seg.index] >= prev_end
        assert offsets[seg.index] == pytest.approx(seg.started_unix - T0)
    # equal start times (no wall clock recorded) still never overlap
    for s in results.segments:
        s.started_unix = 0.0
    offsets = timeline_offsets(results.segments)
    assert all(
        offsets[b.index] >= offsets[a.index] + a.spans[-1].end_s
        for a, b in zip(results.segments, results.segments[1:], strict=False)
    )


def test_long_runs_are_downsampled(run_dir: Path) -> None:
    results = load_results(run_dir)
    offsets = timeline_offsets(results.segments)
    fine = build_series(results.segments, offsets)
    coarse = build_series(results.segments, offsets, max_points=4)
    assert fine.width_s == 1.0 and coarse.width_s > 1.0
    assert len(coarse.t) <= 4 < len(fine.t)
    # rates are per second either way: the mean offered rate is the same
    assert np.mean([v for v in coarse.offered if v is not None]) == pytest.approx(
        np.mean([v for v in fine.offered if v is not None]), rel=0.35
    )
    total_err = sum(sum(c) for c in fine.errors.values())
    assert total_err * fine.width_s == pytest.approx(
        sum(sum(c) for c in coarse.errors.values()) * coarse.width_s, rel=0.01
    )


def test_spectrum_matches_the_summary_percentiles(find_dir: Path) -> None:
    results = load_results(find_dir)
    summary = build_summary(results)
    st = summary["stages"][0]
    seg = results.segments[st["segment"]]
    lat = window_latencies_s(seg.records, st["window_start_s"], st["window_end_s"])
    assert len(lat) == st["requests"] - sum(st["errors"].values())
    x, y = spectrum_points(lat)
    assert x[0] == 1.0 and x[-1] == pytest.approx(len(lat), rel=1e-4)
    assert y[-1] == pytest.approx(st["latency_ms"]["max"], rel=1e-3)
    assert y == sorted(y)
    assert spectrum_points(np.array([])) == ([], [])


def test_labels_tell_equal_folder_names_apart(tmp_path: Path) -> None:
    assert folder_labels([tmp_path / "a" / "run", tmp_path / "b" / "run"]) == ["a/run", "b/run"]
    assert folder_labels([tmp_path / "x", tmp_path / "y"]) == ["x", "y"]


def test_report_rejects_no_folders_and_missing_results(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_report([], tmp_path / "r.html")
    with pytest.raises(FileNotFoundError):
        write_report([tmp_path / "nothing"], tmp_path / "r.html")


def test_summary_json_fields_used_by_the_report_exist(find_dir: Path) -> None:
    summary = json.loads(json.dumps(build_summary(load_results(find_dir)), default=str))
    for key in ("saturation_rps", "max_throughput_rps", "latency_at", "recommendation", "search", "warnings"):
        assert key in summary


def test_element_ids_are_unique(find_dir: Path, run_dir: Path, tmp_path: Path) -> None:
    page = write_report([find_dir, run_dir], tmp_path / "r.html").read_text()
    body = page.split("</head>", 1)[1]
    ids = re.findall(r'\bid="([^"]+)"', body)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_folders_without_complete_stages_still_render(tmp_path: Path) -> None:
    from satpoint.metrics.records import Records
    from satpoint.metrics.results import write_header

    empty = tmp_path / "empty"
    write_header(empty, Results(new_header(RunConfig(kind="find"), {"url": "x"}, 0.0)))
    unsent = tmp_path / "unsent"  # nothing ever left: every row NOT_SENT, no latency at all
    results = Results(new_header(RunConfig(), {"url": "x"}, 0.0))
    stages = [Stage(100, 0, 3)]
    append_segment(unsent, results, Segment(0, "run", stages, "constant", 0, 0.0, Records.empty(due_times(stages))))
    page = write_report([empty, unsent], tmp_path / "r.html").read_text()
    _assert_offline(page, _shown(empty, unsent))
    assert "no stage was recorded" in page


@pytest.fixture(scope="module")
def observed_find_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reports") / "find-observed"
    results = make_find(out, SimConfig(slots=4, service_ms=10.0, dist="exp", seed=3), 100.0)
    add_server_side(out, results)
    return out


def test_each_phase_of_a_find_is_its_own_series(find_dir: Path) -> None:
    (f,) = load_folders([find_dir])
    phases = phase_series(f)
    names = [ph.name for ph in phases]
    assert names[0] == "staircase" and "profile" in names and len(set(names)) == len(names)
    purpose = {s.index: s.purpose for s in f.results.segments}
    for ph in phases:
        assert {purpose[int(s["segment"])] for _, s in ph.stages} == {ph.name}
        rates = [s["offered_rps"] for _, s in ph.stages]
        assert rates == sorted(rates)
    assert sum(len(ph.stages) for ph in phases) == len(f.summary["stages"])
    fig = throughput_vs_offered([f])
    modes = {t.name: t.mode for t in fig.data if t.name in names}
    assert modes["staircase"] == "lines+markers" and modes["profile"] == "lines+markers"
    assert all(modes[n] == "markers" for n in ("refine", "confirm") if n in modes)  # never zig-zag lines


def test_the_server_side_is_plotted_and_the_flame_graph_linked(observed_find_dir: Path, tmp_path: Path) -> None:
    from satpoint.reports.files.results import write_all

    summary = write_all(observed_find_dir, load_results(observed_find_dir), html=False)
    assert (observed_find_dir / "flamegraph.svg").exists() and summary["flamegraph"]["svg"] == "flamegraph.svg"
    page = write_report([observed_find_dir], observed_find_dir / "report.html").read_text()
    _assert_offline(page, len(PLOTS))  # every plot, the server's too
    assert 'id="plot-server"' in page and 'id="plot-server-vs-client"' in page
    assert "Server CPU and memory over time" in page and "server: requests counted" in page
    assert "server: REST" in page and "server: inference mean" in page
    assert 'class="flamegraph-link" href="flamegraph.svg"' in page and "predict" in page
    assert "Inside the server" in page and "no GPU/NVML (test)" in page
    # a report written elsewhere links the flame graph relative to itself
    other = write_report([observed_find_dir], tmp_path / "elsewhere" / "r.html").read_text()
    assert 'class="flamegraph-link" href="../../' in other
    (f,) = load_folders([observed_find_dir])
    assert f.server is not None and f.server.allowed_cores == 1.0
    cores = [c for c in f.server.cores if c is not None]
    assert cores and 0 < max(cores) <= 0.004 * 450  # 4 ms per answer, at most ~400 answers/s
    assert None in f.server.t  # a gap between segments
