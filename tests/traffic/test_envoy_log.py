"""The Envoy access-log importer on logs written here, in Envoy's default text format and in JSON."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from satpoint.traffic.envoy_log import (
    EnvoyLogError,
    EnvoyLogStats,
    _parse_iso_fixed,
    iter_envoy_records,
    iter_envoy_times,
    model_from_path,
    parse_time,
)

T0 = datetime(2026, 12, 3, 21, 40, 0, tzinfo=UTC)


def stamp(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def text_line(dt: datetime, path: str, *, istio: bool = False, method: str = "POST") -> str:
    """Envoy's default format (Istio's adds fields in the middle and at the end)."""
    mid = ' via_upstream - "-"' if istio else ""
    tail = " outbound|9000||iris.seldon.svc 10.0.0.5:4312 10.0.0.9:9000 10.0.0.7:5123 - default" if istio else ""
    return (
        f'[{stamp(dt)}] "{method} {path} HTTP/1.1" 200 -{mid} 154 0 226 100 "10.0.35.28" "python-requests/2.31" '
        f'"cc21d9b0-1" "iris.seldon" "10.0.2.1:9000"{tail}\n'
    )


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(lines))
    return path


def epoch(dt: datetime) -> float:
    return round(dt.timestamp(), 3)


def times_of(path: Path, **kw: object) -> np.ndarray:
    return np.concatenate(list(iter_envoy_times(path, **kw)))  # type: ignore[arg-type]


def test_text_log_times_models_order_and_stats(tmp_path: Path) -> None:
    ms = timedelta(milliseconds=1)
    lines = [
        "2026-12-03T21:39:59.000000Z\tinfo\tEnvoy proxy is ready\n",  # the proxy's own log: skipped
        text_line(T0 + 120 * ms, "/v2/models/iris/infer"),
        # logged at completion: this one started 100 ms earlier and took longer
        text_line(T0 + 20 * ms, "/v2/models/iris/versions/2/infer", istio=True),
        text_line(T0 + 130 * ms, "/v2/health/ready", method="GET"),
        "\n",
        text_line(T0 + 200 * ms, "/inference.GRPCInferenceService/ModelInfer"),
        text_line(T0 + 300 * ms, "/v2/models/mnist/infer?x=1"),
        text_line(T0 + 400 * ms, "/v2/models/mnist"),
    ]
    log = write(tmp_path / "access.log", lines)
    st = EnvoyLogStats()
    chunks = list(iter_envoy_records(log, chunk=2, stats=st))
    assert [len(c.times_s) for c in chunks] == [2, 2, 2]
    times = np.concatenate([c.times_s for c in chunks])
    models = list(np.concatenate([c.models for c in chunks]))
    offsets_ms = [20, 120, 130, 200, 300, 400]
    np.testing.assert_allclose(times, [epoch(T0) + o / 1000 for o in offsets_ms], atol=1e-6)
    assert models == ["iris", "iris", None, None, "mnist", "mnist"]
    assert (st.format, st.lines, st.arrivals, st.other_lines, st.malformed) == ("text", 8, 6, 2, 0)
    assert st.out_of_order == 1 and st.max_disorder_s == pytest.approx(0.1, abs=1e-6)
    assert st.first_s == pytest.approx(epoch(T0) + 0.02) and st.last_s == pytest.approx(epoch(T0) + 0.4)

    st = EnvoyLogStats()
    only = times_of(log, inference_only=True, stats=st)
    np.testing.assert_allclose(only - epoch(T0), [0.02, 0.12, 0.2, 0.3], atol=1e-6)
    assert st.filtered == 2

    # file order, untouched, when asked
    np.testing.assert_allclose(times_of(log, reorder_s=None)[:2] - epoch(T0), [0.12, 0.02], atol=1e-6)


def test_json_logs_istio_typed_and_custom_key(tmp_path: Path) -> None:
    t = [T0 + timedelta(milliseconds=k * 7) for k in range(5)]

    def compact(obj: dict[str, object]) -> str:  # as Envoy writes it
        return json.dumps(obj, separators=(",", ":"))

    lines = [
        compact({"start_time": stamp(t[0]), "method": "POST", "path": "/v2/models/a/infer", "duration": "3"}),
        json.dumps({"method": "POST", "path": "/v2/models/b/infer", "start_time": stamp(t[1])}),  # spaced: regex
        compact({"start_time": stamp(t[2]), "path": "/v2/models/c\\d/infer"}),  # an escaped path
        compact({"start_time": None, "path": "/v2/models/a/infer"}),  # typed JSON, unset: malformed
        compact({"start_time": "-", "path": "/v2/models/a/infer"}),  # json_format, unset: malformed
        '{"start_time":"2026-12-03T21:40:00.050Z", broken',  # its time is found; no path
        compact({"start_time": stamp(t[4]), "path": "/v2/models/a/ready"}),
    ]
    log = write(tmp_path / "a.json", [x + "\n" for x in lines])
    st = EnvoyLogStats()
    recs = list(iter_envoy_records(log, stats=st))
    times = np.concatenate([r.times_s for r in recs])
    models = list(np.concatenate([r.models for r in recs]))
    np.testing.assert_allclose(times - epoch(T0), [0.0, 0.007, 0.014, 0.028, 0.05], atol=1e-6)
    assert models == ["a", "b", "c\\d", "a", None]
    assert st.format == "json" and st.malformed == 2
    assert [n for n, _ in st.malformed_examples] == [4, 5]
    assert len(times_of(log, inference_only=True)) == 3

    # a key of the user's format, epoch seconds with microseconds (%START_TIME(%s.%6f)%)
    custom = [
        json.dumps({"ts": f"{epoch(T0) + k * 0.000123:.6f}", "path": "/v2/models/a/infer"}) + "\n" for k in range(4)
    ]
    log2 = write(tmp_path / "b.log", custom)
    got = times_of(log2, fmt="json", time_key="ts")
    np.testing.assert_allclose(got - epoch(T0), np.arange(4) * 0.000123, atol=1e-6)


def test_chunking_and_gzip_change_nothing(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    start = np.cumsum(rng.exponential(0.01, 500))
    done = start + rng.exponential(0.05, 500)
    order = np.argsort(done, kind="stable")  # lines in completion order
    lines = [text_line(T0 + timedelta(seconds=float(start[i])), "/v2/models/m/infer") for i in order]
    log = write(tmp_path / "x.log", lines)
    with gzip.open(tmp_path / "x.log.gz", "wt") as f:
        f.writelines(lines)
    ref = times_of(log, chunk=65536)
    assert np.all(np.diff(ref) >= 0) and len(ref) == 500
    expect = np.sort(np.array([datetime.fromisoformat(ln[1:25]).timestamp() for ln in lines]))
    np.testing.assert_allclose(ref, expect, atol=1e-6)
    for chunk in (1, 7, 64):
        np.testing.assert_array_equal(times_of(log, chunk=chunk, reorder_s=1.0), ref)
    np.testing.assert_array_equal(times_of(tmp_path / "x.log.gz", chunk=33), ref)


def test_malformed_lines_are_counted_then_refused(tmp_path: Path) -> None:
    lines = [text_line(T0, "/v2/models/m/infer")] * 3 + ["[2026-13-03T21:40:00.000Z] x\n", "[no bracket\n"]
    log = write(tmp_path / "m.log", lines)
    st = EnvoyLogStats()
    assert len(times_of(log, stats=st)) == 3
    assert st.malformed == 2 and [n for n, _ in st.malformed_examples] == [4, 5]
    assert "not a time" in st.malformed_examples[0][1] and "']'" in st.malformed_examples[1][1]
    with pytest.raises(EnvoyLogError, match="line 4"):
        times_of(log, max_malformed=0)
    with pytest.raises(EnvoyLogError, match="no arrivals"):
        times_of(write(tmp_path / "e.log", ["[bad\n", "hello\n"]), fmt="text")


def test_a_line_beyond_the_reorder_window_is_refused_with_its_number(tmp_path: Path) -> None:
    lines = [text_line(T0 + timedelta(seconds=s), "/v2/models/m/infer") for s in (0, 10, 20, 30, 5)]
    log = write(tmp_path / "w.log", lines)
    with pytest.raises(EnvoyLogError, match=r"line 5: .* 25\.000 s before .* window of 20 s"):
        times_of(log, reorder_s=20.0)
    np.testing.assert_allclose(times_of(log, reorder_s=30.0) - epoch(T0), [0, 5, 10, 20, 30])


def test_time_parsing_vectorised_equals_the_standard_library() -> None:
    rng = np.random.default_rng(2)
    base = datetime(1999, 1, 1, tzinfo=UTC)
    dts = [base + timedelta(seconds=float(s)) for s in rng.uniform(0, 40 * 365 * 86400, 2000)]
    dts += [datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=UTC), datetime(2000, 3, 1, tzinfo=UTC)]
    for digits in (3, 6):
        stamps = [d.strftime("%Y-%m-%dT%H:%M:%S.%f")[: 20 + digits] + "Z" for d in dts]
        times, ok = _parse_iso_fixed([s.encode() for s in stamps])
        assert ok.all()
        np.testing.assert_allclose(times, [parse_time(s) for s in stamps], atol=1e-6)
    times, ok = _parse_iso_fixed([b"2025-02-29T00:00:00.000Z", b"2024-02-29T00:00:00.000Z", b"2024-02-29T00:00:00"])
    assert list(ok) == [False, True, False]  # no 29 February in 2025; the last is another width
    assert parse_time("2024-02-29T00:00:00") == parse_time("2024-02-29T01:00:00+01:00") == 1709164800.0
    assert parse_time("1709164800123") == pytest.approx(1709164800.123)  # milliseconds
    with pytest.raises(ValueError, match="not a time"):
        parse_time("2025-02-29T00:00:00Z")


def test_model_from_path() -> None:
    assert model_from_path("/v2/models/iris/infer") == ("iris", True)
    assert model_from_path("/v2/models/iris/versions/1/infer") == ("iris", True)
    assert model_from_path("/v2/models/iris/ready") == ("iris", False)
    assert model_from_path("/v2/models/iris/inferx") == ("iris", False)
    assert model_from_path("/v1/models/iris:predict") == ("iris", True)
    assert model_from_path("/inference.GRPCInferenceService/ModelInfer") == (None, True)
    assert model_from_path("/v2/health/live") == (None, False)
