"""Many models on one server, from a sweep over the model count: the memory fit (MB per model and the
intercept), the recommended count within the SLO and the memory budget, the workers' share of the
memory, and the figures a measurement gives (a pure function of its summary.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from satpoint.analysis.models.memory import memory_fit, models_analysis, models_lines, models_within
from satpoint.analysis.sweep.conclusions import PointInput, aggregate, measurement_figures
from satpoint.experiments.sweep_config import SweepConfig
from satpoint.experiments.sweep_servers import BaseServer


def test_memory_fit_is_the_least_squares_line() -> None:
    fit = memory_fit([(1, 100.5), (20, 110.0), (100, 150.0)])  # 0.5 MB per model over 100 MB, exactly
    assert fit is not None
    assert fit["mb_per_model"] == 0.5 and fit["intercept_mb"] == 100.0
    assert fit["r2"] == 1.0 and fit["stderr_mb_per_model"] == 0.0 and fit["counts"] == [1, 20, 100]
    noisy = memory_fit([(1, 100.0), (1, 102.0), (50, 126.0)])  # repeats at a count: the line through their mean
    assert noisy is not None and noisy["mb_per_model"] == pytest.approx(25 / 49, abs=1e-4)
    assert noisy["intercept_mb"] == pytest.approx(101 - 25 / 49, abs=0.01) and noisy["n"] == 3
    assert memory_fit([(10, 1.0), (10, 2.0), (None, 3.0)]) is None  # one count: no slope
    assert models_within(fit, 200.0) == 200  # (200 - 100) / 0.5
    assert models_within(fit, None) is None
    assert models_within({"mb_per_model": -0.01, "intercept_mb": 100.0}, 200.0) is None  # memory does not grow


def _fig(models: int, sat: float | None, p99: float, rss: float, main: float, load_rss: float) -> dict[str, Any]:
    return {
        "saturation_rps": sat,
        "unstable_rps": None if sat is None else sat * 1.05,
        "max_throughput_rps": None,
        "low_load": None,
        "at_operating_point": {"rps": None if sat is None else sat * 0.85, "p50_ms": p99 / 2, "p99_ms": p99},
        "at_rps": None,
        "models": models,
        "rss_mb_at_ready": rss,
        "main_rss_mb_at_ready": main,
        "rss_mb_max": load_rss,
        "startup_s": 3.0 + models / 50,
    }


def _rows() -> list[dict[str, Any]]:
    rows = []
    # workers=1: 0.2 MB per model in the worker; workers=2: 0.2 MB in each of two workers
    for i, (w, n, sat, p99) in enumerate(
        [(1, 1, 600, 5), (1, 20, 590, 6), (1, 100, 560, 9), (2, 1, 900, 5), (2, 20, 880, 6), (2, 100, None, 0)]
    ):
        main = 200.0
        workers = w * (190.0 + 0.2 * n)
        ms = [_fig(n, sat, p99, main + workers, main, main + workers + 10)]
        rows.append(
            aggregate(PointInput(f"p{i + 1:02d}", f"models={n} workers={w}", {"models": n, "workers": w}, 1, 1, ms))
        )
    return rows


def test_memory_per_model_per_group_and_where_it_lives() -> None:
    doc = models_analysis(_rows(), slo=["p99<50ms"], budget_mb=620.0)
    assert doc is not None and [g["group"] for g in doc["groups"]] == ["workers=1", "workers=2"]
    one, two = doc["groups"]
    assert [c["models"] for c in one["counts"]] == [1, 20, 100]
    assert one["fit_at_ready"]["mb_per_model"] == pytest.approx(0.2)
    assert two["fit_at_ready"]["mb_per_model"] == pytest.approx(0.4)  # each worker holds every model
    assert two["fit_main_at_ready"]["mb_per_model"] == pytest.approx(0.0, abs=1e-9)
    assert two["fit_others_at_ready"]["mb_per_model"] == pytest.approx(0.4)
    assert one["fit_under_load"]["intercept_mb"] == pytest.approx(400.0)


def test_the_largest_count_within_the_slo_and_the_budget() -> None:
    doc = models_analysis(_rows(), slo=["p99<50ms"], budget_mb=620.0)
    assert doc is not None
    one, two = (g["recommendation"] for g in doc["groups"])
    # workers=1: every count met the SLO; 100 models need 420 MB under load, within 620 MB
    assert one["models"] == 100 and one["memory_mb"] == pytest.approx(420.0)
    assert one["memory_allows"] == 1100  # (620 - 400) / 0.2, from the fit
    # workers=2: 100 models found no rate meeting the SLO; 20 models are within the budget (598 MB)
    assert two["models"] == 20 and two["missed_slo"] == [100]
    tight = models_analysis(_rows(), budget_mb=405.0)
    assert tight is not None and tight["groups"][0]["recommendation"]["models"] == 20
    assert tight["groups"][0]["recommendation"]["over_budget"] == [100]
    assert tight["groups"][0]["recommendation"]["judged_on"] == "stable"
    unmeasured = aggregate(PointInput("p06", "models=100 workers=2", {"models": 100, "workers": 2}, 1, 1, []))
    pending = [*_rows()[:5], unmeasured]
    later = models_analysis(pending, slo=["p99<50ms"], budget_mb=620.0)
    assert later is not None and later["groups"][1]["recommendation"]["missed_slo"] == []  # not measured yet
    assert later["groups"][1]["recommendation"]["largest_measured"] == 20
    text = "\n".join(models_lines(doc))
    assert "the largest count measured that met the SLO within 620 MB: 100" in text
    assert "memory alone would allow about 1100 models" in text
    assert "205 KB ± 0 KB per model over 390 MB (counts 1, 20, 100)" in text  # 0.2 MB, shown in KB


def test_no_models_knob_no_analysis() -> None:
    assert models_analysis([aggregate(PointInput("p01", "workers=1", {"workers": 1}, 1, 1, []))]) is None
    assert models_lines(None) == []


def test_a_measurement_reads_the_models_and_their_memory_from_the_header() -> None:
    server = {
        "startup_s": 6.4,
        "models": {"count": 100, "names": ["iris-000"]},
        "memory_at_ready": {
            "rss_mb": 590.0,
            "pss_mb": 450.0,
            "uss_mb": 400.0,
            "processes": [{"role": "main", "rss_mb": 200.0}, {"role": "child", "rss_mb": 190.0}],
        },
    }
    f = measurement_figures({"stages": [], "server": server})
    assert (f["models"], f["startup_s"], f["rss_mb_at_ready"], f["pss_mb_at_ready"]) == (100, 6.4, 590.0, 450.0)
    assert f["main_rss_mb_at_ready"] == 200.0 and f["child_rss_mb_at_ready"] == [190.0]
    assert measurement_figures({"stages": []})["models"] is None  # a server that said nothing of its models


def test_the_models_knob_and_the_budget_are_checked(tmp_path: Path) -> None:
    cfg = SweepConfig(sets=("models=1,20",), server_memory_mb=512.0).validate()
    assert [p.values for p in cfg.points()] == [{"models": 1}, {"models": 20}]
    assert SweepConfig.from_dict(cfg.to_dict()).server_memory_mb == 512.0
    with pytest.raises(ValueError, match="server-memory-mb"):
        SweepConfig(sets=("models=1,20",), server_memory_mb=0).validate()
    with pytest.raises(ValueError, match=">= 1"):
        SweepConfig(sets=("models=0,20",)).validate()
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model-settings.json").write_text('{"implementation": "x.Y"}')
    with pytest.raises(ValueError, match="excludes a model folder"):
        SweepConfig(sets=("models=1,20",), server=BaseServer(model_dir=str(folder))).validate()
    with pytest.raises(ValueError, match="unknown knob 'models'"):
        SweepConfig(sets=("models=1,20",), server=BaseServer(kind="sim")).validate()


def test_the_report_has_a_row_per_count_and_the_memory_plot() -> None:
    from satpoint.reports.sweep_models import memory_plot, models_rows

    doc = {"models_memory": models_analysis(_rows(), budget_mb=620.0)}
    rows = models_rows(doc)
    assert [r[:2] for r in rows] == [[g, n] for g in ("workers=1", "workers=2") for n in ("1", "20", "100")]
    assert rows[0][4] == "390.2" and rows[5][2] == "-"  # RSS once ready; 100 models with 2 workers: no rate
    names = [t.name for t in memory_plot(doc).data]
    assert "workers=2: fit once ready, 410 KB per model" in names


def test_the_budget_line_takes_the_slope_once_ready_through_the_memory_under_load() -> None:
    from satpoint.analysis.models.memory import load_line

    table = [{"models": 1, "rss_mb_max": 420.0}, {"models": 100, "rss_mb_max": 400.0}]  # noisy under load
    at_ready = {"mb_per_model": 0.02, "intercept_mb": 399.0}
    line = load_line(table, at_ready, memory_fit([(1, 420.0), (100, 400.0)]))
    assert line is not None and line["mb_per_model"] == 0.02  # not the falling slope under load
    assert line["intercept_mb"] == pytest.approx((420.0 - 0.02 + 400.0 - 2.0) / 2)
    assert load_line(table, None, None) is None
