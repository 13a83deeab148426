"""Seldon Core 2 / HPA manifests: maxReplicas is sized by the peak, and says why when there is none."""

from __future__ import annotations

from pathlib import Path

from satpoint.analysis.search.capacity import recommend
from satpoint.reports.files.k8s import max_replicas_choice, write_k8s


def test_without_a_peak_the_hpa_says_what_max_replicas_it_chose_and_why(tmp_path: Path) -> None:
    rec = recommend(400.0, 0.15)  # no --peak-rps
    chosen, why = max_replicas_choice(rec)
    assert chosen == 1
    assert "no --peak-rps" in why and "cannot scale out" in why and "ceil(P / 340 rps per replica)" in why
    _, hpa = write_k8s(tmp_path, "iris", rec)
    text = hpa.read_text()
    assert f"# satpoint: {why}\n" in text and "maxReplicas: 1\n" in text


def test_with_a_peak_max_replicas_is_the_peak_over_the_target(tmp_path: Path) -> None:
    rec = recommend(400.0, 0.15, peak_rps=1500.0, min_rps=400.0)
    chosen, why = max_replicas_choice(rec)
    assert chosen == 5 and why == "maxReplicas 5 = ceil(peak 1500 rps / 340 rps per replica)"
    text = write_k8s(tmp_path, "iris", rec)[1].read_text()
    assert "maxReplicas: 5\n" in text and "minReplicas: 2\n" in text
    assert text.startswith("# satpoint: maxReplicas 5")
