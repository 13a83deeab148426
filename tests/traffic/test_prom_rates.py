"""Arrivals from a Prometheus rate series: the intervals read, the Poisson draw seeded and chunk-free."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from satpoint.traffic.prom_rates import (
    PromRatesError,
    RateSeries,
    arrivals_from_rates,
    iter_prom_arrivals,
    read_prom_rates,
)

T0 = 1_796_334_000.0


def matrix(*series: tuple[dict[str, str], list[tuple[float, str]]]) -> dict[str, object]:
    result = [{"metric": m, "values": [[t, v] for t, v in vals]} for m, vals in series]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def write_json(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_a_sample_stands_for_the_step_before_it_gaps_and_nan_are_zero(tmp_path: Path) -> None:
    vals = [(T0 + 60, "10"), (T0 + 120, "20"), (T0 + 180, "NaN"), (T0 + 300, "5")]  # T0+240 missing
    s = read_prom_rates(write_json(tmp_path / "r.json", matrix(({"model": "a"}, vals))))
    np.testing.assert_array_equal(s.edges_s - T0, [0, 60, 120, 240, 300])
    np.testing.assert_array_equal(s.rates_rps, [10, 20, 0, 5])
    assert s.expected_count() == 60 * 35


def test_series_are_summed_or_selected_and_errors_are_clear(tmp_path: Path) -> None:
    a = ({"model": "a"}, [(T0 + 60, "10"), (T0 + 120, "10")])
    b = ({"model": "b"}, [(T0 + 120, "1.5")])
    path = write_json(tmp_path / "r.json", matrix(a, b))
    both = read_prom_rates(path)
    np.testing.assert_array_equal(both.rates_rps, [10, 11.5])
    assert read_prom_rates(path, select={"model": "b"}).expected_count() == pytest.approx(90.0)
    with pytest.raises(PromRatesError, match="no series matches"):
        read_prom_rates(path, select={"model": "c"})
    data_only = write_json(tmp_path / "d.json", matrix(a)["data"])
    assert read_prom_rates(data_only).expected_count() == 1200
    err = {"status": "error", "errorType": "bad_data", "error": "exceeded maximum resolution"}
    with pytest.raises(PromRatesError, match="bad_data: exceeded maximum resolution"):
        read_prom_rates(write_json(tmp_path / "e.json", err))
    vector = {"status": "success", "data": {"resultType": "vector", "result": []}}
    with pytest.raises(PromRatesError, match="'vector'"):
        read_prom_rates(write_json(tmp_path / "v.json", vector))
    with pytest.raises(PromRatesError, match="not a finite rate"):
        read_prom_rates(write_json(tmp_path / "n.json", matrix(({}, [(T0, "1"), (T0 + 60, "-2")]))))


def test_csv_with_header_and_iso_times(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text(
        "timestamp,rate\n# exported by hand\n2026-12-03T21:41:00Z,4\n2026-12-03T21:42:00Z,8\n\n2026-12-03T21:43:00Z,0\n"
    )
    s = read_prom_rates(path)
    np.testing.assert_array_equal(s.edges_s - T0, [0, 60, 120, 180])
    np.testing.assert_array_equal(s.rates_rps, [4, 8, 0])
    (tmp_path / "bad.csv").write_text("1796334060,4\n1796334120,x\n")
    with pytest.raises(PromRatesError, match=r"bad\.csv:2"):
        read_prom_rates(tmp_path / "bad.csv")


def test_arrivals_are_seeded_and_the_same_whatever_the_chunk(tmp_path: Path) -> None:
    vals = [(T0 + 30 * k, str(r)) for k, r in enumerate([50, 200, 0, 0, 120, 10], start=1)]
    path = write_json(tmp_path / "r.json", matrix(({}, vals)))
    ref = np.concatenate(list(iter_prom_arrivals(path, seed=11)))
    for chunk in (1, 97, 4096):
        parts = list(iter_prom_arrivals(path, seed=11, chunk=chunk))
        assert all(len(p) == chunk for p in parts[:-1]) and 0 < len(parts[-1]) <= chunk
        np.testing.assert_array_equal(np.concatenate(parts), ref)
    other = np.concatenate(list(iter_prom_arrivals(path, seed=12)))
    assert len(other) != len(ref) or not np.array_equal(other, ref)
    assert np.all(np.diff(ref) >= 0) and ref[0] >= T0 and ref[-1] < T0 + 180
    counts = np.histogram(ref, bins=T0 + 30 * np.arange(7))[0]
    assert counts[2] == counts[3] == 0  # nothing where the rate is 0
    expect = np.array([50, 200, 0, 0, 120, 10]) * 30
    assert np.all(np.abs(counts - expect) <= 4 * np.sqrt(np.maximum(expect, 1)))


def test_the_draw_is_a_poisson_process_at_the_given_rate() -> None:
    """Counts in windows of a constant-rate stretch: mean and variance both λ·w (index of dispersion 1)."""
    series = RateSeries(np.array([0.0, 1000.0, 2000.0]), np.array([20.0, 80.0]))
    t = np.concatenate(list(arrivals_from_rates(series, seed=3, chunk=10_000)))
    counts = np.histogram(t, bins=np.arange(1000.0, 2000.5, 1.0))[0]
    assert counts.mean() == pytest.approx(80, rel=0.02)
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.12)
    gaps = np.diff(t[t < 1000])
    assert gaps.mean() == pytest.approx(1 / 20, rel=0.03)
    assert np.std(gaps) / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential gaps: CV 1
