"""Cold-start and overcommit summaries (pure): distributions over repetitions, the during-load stream's
outcomes, cold against warm rows, and the recommendation (added latency, smallest K meeting the SLO)."""

from __future__ import annotations

import numpy as np
import pytest

from satpoint.analysis.models.coldstart import Repetition, coldstart_summary, during_rows, overcommit_summary, recommend
from satpoint.errors import ConfigError
from satpoint.experiments.coldstart import mix_weights, parse_resident
from satpoint.metrics.records import Outcome, Records
from satpoint.reports.html.coldstart import recommendation_lines, render_html


def _reps() -> list[Repetition]:
    out = []
    for i in range(20):
        r = Repetition(model="a" if i % 2 else "b", rep=i // 2, unload_s=0.001, absent_wait_s=0.0)
        r.load_s, r.first_infer_s, r.first_status, r.warm_infer_s = 0.010 + i * 0.001, 0.004, 200, 0.002
        r.during_latency_s = [0.001, 0.012]
        r.during_outcome = [Outcome.HTTP_ERROR, Outcome.OK]
        r.during_status = [404, 200]
        out.append(r)
    return out


def test_distributions_cover_every_repetition_and_the_stream_outcomes() -> None:
    s = coldstart_summary(_reps())
    assert s["repetitions"] == 20 and s["models"] == ["b", "a"]
    assert s["load_ms"]["n"] == 20 and s["load_ms"]["max"] == pytest.approx(29.0)
    assert s["load_ms"]["p50"] == pytest.approx(19.5)
    assert s["during_load"]["outcomes"] == {"http_404": 20, "ok": 20} and s["during_load"]["error_share"] == 0.5
    assert s["during_load"]["ok_latency_ms"]["p50"] == pytest.approx(12.0)
    assert [p["repetitions"] for p in s["per_model"]] == [10, 10]
    rec = recommend(s, [], None)
    assert rec["cold_start_added_ms"]["p50"] == pytest.approx(19.5 + 4.0 - 2.0)


def test_during_rows_keep_the_load_window_only() -> None:
    rec = Records.empty(np.array([0.0, 0.5, 1.0, 2.0]))
    rec.done[:] = rec.intended + 0.1
    rec.outcome[:] = Outcome.OK
    lat, outcome, _ = during_rows(rec, 0.5, 1.0)
    assert lat == pytest.approx([0.1, 0.1]) and outcome == [Outcome.OK, Outcome.OK]


def test_overcommit_summary_splits_cold_from_warm_and_picks_the_smallest_k_within_the_slo() -> None:
    rec = Records.empty(np.arange(10, dtype=np.float64) * 0.1)
    rec.done[:] = rec.intended + 0.002
    rec.done[[1, 5]] = rec.intended[[1, 5]] + 0.5  # the two cold rows waited for a load
    rec.outcome[:] = Outcome.OK
    counters = {"loads": 2, "evictions": 2, "load_s": [0.4, 0.45]}
    s = overcommit_summary(rec, [1, 5], counters, resident=1, models=2, mix="uniform", rate_rps=10, duration_s=1,
                           model_of_row=[0, 1] * 5)  # fmt: skip
    assert s["cold_share"] == 0.2 and s["cold_latency_ms"]["p50"] == pytest.approx(500.0)
    assert s["warm_latency_ms"]["max"] == pytest.approx(2.0) and s["requests_per_model"] == [5, 5]
    other = {**s, "resident": 2, "latency_ms": {"p99": 3.0}, "error_rate": 0.0}
    assert recommend({}, [s, other], slo_p99_ms=10.0)["resident_for_slo"] == 2
    assert recommend({}, [s, other], slo_p99_ms=1.0)["resident_for_slo"] is None
    summary = {"coldstart": coldstart_summary(_reps()), "overcommit": [s], "recommendation": recommend({}, [s], 10.0)}
    assert any("no resident set" in line for line in recommendation_lines(summary))
    html = render_html(summary, {"repetitions": [r.to_dict() for r in _reps()]})
    assert "Cold starts" in html and "Overcommit" in html and "coldstart-overcommit" in html


def test_options_parse_and_refuse() -> None:
    assert parse_resident("3,1,3") == (3, 1) and parse_resident(None) == ()
    assert mix_weights("zipf:1", 2) == pytest.approx([2 / 3, 1 / 3])
    for bad in ("0", "a"):
        with pytest.raises(ConfigError):
            parse_resident(bad)
    with pytest.raises(ConfigError):
        mix_weights("pareto", 3)
