"""Row checkpoints: frames appended while a segment runs, read back after a crash.

The rows are driven by hand here (the dispatcher's columns: ``sent``/``done`` raw clock values while
running), so every state a crash can catch is checked: answered, in flight, waiting for a slot, not yet
due, a frame cut short, a full disk.
"""

from __future__ import annotations

import errno
import math
from pathlib import Path

import numpy as np
import pytest

from satpoint import SCHEMA_VERSION, __version__
from satpoint.analysis.summary.build import build_summary
from satpoint.api import load
from satpoint.metrics.checkpoint import (
    RowCheckpoint,
    read_shard_file,
    recover_segment_rows,
    shard_file,
    shard_files,
)
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.results import (
    Results,
    Segment,
    abandon_segment,
    append_segment,
    load_results,
    start_segment,
)
from satpoint.plan import Stage

T0 = 1000.0  # the run clock's origin on the raw clock the live columns hold
NAN = math.nan


def live_rows(n: int, rate: float = 100.0) -> Records:
    return Records.empty(np.arange(n, dtype=np.float64) / rate)


def send(rec: Records, rows: range, lag_s: float = 0.001) -> None:
    for i in rows:
        rec.sent[i] = T0 + rec.intended[i] + lag_s


def answer(rec: Records, rows: range, outcome: Outcome = Outcome.OK, after_s: float = 0.005) -> None:
    for i in rows:
        rec.done[i] = rec.sent[i] + after_s
        rec.outcome[i] = outcome
        rec.status[i] = 200 if outcome == Outcome.OK else 0


def header() -> dict[str, object]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "kind": "run",
        "created_unix": 1_700_000_000.0,
        "config": {"mode": "open_loop", "load": {"procs": 1}},
        "target": {"url": "http://127.0.0.1:1", "model": "m", "protocol": "rest"},
    }


def test_frames_rebuild_the_rows_exactly_once_the_final_frame_is_written(tmp_path: Path) -> None:
    rec = live_rows(300)
    ck = RowCheckpoint(tmp_path / "s.rows")
    send(rec, range(100))
    answer(rec, range(90))  # 10 in flight
    ck.write(rec, 100, T0, T0 + 1.0)
    send(rec, range(100, 200))
    answer(rec, range(90, 195))  # the in-flight ones answered later: rewritten
    rec.waited[200:210] = True  # due, waiting for a slot
    ck.write(rec, 210, T0, T0 + 2.0)
    send(rec, range(200, 300))
    answer(rec, range(195, 299), Outcome.HTTP_ERROR)
    answer(rec, range(299, 300), Outcome.UNFINISHED)
    ck.write(rec, 300, T0, T0 + 3.5, final=True)
    ck.close()
    assert ck.error is None and ck.frames == 3
    assert ck.rows_written < 2 * 300  # each row at most twice here (due, then answered), never the run so far

    got = read_shard_file(tmp_path / "s.rows")
    assert got is not None and got.final and got.frames == 3
    expected = Records(
        rec.intended, rec.sent - T0, rec.done - T0, rec.outcome.copy(), rec.status.copy(), rec.waited.copy()
    )
    for name, col in expected.columns().items():
        assert np.array_equal(col, got.records.columns()[name], equal_nan=col.dtype.kind == "f"), name


def test_a_cut_off_file_censors_open_rows_and_ignores_a_torn_frame(tmp_path: Path) -> None:
    rec = live_rows(400)
    ck = RowCheckpoint(tmp_path / "s.rows")
    send(rec, range(150))
    answer(rec, range(140))  # 140 answered, 10 in flight
    rec.waited[150:160] = True  # 10 due and waiting for a slot (never sent)
    ck.write(rec, 160, T0, T0 + 1.7)
    ck.close()
    path = tmp_path / "s.rows"
    whole = path.read_bytes()
    path.write_bytes(whole + whole[:50])  # the crash tore the next frame

    got = read_shard_file(path)
    assert got is not None and not got.final and got.now_s == pytest.approx(1.7)
    r = got.records
    assert len(r) == 160  # what was due at the last frame; nothing later
    assert (r.outcome[:140] == Outcome.OK).all()
    assert (r.outcome[140:150] == Outcome.UNFINISHED).all() and not np.isnan(r.sent[140:150]).any()
    assert (r.outcome[150:160] == Outcome.NOT_SENT).all() and r.waited[150:160].all()
    # open rows count in latency as censored at the last frame: a lower bound, like an interruption
    assert np.allclose(r.done[140:], 1.7)
    assert r.censored_mask()[140:].all()


def test_a_row_sent_after_waiting_is_rewritten_with_its_send_time(tmp_path: Path) -> None:
    rec = live_rows(20)
    ck = RowCheckpoint(tmp_path / "s.rows")
    rec.waited[:5] = True
    ck.write(rec, 5, T0, T0 + 0.5)  # due, none sent yet
    send(rec, range(5), lag_s=0.3)
    ck.write(rec, 5, T0, T0 + 1.0)  # sent meanwhile, still in flight
    ck.close()
    got = read_shard_file(tmp_path / "s.rows")
    assert got is not None
    assert (got.records.outcome == Outcome.UNFINISHED).all()
    assert np.allclose(got.records.sent, got.records.intended + 0.3)


class FullDisk:
    """The checkpoint's file on a disk that fills up and frees again: while ``full``, a write puts half its
    bytes on the disk (a torn frame) and then fails with ENOSPC, as a real unbuffered write does."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.full = True
        self.attempts = 0

    def write(self, data: memoryview) -> int:
        self.attempts += 1
        if not self.full:
            return self.real.write(data)  # type: ignore[attr-defined,no-any-return]
        self.real.write(data[: len(data) // 2])  # type: ignore[attr-defined]  # a torn frame...
        raise OSError(errno.ENOSPC, "No space left on device")  # ...then the error

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


def written(ck: RowCheckpoint) -> None:
    """Wait until the frames handed to the background writer so far have been dealt with."""
    ck._pool.submit(lambda: None).result()


def test_a_full_disk_keeps_the_frames_and_writes_them_when_it_has_room_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [0.0]
    rec = live_rows(100)
    ck = RowCheckpoint(tmp_path / "s.rows", retry_s=3.0, clock=lambda: now[0])
    send(rec, range(50))
    answer(rec, range(50))
    ck.write(rec, 50, T0, T0 + 1.0)
    written(ck)  # the first frame is on disk
    disk = FullDisk(ck._file)
    monkeypatch.setattr(ck, "_file", disk)
    send(rec, range(50, 80))
    ck.write(rec, 80, T0, T0 + 2.0)  # fails: no exception, the run goes on
    written(ck)
    assert ck.error is not None and "No space left" in ck.error
    got = read_shard_file(tmp_path / "s.rows")
    assert got is not None and len(got.records) == 50  # cut back to the last whole frame: no torn one
    now[0] = 1.0
    answer(rec, range(50, 80))
    ck.write(rec, 80, T0, T0 + 3.0)  # within the retry interval: kept, not tried
    written(ck)
    assert disk.attempts == 1
    now[0] = 3.5
    disk.full = False  # room again (another file was removed)
    send(rec, range(80, 100))
    answer(rec, range(80, 100))
    ck.write(rec, 100, T0, T0 + 4.0, final=True)
    ck.close()
    assert "written again" in ck.error
    got = read_shard_file(tmp_path / "s.rows")
    assert got is not None and got.final and len(got.records) == 100  # nothing lost
    assert (got.records.outcome == Outcome.OK).all()


def test_a_disk_full_until_the_end_leaves_the_rows_up_to_it_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = live_rows(100)
    ck = RowCheckpoint(tmp_path / "s.rows", retry_s=0.0)
    send(rec, range(50))
    answer(rec, range(50))
    ck.write(rec, 50, T0, T0 + 1.0)
    written(ck)
    monkeypatch.setattr(ck, "_file", FullDisk(ck._file))
    send(rec, range(50, 100))
    answer(rec, range(50, 100))
    ck.write(rec, 100, T0, T0 + 2.0)
    ck.write(rec, 100, T0, T0 + 3.0, final=True)
    ck.close()
    assert ck.error is not None and "could not be written" in ck.error
    got = read_shard_file(tmp_path / "s.rows")
    assert got is not None and len(got.records) == 50 and not got.final
    assert (got.records.outcome == Outcome.OK).all()


def running_folder(out: Path, rows_per_shard: list[int]) -> Results:
    """A folder whose run was cut off: segment 0 written, segment 1 running with checkpoints only."""
    results = Results(header(), [])
    first = live_rows(200)
    first.sent[:] = first.intended
    first.done[:] = first.intended + 0.004
    first.outcome[:] = Outcome.OK
    seg0 = Segment(0, "run", [Stage(100.0, 0.0, 2.0)], "constant", 0, 1.0, first, generator={"cpu_s": 0.01})
    append_segment(out, results, seg0)
    shell = Segment(1, "run", [Stage(100.0, 0.0, 10.0)], "constant", 1, 2.0, Records.empty(np.empty(0)), start_rps=5.0)
    start_segment(out, results, shell)
    for k, n in enumerate(rows_per_shard):
        rec = Records.empty((np.arange(n) * len(rows_per_shard) + k) / 100.0)
        send(rec, range(n))
        answer(rec, range(n - 3))
        ck = RowCheckpoint(shard_file(out, 1, k))
        ck.write(rec, n, T0, T0 + n * len(rows_per_shard) / 100.0)
        ck.close()
    return results


def test_a_cut_off_folder_loads_with_the_running_segment_rebuilt_and_marked_interrupted(tmp_path: Path) -> None:
    running_folder(tmp_path, [300, 290])
    results = load_results(tmp_path)
    assert [s.index for s in results.segments] == [0, 1]
    seg = results.segments[1]
    assert seg.interrupted and seg.stopped == "interrupted" and seg.start_rps == 5.0
    assert len(seg.records) == 590
    assert (np.diff(seg.records.intended) > 0).all()  # shards merged back into schedule order
    assert any("cut off" in n for n in seg.notes)
    summary = build_summary(results)
    assert summary["interrupted"] is True
    assert summary["generator"]["requests"] == 790
    # the public reader too
    loaded = load(tmp_path)
    assert loaded.summary.interrupted and len(loaded.rows()["intended"]) == 790


def test_appending_the_finished_segment_replaces_its_checkpoints(tmp_path: Path) -> None:
    results = running_folder(tmp_path, [100])
    got = recover_segment_rows(tmp_path, 1)
    assert got is not None
    seg = Segment(1, "run", [Stage(100.0, 0.0, 10.0)], "constant", 1, 2.0, got[0])
    append_segment(tmp_path, results, seg)
    assert shard_files(tmp_path, 1) == [] and results.running is None
    again = load_results(tmp_path)
    assert len(again.segments) == 2 and not again.segments[1].interrupted


def test_a_segment_that_failed_before_any_row_is_forgotten(tmp_path: Path) -> None:
    results = running_folder(tmp_path, [])
    abandon_segment(tmp_path, results)
    assert [s.index for s in load_results(tmp_path).segments] == [0]
    assert "running_segment" not in (tmp_path / "results.json").read_text()
