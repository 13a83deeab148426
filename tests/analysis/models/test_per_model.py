"""Per-model figures of a model mix (summary.json ``models``), from rows the offline sim answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console

from satpoint.analysis.models.per_model import RISE_FACTOR, chi2_sf
from satpoint.analysis.summary.build import build_summary
from satpoint.config import RunConfig
from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Records
from satpoint.metrics.results import Results, Segment, append_segment, load_results, new_header
from satpoint.payloads.mix import HEADER_KEY, ResolvedMix, mix_weights
from satpoint.plan import Stage
from satpoint.reports.per_model import print_models
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate

T0 = 1_700_000_000.0
NAMES = tuple(f"m-{i}" for i in range(1, 6))
STAGES = [Stage(100, 0.5, 4), Stage(250, 0.5, 4), Stage(340, 0.5, 4)]


def mixed_run(out: Path, slow_model: int | None = None, add_s: float = 0.05) -> tuple[Results, ResolvedMix]:
    """A zipf mix over five models on the offline sim (4 slots of 10 ms: capacity 400 rps); with ``slow_model``
    that model's answers in the last stage take ``add_s`` longer (its own slowdown, the others unchanged)."""
    mix = ResolvedMix(NAMES, mix_weights("zipf:1.1", NAMES), "zipf:1.1", 8)
    config = {"mode": "open_loop", "rules": {"max_error_rate": 0.01}, "load": {"procs": 1, "max_inflight": 64}}
    target = {"url": "http://sim.invalid:8080", "model": NAMES[0], "protocol": "rest"}
    results = Results(new_header(RunConfig.from_header({"kind": "run", "config": config}), target, T0))
    results.header[HEADER_KEY] = mix.describe()
    due = due_times(STAGES, "constant")
    rec = simulate(due, SimConfig(slots=4, service_ms=10.0, dist="exp", seed=5))
    rec.model = mix.rows(len(rec), seed=0)[1]
    if slow_model is not None:
        late = (rec.model == slow_model) & (rec.intended > 9.0)
        rec.done[late] += add_s
    append_segment(out, results, Segment(0, "run", STAGES, "constant", 0, T0, rec))
    return results, mix


def test_counts_per_model_match_the_plan_and_every_stage_splits_exactly(tmp_path: Path) -> None:
    results, mix = mixed_run(tmp_path / "run")
    block = build_summary(load_results(tmp_path / "run"))["models"]  # read back: the column survived the folder
    plan = np.bincount(mix.rows(len(results.segments[0].records), 0)[1], minlength=5)
    assert block["counts"]["requests"] == plan.tolist()
    assert block["counts"]["outside_weights"] == 0
    assert block["counts"]["p_value"] > 0.001  # the draw follows the weights
    summary = build_summary(results)
    for st, doc in zip(block["stages"], summary["stages"], strict=True):
        assert sum(m["requests"] for m in st["models"]) == doc["requests"]
        assert st["verdict"] == doc["verdict"]  # the stage is judged as a whole
        hot, cold = st["models"][0], st["models"][4]
        assert hot["offered_rps"] > 3 * cold["offered_rps"]  # zipf: the first model is the busiest
    assert block["first_rise"] is None  # nothing rose: every model ~10 ms at every rate


def test_the_model_that_slowed_is_named_in_its_stage(tmp_path: Path) -> None:
    _, _ = mixed_run(tmp_path / "run", slow_model=2)
    summary = build_summary(load_results(tmp_path / "run"))
    rise = summary["models"]["first_rise"]
    assert rise is not None and rise["model"] == "m-3" and rise["target_rps"] == 340
    assert rise["models_crossed"] == ["m-3"]
    assert rise["p99_ms"] >= RISE_FACTOR * rise["baseline_p99_ms"]
    console = Console(record=True, width=160)
    print_models(console, summary)
    text = console.export_text()
    assert "latency rose first for m-3" in text and "m-5" in text


def test_a_single_model_folder_has_no_models_block_and_no_model_column(tmp_path: Path) -> None:
    results, _ = mixed_run(tmp_path / "run")
    del results.header[HEADER_KEY]
    assert "models" not in build_summary(results)
    one = Records.empty(np.arange(4, dtype=np.float64))
    assert "model" not in one.columns()
    assert Records.from_columns(one.columns()).model.tolist() == [0, 0, 0, 0]


def test_chi_square_tail() -> None:
    assert abs(chi2_sf(43.82, 19) - 0.001) < 0.0005  # the table's 0.1 % point for 19 degrees of freedom
    assert abs(chi2_sf(3.84, 1) - 0.05) < 0.01
    assert chi2_sf(0.0, 4) == 1.0
