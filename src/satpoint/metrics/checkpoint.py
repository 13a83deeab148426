"""Row checkpoints: an append-only file per generator process, so a cut-off run keeps its rows.

While a segment runs, each generator process (shard) appends *frames* to its own file
``segment-NNN.shard-K.rows`` about once a second.  A frame holds the rows that became due since the
previous frame (whatever their state: in flight, waiting for a slot, already answered) and the rows that
have changed since they were last written (answered, or sent after waiting), with their row index.
Reading a file back, the last version of each row wins.  Every row is therefore written at most a few
times (due, sent after waiting, finished), so the total cost is linear in the run's length and the
cost of one checkpoint is proportional to the rows of the last interval, not to the run so far.

Frame layout (little endian)::

    b"SPC3"  u32 flags (1 = final)  i64 rows  f64 now_s  i64 due    then rows x ROW (41 bytes)

(``b"SPC2"`` frames, from before the ``model`` column (a model mix), have 39-byte rows without it, and
``b"SPCK"`` frames, from before ``retried``, 38-byte rows without either; they still read.)

A streaming run (``Records.stream``, see ``metrics.stream_records``) follows each frame with a stream frame
holding the stream columns of that frame's finished rows (a row's stream has ended once ``done`` is set)::

    b"SPS1"  u32 flags (0)  i64 rows  i64 gaps   then rows x STREAM_ROW (44 bytes), then gaps x u32 (µs)

each row's gaps contiguous, in row order.  Rows recovered from a file cut off mid-run keep the stream
columns of the rows that had finished; rows still in flight lose theirs (they become ``UNFINISHED``).

``now_s`` is the run clock when the frame was taken and ``due`` the number of rows due by then (the
shard's first ``due`` rows).  A final frame is written when the shard ends normally: its rows are the
shard's records exactly.  Without one (the process was killed, the disk filled up), rows that were
still in flight at the last frame become ``UNFINISHED`` and rows still waiting for a slot ``NOT_SENT``,
both censored at the last frame's time, as an interruption would have left them.  A frame cut short
by the crash is ignored.

Building a frame happens on the event loop (a few vectorised numpy operations over the rows of the
last interval); the write itself happens on a background thread, so a slow disk never stalls sending.
A write error (a full disk) loses nothing: the file is cut back to its last whole frame, the frames
that could not be written are kept in memory (about 40 bytes per row, as many times as the row changed)
and written again, all at once, every ``RETRY_S`` seconds until a write succeeds; the run goes on, and
the error is reported once with when (and whether) the writes resumed.

Durability: frames are written without ``fsync``.  A killed process (``kill -9``, the OOM killer) loses
nothing the kernel accepted; a power loss may lose the last seconds of frames, or leave a frame cut
short, which the reader ignores (with every frame after it).
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.stream_records import StreamRecords

ROW = np.dtype(
    [
        ("idx", "<i8"),
        ("intended", "<f8"),
        ("sent", "<f8"),
        ("done", "<f8"),
        ("outcome", "i1"),
        ("status", "<i4"),
        ("waited", "?"),
        ("retried", "?"),
        ("model", "<i2"),
    ]
)
#: the row layout of ``b"SPC2"`` frames (no ``model``)
ROW_V2 = np.dtype([(name, dtype) for name, (dtype, *_) in (ROW.fields or {}).items() if name != "model"])
#: the row layout of ``b"SPCK"`` frames (no ``retried``)
ROW_V1 = np.dtype(
    [
        ("idx", "<i8"),
        ("intended", "<f8"),
        ("sent", "<f8"),
        ("done", "<f8"),
        ("outcome", "i1"),
        ("status", "<i4"),
        ("waited", "?"),
    ]
)
#: the stream columns of one finished row (``b"SPS1"`` frames)
STREAM_ROW = np.dtype(
    [
        ("idx", "<i8"),
        ("first", "<f8"),
        ("last", "<f8"),
        ("chunks", "<i4"),
        ("max_gap", "<f8"),
        ("gap_count", "<i4"),
    ]
)
_STREAM_HEADER = struct.Struct("<4sIqq")
_STREAM_MAGIC = b"SPS1"
_HEADER = struct.Struct("<4sIqdq")
_MAGIC = b"SPC3"
_LAYOUTS = {_MAGIC: ROW, b"SPC2": ROW_V2, b"SPCK": ROW_V1}
_FINAL = 1
#: seconds between checkpoints while a segment runs
INTERVAL_S = 1.0
#: seconds between attempts to write again after a write failed (a full disk)
RETRY_S = 3.0


def shard_file(out_dir: Path, segment: int, shard: int) -> Path:
    return Path(out_dir) / f"segment-{segment:03d}.shard-{shard}.rows"


def shard_files(out_dir: Path, segment: int) -> list[Path]:
    """The checkpoint files of a segment, in shard order."""
    files = Path(out_dir).glob(f"segment-{segment:03d}.shard-*.rows")
    return sorted(files, key=lambda p: int(p.name.rsplit(".", 2)[-2].split("-")[1]))


def remove_shard_files(out_dir: Path, segment: int) -> None:
    for path in shard_files(out_dir, segment):
        path.unlink(missing_ok=True)


@dataclass(frozen=True)
class CheckpointSpec:
    """Where a segment's shards write their checkpoints (picklable: it travels to generator processes)."""

    out_dir: Path
    segment: int
    interval_s: float = INTERVAL_S

    def path(self, shard: int) -> Path:
        return shard_file(self.out_dir, self.segment, shard)


class RowCheckpoint:
    """Appends frames of one shard's rows to its file (see the module docstring).

    ``write`` is called on the event loop with the live columns (``sent``/``done`` hold raw
    ``perf_counter`` values, ``t0`` is the run clock's origin) and ``due``, the number of leading rows
    that are due so far."""

    def __init__(self, path: Path, retry_s: float = RETRY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # unbuffered: a failed write leaves no bytes in a buffer to be flushed later, behind our back
        self._file = open(self.path, "wb", buffering=0)  # noqa: SIM115 - closed in close()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="satpoint-checkpoint")
        self._lock = threading.Lock()
        self._retry_s = retry_s
        self._clock = clock
        self.error: str | None = None
        self._unwritten: list[bytes] = []  # frames a failed write left to write again
        self._retry_at = 0.0
        self._failed_at: float | None = None  # clock() of the first failure
        self._good_size = 0
        self._due_written = 0  # rows [0, _due_written) were written at least once
        self._lo = 0  # every row below is written in its final state
        self._final = np.zeros(0, dtype=np.bool_)  # written in its final state (answered or given up)
        self._sent = np.zeros(0, dtype=np.bool_)  # written with its send time
        self.frames = 0
        self.rows_written = 0

    def write(self, rec: Records, due: int, t0: float, now: float, final: bool = False) -> None:
        if due <= 0 and not final:
            return  # nothing due yet (the generator starts ahead of its clock): nothing to keep
        if len(self._final) < len(rec):
            grow = len(rec) - len(self._final)
            self._final = np.concatenate([self._final, np.zeros(grow, dtype=np.bool_)])
            self._sent = np.concatenate([self._sent, np.zeros(grow, dtype=np.bool_)])
        lo, new = self._lo, self._due_written
        due = min(due, len(rec))
        done = rec.done[lo:due]
        sent = rec.sent[lo:due]
        is_final = ~np.isnan(done)
        is_sent = ~np.isnan(sent)
        changed = (is_final & ~self._final[lo:due]) | (is_sent & ~self._sent[lo:due])
        if new > lo:
            changed[new - lo :] = True  # newly due rows are written whatever their state
        else:
            changed[:] = True
        rows = np.flatnonzero(changed) + lo
        frame = np.empty(len(rows), dtype=ROW)
        frame["idx"] = rows
        frame["intended"] = rec.intended[rows]
        frame["sent"] = rec.sent[rows] - t0
        frame["done"] = rec.done[rows] - t0
        frame["outcome"] = rec.outcome[rows]
        frame["status"] = rec.status[rows]
        frame["waited"] = rec.waited[rows]
        frame["retried"] = rec.retried[rows]
        frame["model"] = rec.model[rows]
        self._final[lo:due] |= is_final
        self._sent[lo:due] |= is_sent
        unfinished = np.flatnonzero(~self._final[lo:due])
        self._lo = lo + int(unfinished[0]) if len(unfinished) else due
        self._due_written = max(new, due)
        header = _HEADER.pack(_MAGIC, _FINAL if final else 0, len(frame), now - t0, due)
        self.frames += 1
        self.rows_written += len(frame)
        data = header + frame.tobytes()
        if rec.stream is not None:
            data += _stream_frame(rec.stream, rows[~np.isnan(rec.done[rows])], t0)
        self._pool.submit(self._append, data)

    def _append(self, data: bytes, force: bool = False) -> None:
        with self._lock:
            if data:
                self._unwritten.append(data)
            if not self._unwritten or (self._failed_at is not None and not force and self._clock() < self._retry_at):
                return  # a write failed a moment ago: this frame waits for the next attempt
            blob = b"".join(self._unwritten)
            try:
                view = memoryview(blob)
                while view:
                    view = view[self._file.write(view) :]
            except OSError as e:
                self._failed(e)
                return
            self._good_size += len(blob)
            self._unwritten.clear()
            if self._failed_at is not None and self.error is not None:
                self.error += f"; written again {self._clock() - self._failed_at:.0f} s later"
                self._failed_at = None

    def _failed(self, e: OSError) -> None:
        """A write failed: cut the file back to its last whole frame (readers stop at a torn one) and try
        again in ``retry_s``; the first failure is the one reported."""
        now = self._clock()
        if self._failed_at is None:
            self._failed_at = now
            if self.error is None:
                self.error = (
                    f"checkpoint {self.path.name}: {e.strerror or e}; its frames are kept in memory and "
                    f"written again every {self._retry_s:g} s"
                )
        self._retry_at = now + self._retry_s
        try:
            os.ftruncate(self._file.fileno(), self._good_size)
            self._file.seek(self._good_size)
        except OSError:
            pass

    def close(self) -> None:
        """Wait for pending writes, try once more to write what a failure left, and close the file."""
        self._pool.shutdown(wait=True)
        self._append(b"", force=True)
        if self._unwritten and self.error is not None:
            self.error += "; the last frames could not be written (the rows are in memory)"
        try:
            self._file.close()
        except OSError as e:
            self.error = self.error or f"checkpoint {self.path.name}: {e.strerror or e}"


def _stream_frame(stream: StreamRecords, rows: npt.NDArray[np.int64], t0: float) -> bytes:
    """The ``b"SPS1"`` frame of ``rows`` (finished rows; raw ``perf_counter`` chunk times, ``t0`` the origin)."""
    part = stream.select(rows)
    out = np.empty(len(rows), dtype=STREAM_ROW)
    out["idx"] = rows
    out["first"] = part.first_s - t0
    out["last"] = part.last_s - t0
    out["chunks"] = part.chunks
    out["max_gap"] = part.max_gap_s
    out["gap_count"] = part.gap_count
    gaps = part.gaps_us.astype("<u4")
    return _STREAM_HEADER.pack(_STREAM_MAGIC, 0, len(out), len(gaps)) + out.tobytes() + gaps.tobytes()


def _read_stream_frame(data: bytes, pos: int) -> tuple[npt.NDArray[np.void], npt.NDArray[np.uint32], int] | None:
    """The rows and gaps of the stream frame at ``pos`` and the position after it (None: none, or cut short)."""
    if pos + _STREAM_HEADER.size > len(data):
        return None
    magic, _flags, n, k = _STREAM_HEADER.unpack_from(data, pos)
    end = pos + _STREAM_HEADER.size + n * STREAM_ROW.itemsize + 4 * k
    if magic != _STREAM_MAGIC or n < 0 or k < 0 or end > len(data):
        return None
    rows = np.frombuffer(data, dtype=STREAM_ROW, count=n, offset=pos + _STREAM_HEADER.size)
    gaps = np.frombuffer(data, dtype="<u4", count=k, offset=pos + _STREAM_HEADER.size + n * STREAM_ROW.itemsize)
    return rows, gaps.astype(np.uint32), end


def _recovered_streams(
    idx: npt.NDArray[np.int64], frames: list[tuple[npt.NDArray[np.void], npt.NDArray[np.uint32]]]
) -> StreamRecords | None:
    """The stream columns of the recovered rows ``idx`` (sorted) from the file's stream frames (last wins)."""
    if not frames:
        return None
    out = StreamRecords.empty(len(idx))
    rows = np.concatenate([f[0] for f in frames])
    gaps = np.concatenate([f[1] for f in frames])
    # each stream row's gaps start where the previous rows' (of all frames, in order) end
    counts = rows["gap_count"].astype(np.int64)
    starts = np.cumsum(counts) - counts
    rev_idx: npt.NDArray[np.int64] = rows["idx"][::-1]
    uniq, first = np.unique(rev_idx, return_index=True)
    last: npt.NDArray[np.int64] = len(rows) - 1 - first
    if not len(idx):
        return out
    pos: npt.NDArray[np.int64] = np.searchsorted(idx, uniq)
    found = (pos < len(idx)) & (idx[np.minimum(pos, len(idx) - 1)] == uniq)
    pos, last = pos[found], last[found]
    out.first_s[pos] = rows["first"][last]
    out.last_s[pos] = rows["last"][last]
    out.chunks[pos] = rows["chunks"][last]
    out.max_gap_s[pos] = rows["max_gap"][last]
    out.gap_count[pos] = rows["gap_count"][last]
    out.gap_start[pos] = np.where(counts[last] > 0, starts[last], -1)
    out.gaps_buf, out.n_gaps = gaps, len(gaps)
    return out.compacted()


@dataclass
class Recovered:
    records: Records
    final: bool  # the shard wrote its final frame: these are its rows exactly
    now_s: float  # run clock of the last frame
    frames: int


def read_shard_file(path: Path) -> Recovered | None:
    """The rows of one shard's checkpoint file (None if it holds no complete frame)."""
    data = Path(path).read_bytes()
    pos, parts = 0, []
    streams: list[tuple[npt.NDArray[np.void], npt.NDArray[np.uint32]]] = []
    now_s, due, final = 0.0, 0, False
    while pos + _HEADER.size <= len(data):
        magic, flags, n, t, d = _HEADER.unpack_from(data, pos)
        layout = _LAYOUTS.get(magic)
        end = pos + _HEADER.size + n * (layout.itemsize if layout is not None else 0)
        if layout is None or n < 0 or end > len(data):
            break  # a frame cut short by the crash
        frame = np.frombuffer(data, dtype=layout, count=n, offset=pos + _HEADER.size)
        if layout is not ROW:  # an older frame: no row was retried (SPCK), every row model 0 (SPCK, SPC2)
            wide = np.zeros(n, dtype=ROW)
            for name in layout.fields or ():
                wide[name] = frame[name]
            frame = wide
        parts.append(frame)
        now_s, due, final = float(t), int(d), bool(flags & _FINAL)
        pos = end
        got = _read_stream_frame(data, pos)
        if got is not None:
            streams.append(got[:2])
            pos = got[2]
    if not parts:
        return None
    rows = np.concatenate(parts)
    # the last version of each row wins: unique over the reversed rows keeps the last occurrence
    idx_rev = rows["idx"][::-1]
    uniq, first = np.unique(idx_rev, return_index=True)
    latest = rows[::-1][first]
    latest = latest[uniq < due]
    rec = Records(
        intended=latest["intended"].astype(np.float64),
        sent=latest["sent"].astype(np.float64),
        done=latest["done"].astype(np.float64),
        outcome=latest["outcome"].astype(np.int8),
        status=latest["status"].astype(np.int32),
        waited=latest["waited"].astype(np.bool_),
        retried=latest["retried"].astype(np.bool_),
        model=latest["model"].astype(np.int16),
        stream=_recovered_streams(uniq[uniq < due].astype(np.int64), streams),
    )
    if not final:
        _censor_open_rows(rec, now_s)
    return Recovered(rec, final, now_s, len(parts))


def _censor_open_rows(rec: Records, now_s: float) -> None:
    """Rows still open at the last frame: in flight -> UNFINISHED, waiting -> NOT_SENT, both at ``now_s``."""
    open_rows: npt.NDArray[np.bool_] = np.isnan(rec.done)
    inflight = open_rows & ~np.isnan(rec.sent)
    rec.outcome[inflight] = Outcome.UNFINISHED
    rec.outcome[open_rows & ~inflight] = Outcome.NOT_SENT
    rec.done[open_rows] = np.maximum(now_s, rec.intended[open_rows])


def recover_segment_rows(out_dir: Path, segment: int) -> tuple[Records, list[str]] | None:
    """The merged rows of every shard's checkpoint of a segment, with notes; None if there are none."""
    parts, notes = [], []
    for path in shard_files(out_dir, segment):
        try:
            got = read_shard_file(path)
        except OSError as e:
            notes.append(f"{path.name}: unreadable ({e.strerror or e})")
            continue
        if got is None:
            continue
        parts.append(got.records)
        state = f"the process ended at {got.now_s:.1f} s" if got.final else f"cut off at {got.now_s:.1f} s"
        notes.append(f"{path.name}: {len(got.records)} rows recovered ({state})")
    if not parts:
        return None
    return Records.merge(parts), notes
