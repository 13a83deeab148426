"""Reading and slicing recorded traces for ``run --trace`` (``traffic.trace_read``, ``traffic.trace_plan``)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from satpoint.metrics.records import Outcome, Records
from satpoint.plan import Stage, spans
from satpoint.traffic.fidelity import overall, stage_fidelity
from satpoint.traffic.trace_plan import (
    TraceOptions,
    build,
    busiest,
    parse_duration,
    parse_window,
    scan,
    stages_for,
)
from satpoint.traffic.trace_read import TraceError, iter_chunks, parse_iso

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def csv_trace(path: Path, values: list[str], header: str = "timestamp", extra: str = "") -> Path:
    path.write_text(header + "\n" + "".join(v + extra + "\n" for v in values))
    return path


def times_of(path: Path, **kw: object) -> np.ndarray:
    return np.concatenate([c.times for c in iter_chunks(path, **kw)])  # type: ignore[arg-type]


# --- parsing ------------------------------------------------------------------------------------------


def test_epoch_seconds_milliseconds_and_microseconds_are_told_apart(tmp_path: Path) -> None:
    s = csv_trace(tmp_path / "s.csv", ["1767225600.5", "1767225601.25"])
    ms = csv_trace(tmp_path / "ms.csv", ["1767225600500", "1767225601250"])
    us = csv_trace(tmp_path / "us.csv", ["1767225600500000", "1767225601250000"])
    for path in (s, ms, us):
        assert np.allclose(times_of(path), [T0 + 0.5, T0 + 1.25], atol=1e-6)
    # an explicit unit overrides the guess
    assert np.allclose(times_of(tmp_path / "s.csv", unit="ms"), [1767225600.5e-3, 1767225601.25e-3])


def test_iso_8601_with_zone_offset_or_none(tmp_path: Path) -> None:
    values = ["2026-01-01T00:00:00.250Z", "2026-01-01T01:00:01+01:00", "2026-01-01 00:00:02"]
    path = csv_trace(tmp_path / "iso.csv", values)
    assert np.allclose(times_of(path), [T0 + 0.25, T0 + 1.0, T0 + 2.0])
    assert parse_iso("2026-01-01T00:00:00Z") == T0


def test_jsonl_with_a_named_time_column_and_optional_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [{"at": T0 + k, "model": "m" if k % 2 else "n", "payload": k, "batch": 1 + k % 4} for k in range(10)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    chunks = list(iter_chunks(path, "jsonl", "at", chunk=4))
    assert [len(c.times) for c in chunks] == [4, 4, 2]
    assert chunks[0].model == ["n", "m", "n", "m"]
    assert chunks[1].payload is not None and list(chunks[1].payload) == [4, 5, 6, 7]
    sc = scan(TraceOptions(path, time_column="at", chunk_rows=4))
    assert sc.columns() == {"model": {"n": 5, "m": 5}, "payload": {"min": 0, "max": 9}, "batch": {"min": 1, "max": 4}}


@pytest.mark.parametrize(
    ("fmt", "content", "match"),
    [
        ("csv", "time\n1\n", "no column 'timestamp'"),
        ("csv", "timestamp\n1767225600\nsoon\n", "row 2: timestamp 'soon' is not a number"),
        ("csv", "timestamp\n2026-01-01T00:00:00Z\nyesterday\n", "row 2: timestamp 'yesterday'"),
        ("jsonl", '{"timestamp": 1}\n{"t": 2}\n', "line 2: no 'timestamp' field"),
        ("jsonl", '{"timestamp": 1}\nnot json\n', "line 2: not JSON"),
        ("csv", "timestamp,payload\n1767225600,1\n1767225601,x\n", "payload 'x' is not a whole number"),
    ],
)
def test_bad_traces_are_refused_with_the_row(tmp_path: Path, fmt: str, content: str, match: str) -> None:
    path = tmp_path / f"bad.{fmt}"
    path.write_text(content)
    with pytest.raises(TraceError, match=match):
        times_of(path, fmt=fmt)


def test_every_format_has_its_reader(tmp_path: Path) -> None:
    line = '[2026-01-01T00:00:01.500Z] "POST /v2/models/m/infer HTTP/1.1" 200 - 154 0 226 100 "-" "-" "x" "m" "-"\n'
    (tmp_path / "envoy.log").write_text(line * 3)
    assert np.allclose(times_of(tmp_path / "envoy.log", fmt="envoy"), T0 + 1.5)
    with pytest.raises(TraceError, match="expected one of"):
        times_of(tmp_path / "envoy.log", fmt="pcap")


# --- slicing ------------------------------------------------------------------------------------------


def test_durations_and_windows(tmp_path: Path) -> None:
    assert parse_duration("10m") == 600 and parse_duration("90") == 90 and parse_duration("1.5h") == 5400
    assert parse_duration("500ms") == 0.5
    with pytest.raises(TraceError):
        parse_duration("ten minutes")
    path = csv_trace(tmp_path / "w.csv", [str(T0 + k) for k in range(0, 600)])
    sc = scan(TraceOptions(path))
    assert parse_window("2m..5m", sc) == (T0 + 120, T0 + 300)
    assert parse_window("..90", sc) == (T0, T0 + 90)
    lo, hi = parse_window("2026-01-01T00:01:00Z..", sc)
    assert lo == T0 + 60 and hi > T0 + 599
    assert parse_window(f"{T0 + 10:.0f}..{T0 + 20:.0f}", sc) == (T0 + 10, T0 + 20)
    for bad in ("5m..2m", "2m", "x..y"):
        with pytest.raises(TraceError):
            parse_window(bad, sc)


def test_window_and_speed_map_trace_times_to_due_times(tmp_path: Path) -> None:
    path = csv_trace(tmp_path / "v.csv", [f"{T0 + 0.1 * k:.3f}" for k in range(6000)])  # 10 rps for 600 s
    sched = build(TraceOptions(path, window="60..180", speed=4))
    assert len(sched.due_s) == 1200
    assert sched.due_s[0] == pytest.approx(0.0, abs=1e-6) and sched.due_s[-1] == pytest.approx(119.9 / 4, abs=1e-6)
    assert np.allclose(np.diff(sched.due_s), 0.1 / 4)
    # stages of 60 s of trace (15 s of run at speed 4), each at the rate the trace offered: 40 rps
    assert [(round(s.target_rps, 6), s.ramp_s, s.hold_s) for s in sched.stages] == [(40.0, 0.0, 15.0)] * 2
    assert sched.info["replayed"] == 1200 and sched.info["window_start_offset_s"] == 60


def test_busiest_window_is_found_and_reported(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    quiet = T0 + rng.uniform(0, 3600, size=3600)  # 1 rps for an hour
    busy = T0 + 1800 + rng.uniform(0, 300, size=3000)  # +10 rps for 5 minutes from 30:00
    values = np.concatenate([quiet, busy])
    rng.shuffle(values)  # out of order in the file: sorted for the replay
    path = csv_trace(tmp_path / "p.csv", [f"{v:.6f}" for v in values])
    sched = build(TraceOptions(path, peak="5m"))
    peak = sched.info["peak_window"]
    assert abs(peak["start_offset_s"] - 1800) <= 10
    assert peak["end_offset_s"] - peak["start_offset_s"] == pytest.approx(300)
    assert peak["arrivals"] == len(sched.due_s) > 3000
    assert sched.info["in_order"] is False and np.all(np.diff(sched.due_s) >= 0)
    # a peak no shorter than the range is the range itself
    sc = scan(TraceOptions(path))
    assert busiest(sc, 10_000, sc.first_s, sc.last_s + 1)[2] == len(values)


def test_stages_merge_empty_and_short_pieces() -> None:
    due = np.array([0.5, 1.0, 25.0, 26.0, 27.0])  # nothing in [10, 20)
    stages = stages_for(due, 31.0, 10.0)  # pieces [0,10) [10,20) [20,30) [30,31): the empty and the short join
    assert stages == [Stage(2 / 20, 0.0, 20.0), Stage(3 / 11, 0.0, 11.0)]
    assert stages_for(np.array([0.1]), 0.5, 60.0) == [Stage(2.0, 0.0, 0.5)]  # shorter than a stage: one stage


# --- streaming ----------------------------------------------------------------------------------------


def _peak_bytes(opts: TraceOptions) -> tuple[int, int]:
    tracemalloc.start()
    try:
        sched = build(opts)
        return len(sched.due_s), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_trace_streams_in_chunks_with_bounded_memory(tmp_path: Path) -> None:
    n = 40_000
    path = tmp_path / "big.csv"
    t = T0 + np.arange(n) * 0.01  # 100 rps for 400 s
    with path.open("w") as f:
        f.write("timestamp\n")
        f.write("\n".join(f"{v:.3f}" for v in t) + "\n")
    opts = TraceOptions(path, window="100..110", chunk_rows=2_000)
    rows, streamed = _peak_bytes(opts)
    assert rows == 1000
    sc = scan(opts)
    assert sc.chunks == 20 and sc.largest_chunk == 2_000 and sc.rows == n
    # read whole (one chunk), the file's rows are held at once; in chunks of 2 000, a twentieth of them
    _, whole = _peak_bytes(TraceOptions(path, window="100..110", chunk_rows=n))
    assert streamed < whole / 5
    assert streamed < 400_000  # a chunk of text and floats, the per-second counts (400 int64), the slice


def test_a_slice_too_large_for_memory_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = csv_trace(tmp_path / "r.csv", [str(T0 + k) for k in range(100)])
    asked: list[int] = []

    def refuse(rows: int) -> None:
        asked.append(rows)
        raise TraceError(f"{rows} rows do not fit")

    with pytest.raises(TraceError, match="rows do not fit"):
        build(TraceOptions(path, window="10..20"), fits=refuse)
    assert asked == [10]


# --- fidelity -----------------------------------------------------------------------------------------


def test_fidelity_measures_lag_against_the_trace_times() -> None:
    intended = np.arange(10, dtype=np.float64)  # one request a second, two stages of 5 s
    rec = Records.empty(intended)
    rec.sent[:] = intended + np.array([0, 0, 0.002, 0, 0, 0, 0.0005, 0, 0, 0])
    rec.done[:] = rec.sent + 0.01
    rec.outcome[:] = Outcome.OK
    rec.outcome[9] = Outcome.NOT_SENT
    rec.sent[9] = np.nan
    rows = stage_fidelity(rec, spans([Stage(1.0, 0.0, 5.0), Stage(1.0, 0.0, 5.0)]))
    assert [r["requests"] for r in rows] == [5, 5]
    assert rows[0]["late_fraction"] == pytest.approx(0.2)  # the 2 ms one
    assert rows[0]["lag_ms"]["max"] == pytest.approx(2.0)
    assert rows[1]["late_fraction"] == pytest.approx(0.2) and rows[1]["never_sent"] == 1  # 0.5 ms is on time
    assert overall(rows)["late_fraction"] == pytest.approx(0.2)


def test_the_payload_column_follows_its_rows_through_window_and_sorting(tmp_path: Path) -> None:
    path = tmp_path / "pay.csv"
    rows = [(T0 + 5, 5), (T0 + 1, 1), (T0 + 3, 3), (T0 + 2, 2), (T0 + 9, 9), (T0 + 0, 0)]
    path.write_text("timestamp,payload\n" + "".join(f"{t},{p}\n" for t, p in rows))
    sched = build(TraceOptions(path, window="1..6", chunk_rows=2))
    assert sched.due_s.tolist() == [0.0, 1.0, 2.0, 4.0]
    assert sched.payload_index is not None and sched.payload_index.tolist() == [1, 2, 3, 5]
    assert build(TraceOptions(csv_trace(tmp_path / "no.csv", ["1767225600"]))).payload_index is None
