"""summary.json's ``overcommit`` block and warning: a ``--resident K`` run says that its figures include the
emulated loads, with the counters the transport recorded per segment (read back from the folder)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from satpoint.analysis.summary.build import build_summary
from satpoint.config import RunConfig
from satpoint.engine.schedule import due_times
from satpoint.metrics.results import Results, Segment, append_segment, load_results, new_header
from satpoint.payloads.mix import HEADER_KEY, ResolvedMix
from satpoint.plan import Stage
from satpoint.reports.terminal.console import print_summary
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate

T0 = 1_700_000_000.0
NAMES = ("a", "b", "c", "d")


def _run(out: Path, resident: int | None) -> Results:
    config = {"mode": "open_loop", "rules": {"max_error_rate": 0.01}, "load": {"procs": 1, "max_inflight": 64}}
    mix = {"models": [], "from_server": True, "weights": "uniform"} | ({"resident": resident} if resident else {})
    target = {"url": "http://sim.invalid:8080", "model": "a", "protocol": "rest", "mix": mix}
    results = Results(new_header(RunConfig.from_header({"kind": "run", "config": config}), target, T0))
    results.header[HEADER_KEY] = ResolvedMix(NAMES, (0.25,) * 4, "uniform", 8).describe()
    for i, (loads, cold, load_s) in enumerate([(10, 30, [0.015, 0.017]), (4, 50, [0.020])]):
        stages = [Stage(100, 0.2, 1)]
        rec = simulate(due_times(stages, "constant"), SimConfig(slots=4, service_ms=2.0, seed=i))
        oc = {"resident_max": resident, "models": 4, "loads": loads, "evictions": loads, "cold_requests": cold,
              "load_failures": 0, "load_s": load_s, "errors": [], "resident_at_end": ["a"]}  # fmt: skip
        generator = {"procs": 1, "transport": {"overcommit": oc} if resident else {}}
        append_segment(out, results, Segment(i, "run", stages, "constant", 0, T0, rec, generator))
    return results


def test_the_summary_adds_up_the_emulated_loads_and_says_so(tmp_path: Path) -> None:
    results = _run(tmp_path / "oc", resident=2)
    summary = build_summary(load_results(tmp_path / "oc"))
    oc = summary["overcommit"]
    n0, n1 = (len(s.records) for s in results.segments)
    assert oc["emulated"] is True and oc["resident_max"] == 2 and oc["models"] == 4
    assert (oc["loads"], oc["evictions"], oc["cold_requests"], oc["requests"]) == (14, 14, 80, n0 + n1)
    assert oc["cold_share"] == round(80 / (n0 + n1), 4)
    assert [s["cold_share"] for s in oc["segments"]] == [round(30 / n0, 4), round(50 / n1, 4)]
    assert oc["load_ms"] == {"p50": 17.0, "p99": 19.94, "max": 20.0, "n": 3}
    assert summary["warnings"][0].startswith("OVERCOMMIT EMULATED: at most 2 of the 4 models resident")
    assert f"80 of {n0 + n1} requests waited for a load" in summary["warnings"][0]
    console = Console(record=True, width=400)
    print_summary(console, summary, str(tmp_path / "oc"))
    assert "OVERCOMMIT EMULATED" in console.export_text()


def test_a_run_that_loaded_nothing_says_so(tmp_path: Path) -> None:
    results = _run(tmp_path / "none", resident=4)
    for seg in results.segments:
        seg.generator["transport"]["overcommit"].update(loads=0, evictions=0, cold_requests=0, load_s=[])
    summary = build_summary(results)
    assert summary["overcommit"]["load_ms"] is None and summary["overcommit"]["cold_share"] == 0.0
    assert "no model was loaded or evicted in this run" in summary["warnings"][0]


def test_a_mix_without_resident_has_no_overcommit_block(tmp_path: Path) -> None:
    _run(tmp_path / "plain", resident=None)
    summary = build_summary(load_results(tmp_path / "plain"))
    assert "overcommit" not in summary and not any("OVERCOMMIT" in w for w in summary["warnings"])
