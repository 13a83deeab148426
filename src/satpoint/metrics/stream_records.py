"""Per-request stream columns: when the chunks of a streamed answer arrived, kept compactly and exactly.

A streamed request (REST server-sent events, gRPC ``ModelStreamInfer``) has, beside the three timestamps
of :class:`~satpoint.metrics.records.Records` (``intended``, ``sent``, ``done`` = the end of the stream),
one row here with:

* ``first_s`` / ``last_s``: the arrival of its first and last chunk (run clock; NaN: no chunk arrived);
* ``chunks``: how many chunks arrived;
* ``max_gap_s``: the largest gap between consecutive chunks (NaN: fewer than two gaps);
* ``coalesced``: how many of its chunks were stamped at the same instant as its previous chunk, because one
  read of the socket carried both (their gap is recorded as 0): the generator's loop read them late, or
  the server sent them together; a stage's share of such gaps says how far its gap figures are the
  loop's timing rather than the server's;
* its *gaps*: every gap between consecutive chunks, as ``uint32`` microseconds in one flat array
  ``gaps_us``, the row's gaps contiguous at ``gaps_us[gap_start : gap_start + gap_count]``
  (``gap_start`` is -1 for a row without gaps).

What is kept, and why the gap percentiles are exact: every gap of every stream is kept (4 bytes per chunk,
not one row per chunk), rounded to the microsecond.  A percentile of the gaps of any set of rows (a stage's
steady window, the gaps of one shard or of all of them) is an order statistic of the gathered gaps, so it
is exact to 1 µs: no histogram, no binning error, and shards merge by concatenation like the rows.
``uint32`` microseconds hold gaps up to 71 minutes (a longer one is clipped to that).

Censoring, as for latency (DESIGN.md: censored rows count at the time they waited so far): a stream still
open when it timed out or the run ended (``TIMEOUT``, ``UNFINISHED``) gets one more gap, from its last chunk
to the moment it was given up, a lower bound of the gap that was under way; a stream that ended badly
(``STREAM_BROKEN``, ``STREAM_CUT``, ``STREAM_ERROR``) keeps the chunks and gaps that did arrive and nothing
more.  The time to first chunk of a censored row that got no chunk counts as ``done - intended`` (how long
it had waited), the same lower bound as its latency.

While a run goes on, a transport stamps the rows through :class:`StreamStamper` (``chunk`` on every chunk,
``end`` when the stream is over, whatever its outcome); a row's gaps are appended to ``gaps_us`` when its
stream ends, so they are contiguous even though streams end in any order.  ``compacted`` rewrites the flat
array in row order (``select`` and ``merge`` do it too), which is how folders store it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]

#: the largest gap ``gaps_us`` holds (a longer one is clipped to it)
MAX_GAP_US = int(np.iinfo(np.uint32).max)
#: the results folder's column names (``segment-NNN.npz``); a folder without them has no streams
COLUMNS = ("stream_first", "stream_last", "stream_chunks", "stream_max_gap", "stream_gap_start", "stream_gap_count")
#: chunks that shared a read with the previous one (absent in folders written before it: zeros)
COALESCED_COLUMN = "stream_coalesced"
GAPS_COLUMN = "stream_gaps_us"


@dataclass
class StreamRecords:
    """The stream columns of a :class:`~satpoint.metrics.records.Records`, row for row (see the module doc)."""

    first_s: F64
    last_s: F64
    chunks: I32
    max_gap_s: F64
    gap_start: I64
    gap_count: I32
    #: the gaps of all rows, microseconds; only ``gaps_us[:n_gaps]`` is used (the rest is room to grow)
    gaps_buf: U32
    n_gaps: int = -1
    #: chunks stamped at the same instant as the row's previous one (one read carried both); None: zeros
    coalesced: I32 = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.n_gaps < 0:
            self.n_gaps = len(self.gaps_buf)
        n = len(self.first_s)
        if self.coalesced is None:
            self.coalesced = np.zeros(n, dtype=np.int32)
        for name in ("last_s", "chunks", "max_gap_s", "gap_start", "gap_count", "coalesced"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"stream column {name} has {len(getattr(self, name))} rows, first_s {n}")

    @classmethod
    def empty(cls, n: int) -> StreamRecords:
        return cls(
            first_s=np.full(n, np.nan),
            last_s=np.full(n, np.nan),
            chunks=np.zeros(n, dtype=np.int32),
            max_gap_s=np.full(n, np.nan),
            gap_start=np.full(n, -1, dtype=np.int64),
            gap_count=np.zeros(n, dtype=np.int32),
            gaps_buf=np.zeros(max(n, 16), dtype=np.uint32),
            n_gaps=0,
        )

    def __len__(self) -> int:
        return len(self.first_s)

    @property
    def gaps_us(self) -> U32:
        """The flat gap array in use (a view)."""
        return self.gaps_buf[: self.n_gaps]

    # writing (the stamper) -------------------------------------------------------------------------------
    def append_gaps(self, idx: int, gaps_us: Sequence[int]) -> None:
        """Keep row ``idx``'s gaps (its stream ended): appended to the flat array, contiguous."""
        k = len(gaps_us)
        if not k:
            return
        n = self.n_gaps
        if n + k > len(self.gaps_buf):
            grown = np.zeros(max(2 * len(self.gaps_buf), n + k), dtype=np.uint32)
            grown[:n] = self.gaps_buf[:n]
            self.gaps_buf = grown
        self.gaps_buf[n : n + k] = gaps_us
        self.gap_start[idx] = n
        self.gap_count[idx] = k
        self.n_gaps = n + k

    # row operations (as Records does them) ------------------------------------------------------------------
    def row_gaps(self, idx: int) -> U32:
        """Row ``idx``'s gaps, in order of arrival (microseconds)."""
        start, count = int(self.gap_start[idx]), int(self.gap_count[idx])
        return self.gaps_us[start : start + count] if start >= 0 else np.zeros(0, dtype=np.uint32)

    def gaps_of(self, rows: npt.NDArray[np.bool_] | npt.NDArray[np.integer[Any]] | slice) -> U32:
        """The gaps of the picked rows, concatenated in row order (microseconds)."""
        start = self.gap_start[rows]
        count = self.gap_count[rows]
        keep = (start >= 0) & (count > 0)
        start, count = start[keep], count[keep].astype(np.int64)
        total = int(count.sum())
        if not total:
            return np.zeros(0, dtype=np.uint32)
        # index of every kept gap: each row's start, then +1 for the next ones
        ends = np.cumsum(count)
        offsets = np.arange(total, dtype=np.int64) - np.repeat(ends - count, count)
        idx = np.repeat(start, count) + offsets
        out: U32 = self.gaps_us[idx]
        return out

    def select(self, rows: npt.NDArray[np.bool_] | npt.NDArray[np.integer[Any]] | slice) -> StreamRecords:
        """The picked rows (copies), their gaps gathered in row order."""
        gaps = self.gaps_of(rows)
        count = self.gap_count[rows].copy()
        start_raw = self.gap_start[rows]
        count[start_raw < 0] = 0
        start = np.where(count > 0, np.cumsum(count, dtype=np.int64) - count, -1).astype(np.int64)
        return StreamRecords(
            first_s=self.first_s[rows].copy(),
            last_s=self.last_s[rows].copy(),
            chunks=self.chunks[rows].copy(),
            max_gap_s=self.max_gap_s[rows].copy(),
            gap_start=start,
            gap_count=count.astype(np.int32),
            gaps_buf=gaps,
            coalesced=self.coalesced[rows].copy(),
        )

    def compacted(self) -> StreamRecords:
        """The same rows with the flat array in row order and without spare room."""
        return self.select(slice(None))

    def shifted(self, offset_s: float) -> StreamRecords:
        """Chunk times on a clock shifted by ``offset_s`` (gaps do not move)."""
        return StreamRecords(
            self.first_s + offset_s,
            self.last_s + offset_s,
            self.chunks,
            self.max_gap_s,
            self.gap_start,
            self.gap_count,
            self.gaps_buf,
            self.n_gaps,
            self.coalesced,
        )

    @staticmethod
    def concat(parts: Sequence[StreamRecords]) -> StreamRecords:
        """Shards laid one after another (rows in part order, gaps offset accordingly)."""
        compact = [p.compacted() for p in parts]
        base = np.cumsum([0] + [p.n_gaps for p in compact[:-1]], dtype=np.int64)
        return StreamRecords(
            first_s=np.concatenate([p.first_s for p in compact]),
            last_s=np.concatenate([p.last_s for p in compact]),
            chunks=np.concatenate([p.chunks for p in compact]),
            max_gap_s=np.concatenate([p.max_gap_s for p in compact]),
            gap_start=np.concatenate(
                [np.where(p.gap_start >= 0, p.gap_start + b, -1) for p, b in zip(compact, base, strict=True)]
            ),
            gap_count=np.concatenate([p.gap_count for p in compact]),
            gaps_buf=np.concatenate([p.gaps_us for p in compact]),
            coalesced=np.concatenate([p.coalesced for p in compact]),
        )

    # the results folder ------------------------------------------------------------------------------------
    def columns(self) -> dict[str, npt.NDArray[np.generic]]:
        c = self.compacted()
        return {
            "stream_first": c.first_s,
            "stream_last": c.last_s,
            "stream_chunks": c.chunks,
            "stream_max_gap": c.max_gap_s,
            "stream_gap_start": c.gap_start,
            "stream_gap_count": c.gap_count,
            GAPS_COLUMN: c.gaps_us,
            COALESCED_COLUMN: c.coalesced,
        }

    @classmethod
    def from_columns(cls, cols: Mapping[str, npt.NDArray[np.generic]]) -> StreamRecords | None:
        """The stream columns of a rows file, or None if it has none (a folder without streams)."""
        if "stream_chunks" not in cols:
            return None
        return cls(
            first_s=np.asarray(cols["stream_first"], dtype=np.float64),
            last_s=np.asarray(cols["stream_last"], dtype=np.float64),
            chunks=np.asarray(cols["stream_chunks"], dtype=np.int32),
            max_gap_s=np.asarray(cols["stream_max_gap"], dtype=np.float64),
            gap_start=np.asarray(cols["stream_gap_start"], dtype=np.int64),
            gap_count=np.asarray(cols["stream_gap_count"], dtype=np.int32),
            gaps_buf=np.asarray(cols[GAPS_COLUMN], dtype=np.uint32),
            coalesced=np.asarray(cols[COALESCED_COLUMN], dtype=np.int32) if COALESCED_COLUMN in cols else None,  # type: ignore[arg-type]
        )


def gap_us(seconds: float) -> int:
    """A gap in whole microseconds (rounded), clipped to what ``uint32`` holds."""
    us = int(seconds * 1e6 + 0.5)
    return us if us < MAX_GAP_US else MAX_GAP_US


class StreamStamper:
    """What a stream transport calls, on the event loop, to stamp its rows (the seam; see stream-seam.md).

    * ``chunk(idx, now)`` for every chunk of request ``idx`` as it arrives (``now``: ``time.perf_counter()``,
      the clock of ``Records.sent``, taken once per read: chunks of one read share it); the first one sets
      ``first``; one at the same ``now`` as the row's previous chunk counts as ``coalesced``.
    * ``end(idx, now, open_gap)`` once the stream is over, whatever its outcome, *after* or *before* the
      transport stamps ``done``/``outcome``/``status`` as for any request: its gaps are kept; with
      ``open_gap`` (the stream was given up while open: a timeout, the end of the run) the time from the
      last chunk to ``now`` is kept as one more gap, a lower bound.  ``end`` on a row without chunks, or a
      second time, does nothing.

    Times stay raw ``perf_counter`` values until the dispatcher moves every column to the run clock at the
    end (as it does ``sent``/``done``).  Per chunk: a few memoryview writes and one list append.
    """

    __slots__ = ("_chunks", "_coalesced", "_first", "_last", "_max_gap", "_open", "stream")

    def __init__(self, stream: StreamRecords) -> None:
        self.stream = stream
        self._open: dict[int, list[int]] = {}
        self.rebind()

    def rebind(self) -> None:
        """(Re)take views of the columns (after they were replaced by larger arrays)."""
        s = self.stream
        self._first = _view(s.first_s)
        self._last = _view(s.last_s)
        self._chunks = _view(s.chunks)
        self._max_gap = _view(s.max_gap_s)
        self._coalesced = _view(s.coalesced)

    def chunk(self, idx: int, now: float) -> None:
        chunks = self._chunks
        n = chunks[idx]
        if n:
            gaps = self._open.get(idx)
            if gaps is not None:
                last = self._last[idx]
                gaps.append(gap_us(now - last))
                if now == last:  # the same read as the previous chunk: its gap is the read's, not the server's
                    self._coalesced[idx] += 1
        else:
            self._first[idx] = now
            self._open[idx] = []
        self._last[idx] = now
        chunks[idx] = n + 1

    def end(self, idx: int, now: float, open_gap: bool = False) -> None:
        gaps = self._open.pop(idx, None)
        if gaps is None:
            return
        if open_gap:
            gaps.append(gap_us(now - self._last[idx]))
        if gaps:
            self._max_gap[idx] = max(gaps) / 1e6
            self.stream.append_gaps(idx, gaps)

    def open_rows(self) -> list[int]:
        """Rows whose stream has chunks and is not ended yet."""
        return list(self._open)

    def end_all(self, now: float, open_gap: bool = True) -> None:
        """End every open stream (the run is over, or the transport gives up on all of them)."""
        for idx in list(self._open):
            self.end(idx, now, open_gap)


def _view(column: Any) -> Any:
    """A writable memoryview of a numpy column (writes at a fraction of numpy's item-set cost)."""
    return memoryview(column)


def attach(rec: Any) -> StreamStamper:
    """A stamper for ``rec`` (a :class:`~satpoint.metrics.records.Records`), giving it empty stream columns
    first if it has none: what a stream transport's constructor calls."""
    if rec.stream is None or len(rec.stream) != len(rec):
        rec.stream = StreamRecords.empty(len(rec))
    return StreamStamper(rec.stream)
