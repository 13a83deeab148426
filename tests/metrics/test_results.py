"""The results folder: header and segments written as they end, read back identically."""

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from satpoint import SCHEMA_VERSION, __version__
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import RESULTS_FILE, Results, Segment, append_segment, load_results, write_header
from satpoint.plan import Stage

NAN = math.nan


def header(kind: str = "find") -> dict[str, Any]:
    # built by hand (JSON-native values only), so the test does not depend on how a config is described
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "kind": kind,
        "created_unix": 1_700_000_000.25,
        "host": {"hostname": "h", "cpu_count": 2, "affinity": [0, 1]},
        "config": {"mode": "open_loop", "thresholds": ["p99<100ms"], "find": {"precision": 0.05}},
        "target": {"url": "http://127.0.0.1:8080", "model": "iris", "protocol": "rest"},
    }


def rows(n: int, seed: int) -> Records:
    """``n`` rows with every outcome, NaNs where the dispatcher leaves them, and odd statuses."""
    rng = np.random.default_rng(seed)
    rec = Records.empty(np.sort(rng.uniform(0, 10, n)))
    rec.sent[:] = rec.intended + rng.exponential(0.001, n)
    rec.done[:] = rec.sent + rng.exponential(0.02, n)
    rec.outcome[:] = rng.integers(0, len(Outcome), n)
    rec.status[:] = rng.choice([0, 200, 500, 503, 14], n)
    rec.waited[:] = rng.random(n) < 0.3
    not_sent = rec.outcome == Outcome.NOT_SENT
    rec.sent[not_sent] = NAN
    rec.done[rng.random(n) < 0.05] = NAN
    return rec


def segments() -> list[Segment]:
    return [
        Segment(
            index=0,
            purpose="staircase",
            stages=[Stage(50.0, 1.0, 2.0), Stage(100.0, 1.5, 2.5)],
            arrival="poisson",
            seed=7,
            started_unix=1_700_000_001.5,
            records=rows(500, 1),
            generator={"procs": 2, "cpu_s_per_request": 8.6e-05},
            notes=["first note"],
        ),
        Segment(
            index=1,
            purpose="refine",
            stages=[Stage(80.0, 2.0, 3.0)],
            arrival="constant",
            seed=0,
            started_unix=1_700_000_020.0,
            records=rows(300, 2),
            interrupted=True,
            notes=["a", "b"],
            start_rps=75.0,
            stopped="overload",
        ),
    ]


def assert_same_rows(a: Records, b: Records) -> None:
    for name, col in a.columns().items():
        other = b.columns()[name]
        assert col.dtype == other.dtype, name
        assert np.array_equal(col, other, equal_nan=col.dtype.kind == "f"), name


def test_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "res"
    results = Results(header())
    write_header(out, results)  # before the first segment: a folder with a header and no rows
    assert json.loads((out / RESULTS_FILE).read_text())["segments"] == []
    loaded = load_results(out)
    assert loaded.header == header()
    assert loaded.segments == []
    assert loaded.kind == "find"

    segs = segments()
    for seg in segs:
        append_segment(out, results, seg)
    assert len(results.segments) == 2  # appended in memory too
    assert all(a is b for a, b in zip(results.segments, segs, strict=True))
    assert sorted(p.name for p in out.iterdir()) == [RESULTS_FILE, "segment-000.npz", "segment-001.npz"]

    loaded = load_results(out)
    assert loaded.header == header()  # the segment list is not left in the header
    assert len(loaded.segments) == 2
    for got, want in zip(loaded.segments, segs, strict=True):
        assert got.meta() == want.meta()
        assert got.stages == want.stages
        assert got.spans == want.spans
        assert (got.start_rps, got.stopped, got.interrupted) == (want.start_rps, want.stopped, want.interrupted)
        assert got.generator == want.generator
        assert got.notes == want.notes
        assert_same_rows(got.records, want.records)


def test_each_segment_is_readable_as_soon_as_it_is_appended(tmp_path: Path) -> None:
    results = Results(header("run"))
    first, second = segments()
    append_segment(tmp_path, results, first)
    loaded = load_results(tmp_path)
    assert [s.index for s in loaded.segments] == [0]
    assert loaded.kind == "run"
    assert_same_rows(loaded.segments[0].records, first.records)
    append_segment(tmp_path, results, second)
    assert [s.index for s in load_results(tmp_path).segments] == [0, 1]
    assert not list(tmp_path.glob("*.tmp"))  # the header is replaced atomically


def test_segment_meta_in_the_header(tmp_path: Path) -> None:
    results = Results(header())
    seg = segments()[1]
    append_segment(tmp_path, results, seg)
    doc = json.loads((tmp_path / RESULTS_FILE).read_text())
    meta = doc["segments"][0]
    assert meta["records_file"] == "segment-001.npz"
    assert meta["requests"] == 300
    assert meta["stages"] == [{"target_rps": 80.0, "ramp_s": 2.0, "hold_s": 3.0}]
    assert (meta["start_rps"], meta["stopped"], meta["interrupted"]) == (75.0, "overload", True)


def test_empty_segment_round_trips(tmp_path: Path) -> None:
    results = Results(header())
    seg = Segment(0, "run", [Stage(10.0, 0.0, 1.0)], "constant", 0, 0.0, Records.empty(np.empty(0)))
    append_segment(tmp_path, results, seg)
    loaded = load_results(tmp_path).segments[0]
    assert len(loaded.records) == 0
    assert_same_rows(loaded.records, seg.records)


def test_load_from_a_missing_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=rf"{re.escape(str(missing))}.*no readable {RESULTS_FILE}") as info:
        load_results(missing)
    assert "No such file" in str(info.value)


def test_load_from_a_folder_without_a_header(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=RESULTS_FILE):
        load_results(tmp_path)


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0, "1", None])
def test_load_refuses_another_schema_version(tmp_path: Path, version: object) -> None:
    doc = header()
    doc["schema_version"] = version
    doc["segments"] = []
    doc["tool_version"] = "9.8.7"
    (tmp_path / RESULTS_FILE).write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"by satpoint 9\.8\.7, schema_version {version}; this satpoint") as info:
        load_results(tmp_path)
    assert f"reads {SCHEMA_VERSION}" in str(info.value)
    # a newer shape says what to do about it, an older or malformed one does not pretend to know
    assert ("upgrade satpoint" in str(info.value)) == (version == SCHEMA_VERSION + 1)


def test_load_without_a_schema_version(tmp_path: Path) -> None:
    doc = header()
    del doc["schema_version"]
    (tmp_path / RESULTS_FILE).write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"written by satpoint {re.escape(__version__)}, schema_version None"):
        load_results(tmp_path)
