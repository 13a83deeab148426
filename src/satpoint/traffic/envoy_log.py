"""Arrival times (and the model each request was for) from Envoy access logs, streamed in chunks.

Envoy is the proxy in front of Seldon Core 2's models (the seldon-mesh), of KServe behind Istio or Envoy
Gateway: its access log is where a user finds the traffic a replica really got.  Two formats are read:

- ``text``: Envoy's default format (and Istio's, Seldon Core 2's, Envoy Gateway's, which extend it at
  the end), ``[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" ...``;
- ``json``: one JSON object a line (``json_format`` or ``typed_json_format``; Istio's JSON encoding), the
  start time under ``start_time`` (or the key given as ``time_key``), the path under ``path``.

Times: ISO 8601 as Envoy writes it (``2026-12-03T21:40:00.123Z``; any number of fraction digits, ``Z`` or
an offset; no zone = UTC), parsed vectorised when a chunk's stamps share one width; or a number, epoch
seconds (``%START_TIME(%s.%6f)%``), read as milliseconds above 1e11, µs above 1e14, ns above 1e17.
Float64 epoch seconds keep about 0.2 µs around the year 2026.

Lines that do not start like an access-log line (``[`` for text, ``{`` for JSON: the proxy's own log
lines mixed into ``kubectl logs``) and blank lines are counted as ``other_lines`` and skipped.  A line
that starts like one but cannot be read (no time, a bad time, broken JSON) is *malformed*: counted,
remembered with its line number (the first few), and skipped while the count stays within
``max_malformed``; one more and the reader refuses the file with those line numbers (``max_malformed=0``
refuses at the first).

Order: Envoy writes a line when the request *ends*, so start times come out of order by up to the request's
duration.  The reader sorts them with a bounded reorder buffer: it holds the arrivals of the last
``reorder_s`` seconds (by the latest start time seen so far) and releases older ones in time order.  That
is exact as long as no line starts more than ``reorder_s`` before a start time already seen on an earlier
line; a line that does is refused with its line number (raise ``reorder_s``).  ``reorder_s=None`` yields
file order untouched.  Either way ``EnvoyLogStats`` counts the lines out of order and the largest disorder.
Memory: one chunk of lines plus the buffer (rate x ``reorder_s`` arrivals), whatever the file's length.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from satpoint.errors import SatpointError

EnvoyFormat = Literal["auto", "text", "json"]
F64 = npt.NDArray[np.float64]
MAX_EXAMPLES = 5
_OIP_MODEL = re.compile(r"^/v2/models/([^/?]+)(?:/versions/[^/?]+)?(/infer)?")
_V1_MODEL = re.compile(r"^/v1/models/([^/?:]+)(:predict)?")
_GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")


class EnvoyLogError(SatpointError):
    """The access log cannot be read as one (too many malformed lines, a line too far out of order)."""


@dataclass
class EnvoyLogStats:
    """What the reader saw; filled in while it streams (complete once the iterator is exhausted)."""

    format: str = ""
    lines: int = 0
    arrivals: int = 0  # yielded
    other_lines: int = 0  # blank, or not an access-log line (the proxy's own log): skipped, not an error
    filtered: int = 0  # access-log lines that are not inference requests (with inference_only)
    malformed: int = 0
    malformed_examples: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)
    out_of_order: int = 0  # lines starting before a start time already seen on an earlier line
    max_disorder_s: float = 0.0  # the most by which such a line started earlier
    first_s: float | None = None
    last_s: float | None = None


class EnvoyChunk(NamedTuple):
    times_s: F64  # absolute arrival times, epoch seconds
    models: npt.NDArray[np.object_]  # the model name per request (str), or None where the path names none


def model_from_path(path: str) -> tuple[str | None, bool]:
    """(model, is_inference) of a request path: OIP ``/v2/models/{name}[/versions/{v}]/infer``, KServe v1
    ``/v1/models/{name}:predict``, OIP gRPC ``ModelInfer`` (an inference; the model is in the body)."""
    if m := _OIP_MODEL.match(path):
        return m.group(1), m.group(2) is not None and path[m.end() : m.end() + 1] in ("", "?")
    if m := _V1_MODEL.match(path):
        return m.group(1), m.group(2) is not None
    return None, path == _GRPC_INFER


def parse_time(stamp: str) -> float:
    """Epoch seconds of one START_TIME value (ISO 8601, or an epoch number); ValueError if neither."""
    s = stamp.strip()
    if _NUMBER.match(s):
        v = float(s)
        for limit, scale in ((1e17, 1e-9), (1e14, 1e-6), (1e11, 1e-3)):
            if abs(v) >= limit:
                return v * scale
        return v
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"not a time: {stamp[:60]!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


_DIM = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def _parse_iso_fixed(stamps: list[bytes]) -> tuple[F64, npt.NDArray[np.bool_]]:
    """Vectorised ``YYYY-MM-DDTHH:MM:SS[.f...]Z`` of one width (that of the first stamp): (times, ok);
    rows not ok (another width or shape) are for ``parse_time``."""
    n = len(stamps)
    w = len(stamps[0])
    times = np.full(n, np.nan)
    ok = np.zeros(n, dtype=bool)
    nf = w - 21  # fraction digits
    if n == 0 or not (w == 20 or 22 <= w <= 30):
        return times, ok
    lens = np.fromiter(map(len, stamps), dtype=np.int64, count=n)
    same = lens == w
    buf = b"".join(stamps) if same.all() else b"".join(s if len(s) == w else b"\0" * w for s in stamps)
    m = np.frombuffer(buf, dtype=np.uint8).reshape(n, w).astype(np.int64)
    fixed = {4: 45, 7: 45, 10: 84, 13: 58, 16: 58, w - 1: 90}  # - - T : : Z
    if nf > 0:
        fixed[19] = 46  # .
    good = same.copy()
    for col, ch in fixed.items():
        good &= m[:, col] == ch
    digit_cols = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, *range(20, 20 + max(nf, 0))]
    d = m[:, digit_cols] - 48
    good &= ((d >= 0) & (d <= 9)).all(axis=1)

    def num(cols: slice) -> npt.NDArray[np.int64]:
        part = d[:, cols]
        out = np.zeros(n, dtype=np.int64)
        for j in range(part.shape[1]):
            out = out * 10 + part[:, j]
        return out

    y, mo, da = num(slice(0, 4)), num(slice(4, 6)), num(slice(6, 8))
    hh, mi, ss = num(slice(8, 10)), num(slice(10, 12)), num(slice(12, 14))
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    good &= (mo >= 1) & (mo <= 12) & (hh <= 23) & (mi <= 59) & (ss <= 59) & (da >= 1)
    mo_c = np.clip(mo, 1, 12)
    good &= da <= _DIM[mo_c - 1] + ((mo_c == 2) & leap)
    # days from the civil date (H. Hinnant's algorithm), valid for years >= 0
    yy = y - (mo_c <= 2)
    era = yy // 400
    yoe = yy - era * 400
    doy = (153 * (mo_c + np.where(mo_c > 2, -3, 9)) + 2) // 5 + da - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    secs = days * 86400 + hh * 3600 + mi * 60 + ss
    frac = num(slice(14, 14 + nf)) / 10.0**nf if nf > 0 else 0.0
    times[good] = (secs + frac)[good]
    return times, good


def _parse_stamps(stamps: list[bytes]) -> tuple[F64, list[str | None]]:
    """Times of a chunk's stamps (NaN where unreadable) and the reason per unreadable one."""
    times, ok = _parse_iso_fixed(stamps) if stamps else (np.zeros(0), np.zeros(0, dtype=bool))
    reasons: list[str | None] = [None] * len(stamps)
    for i in np.flatnonzero(~ok).tolist():
        try:
            times[i] = parse_time(stamps[i].decode("utf-8", "replace"))
        except ValueError as e:
            reasons[i] = str(e)
    return times, reasons


def _json_value(key: str) -> re.Pattern[bytes]:
    return re.compile(rb'"' + re.escape(key.encode()) + rb'"\s*:\s*(?:"((?:[^"\\]|\\.)*)"|([-+0-9.eE]+))')


def _unescape(raw: bytes) -> bytes:
    return json.loads(b'"' + raw + b'"').encode() if b"\\" in raw else raw


class _Raw(NamedTuple):
    times_s: F64
    models: list[str | None]
    lines: npt.NDArray[np.int64]  # 1-based line numbers


class _Reader:
    """One chunk of lines at a time: list comprehensions over the lines, a vectorised time parser, and a
    cache of the request paths seen (a log repeats a handful of them)."""

    def __init__(
        self,
        fmt: Literal["text", "json"],
        time_key: str,
        path_key: str,
        inference_only: bool,
        want_models: bool,
        max_malformed: int,
    ) -> None:
        self.fmt = fmt
        self.max_malformed = max_malformed
        self.time_key, self.path_key = time_key, path_key
        self.time_re, self.path_re = _json_value(time_key), _json_value(path_key)
        self.time_prefix = b'"' + time_key.encode() + b'":"'
        self.path_prefix = b'"' + path_key.encode() + b'":"'
        self.inference_only = inference_only
        self.want_paths = inference_only or want_models
        self.paths: dict[bytes, tuple[str | None, bool]] = {}

    def _json_field(self, ln: bytes, prefix: bytes, pattern: re.Pattern[bytes]) -> bytes | None:
        """A key's value in a JSON line: a plain search for ``"key":"``, a regex where the writer put spaces,
        escapes or a number (None if the key is absent; ``_json_fallback`` decides then)."""
        i = ln.find(prefix)
        if i >= 0:
            j = ln.find(b'"', i + len(prefix))
            v = ln[i + len(prefix) : j]
            if b"\\" not in v:
                return v
        m = pattern.search(ln)
        if m is None:
            return None
        return _unescape(m.group(1)) if m.group(1) is not None else m.group(2)

    def _json_column(self, sel: list[bytes], prefix: bytes, pattern: re.Pattern[bytes]) -> list[bytes | None]:
        """``_json_field`` of every line: the plain search inlined, the rest line by line."""
        n = len(prefix)
        at = [ln.find(prefix) + n for ln in sel]
        vals: list[bytes | None] = [ln[i : ln.find(b'"', i)] if i >= n else None for ln, i in zip(sel, at, strict=True)]
        for j, v in enumerate(vals):
            if v is None or b"\\" in v:
                vals[j] = self._json_field(sel[j], prefix, pattern)
        return vals

    def _json_fallback(self, ln: bytes) -> tuple[bytes, bytes] | str:
        """(stamp, path) through the JSON parser, or why the line is malformed."""
        try:
            obj = json.loads(ln)
        except ValueError:
            return "not a JSON object"
        if not isinstance(obj, dict) or obj.get(self.time_key) in (None, "-", ""):
            return f"no {self.time_key!r} value"
        p = obj.get(self.path_key)
        return str(obj[self.time_key]).encode(), p.encode() if isinstance(p, str) else b""

    def _model(self, req: bytes) -> tuple[str | None, bool]:
        """(model, is_inference) of a path (JSON) or a request line (text), cached."""
        got = self.paths.get(req)
        if got is None:
            if self.fmt == "text":
                parts = req.split(b" ")
                req_path = parts[1] if len(parts) >= 2 else b""
            else:
                req_path = req
            got = model_from_path(req_path.decode("utf-8", "replace")) if req_path else (None, False)
            if len(self.paths) < 100_000:
                self.paths[req] = got
        return got

    def parse(self, lines: list[bytes], first_line: int, stats: EnvoyLogStats) -> _Raw:
        opener = b"{" if self.fmt == "json" else b"["
        idx = [i for i, ln in enumerate(lines) if ln[:1] == opener]
        stats.other_lines += len(lines) - len(idx)
        sel = lines if len(idx) == len(lines) else [lines[i] for i in idx]
        why: dict[int, str] = {}
        if self.fmt == "text":
            stamps = [ln[1 : ln.find(b"]", 1, 80)] for ln in sel]
            reqs = (
                [ln.split(b'"', 2)[1] if ln.count(b'"', 0, 200) >= 2 else b"" for ln in sel] if self.want_paths else []
            )
        else:
            got = self._json_column(sel, self.time_prefix, self.time_re)
            reqs = [g or b"" for g in self._json_column(sel, self.path_prefix, self.path_re)] if self.want_paths else []
            for j in [j for j, g in enumerate(got) if not g]:
                fb = self._json_fallback(sel[j])
                if isinstance(fb, str):
                    why[j] = fb
                    got[j] = b""
                else:
                    got[j] = fb[0]
                    if self.want_paths:
                        reqs[j] = fb[1]
            stamps = [g or b"" for g in got]
        times, reasons = _parse_stamps(stamps)
        keep = ~np.isnan(times)
        for j in np.flatnonzero(~keep).tolist():
            if j not in why:
                no_bracket = self.fmt == "text" and sel[j].find(b"]", 1, 80) < 0
                why[j] = "no closing ']' after the start time" if no_bracket else reasons[j] or "no time"
        for j in sorted(why):
            self._malformed(stats, first_line + idx[j], why[j])
        models: list[str | None] = []
        if self.want_paths:
            get, look = self.paths.get, self._model
            pairs = [get(r) or look(r) for r in reqs]
            if self.inference_only:
                infer = np.fromiter((p[1] for p in pairs), dtype=bool, count=len(pairs))
                stats.filtered += int((keep & ~infer).sum())
                keep &= infer
            models = [p[0] for p, k in zip(pairs, keep.tolist(), strict=True) if k]
        else:
            models = [None] * int(keep.sum())
        nums = np.asarray(idx, dtype=np.int64)[keep] + first_line
        return _Raw(times[keep], models, nums)

    def _malformed(self, stats: EnvoyLogStats, line: int, why: str) -> None:
        stats.malformed += 1
        if len(stats.malformed_examples) < MAX_EXAMPLES:
            stats.malformed_examples.append((line, why))
        if stats.malformed > self.max_malformed:
            shown = "; ".join(f"line {n}: {w}" for n, w in stats.malformed_examples)
            raise EnvoyLogError(
                f"{stats.malformed} malformed access-log lines (limit {self.max_malformed}), e.g. {shown}"
            )


def _open(path: Path) -> IO[bytes]:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]  # a GzipFile reads bytes
    return path.open("rb")


def _detect(path: Path) -> Literal["text", "json"]:
    with _open(path) as f:
        for ln in itertools.islice(f, 10_000):
            if ln.startswith(b"{"):
                return "json"
            if ln.startswith(b"["):
                return "text"
    raise EnvoyLogError(f"{path}: no Envoy access-log line (starting with '[' or '{{') in its first 10 000 lines")


def _raw_chunks(path: Path, chunk: int, reader: _Reader, stats: EnvoyLogStats) -> Iterator[_Raw]:
    with _open(path) as f:
        while lines := list(itertools.islice(f, chunk)):
            first = stats.lines + 1
            stats.lines += len(lines)
            raw = reader.parse(lines, first, stats)
            if len(raw.times_s):
                yield raw


def _ordered(raws: Iterator[_Raw], reorder_s: float | None, stats: EnvoyLogStats) -> Iterator[EnvoyChunk]:
    """Disorder statistics in file order, then (unless reorder_s is None) the bounded reorder buffer."""
    seen = -math.inf
    pend_t = np.zeros(0)
    pend_m = np.zeros(0, dtype=object)
    for raw in raws:
        t = raw.times_s
        before = np.maximum.accumulate(np.concatenate(([seen], t)))[:-1]
        disorder = before - t
        late = disorder > 0
        stats.out_of_order += int(late.sum())
        if late.any():
            stats.max_disorder_s = max(stats.max_disorder_s, float(disorder[late].max()))
        seen = max(seen, float(t.max()))
        models = np.empty(len(t), dtype=object)
        models[:] = raw.models
        if reorder_s is None:
            yield EnvoyChunk(t, models)
            continue
        if (too := np.flatnonzero(disorder > reorder_s)).size:
            i = int(too[0])
            raise EnvoyLogError(
                f"line {int(raw.lines[i])}: its start time is {disorder[i]:.3f} s before one on an earlier line, "
                f"beyond the reorder window of {reorder_s:g} s: raise it (a request that long, or a log not "
                "in completion order)"
            )
        all_t = np.concatenate((pend_t, t))
        all_m = np.concatenate((pend_m, models))
        order = np.argsort(all_t, kind="stable")
        all_t, all_m = all_t[order], all_m[order]
        cut = int(np.searchsorted(all_t, seen - reorder_s, side="right"))
        if cut:
            yield EnvoyChunk(all_t[:cut], all_m[:cut])
        pend_t, pend_m = all_t[cut:], all_m[cut:]
    if len(pend_t):
        yield EnvoyChunk(pend_t, pend_m)


def _rechunk(parts: Iterator[EnvoyChunk], chunk: int, stats: EnvoyLogStats) -> Iterator[EnvoyChunk]:
    """Chunks of exactly ``chunk`` arrivals (the last one shorter)."""
    held: list[EnvoyChunk] = []
    size = 0

    def emit(n: int) -> EnvoyChunk:
        nonlocal held, size
        t = np.concatenate([h.times_s for h in held])
        m = np.concatenate([h.models for h in held])
        held = [EnvoyChunk(t[n:], m[n:])] if n < len(t) else []
        size = len(t) - n
        out = EnvoyChunk(t[:n], m[:n])
        stats.arrivals += n
        stats.first_s = float(out.times_s[0]) if stats.first_s is None else stats.first_s
        stats.last_s = float(out.times_s[-1])
        return out

    for part in parts:
        held.append(part)
        size += len(part.times_s)
        while size >= chunk:
            yield emit(chunk)
    if size:
        yield emit(size)


def _stream(
    path: str | Path,
    chunk: int,
    fmt: EnvoyFormat,
    time_key: str,
    path_key: str,
    inference_only: bool,
    reorder_s: float | None,
    max_malformed: int,
    stats: EnvoyLogStats | None,
    want_models: bool,
) -> Iterator[EnvoyChunk]:
    if chunk < 1:
        raise ValueError("chunk must be >= 1")
    if reorder_s is not None and reorder_s < 0:
        raise ValueError("reorder_s must be >= 0 or None")
    p = Path(path)
    st = stats if stats is not None else EnvoyLogStats()
    st.format = _detect(p) if fmt == "auto" else fmt
    reader = _Reader(st.format, time_key, path_key, inference_only, want_models, max_malformed)
    yield from _rechunk(_ordered(_raw_chunks(p, chunk, reader, st), reorder_s, st), chunk, st)
    if st.arrivals == 0:
        raise EnvoyLogError(
            f"{p}: no arrivals in {st.lines} lines ({st.other_lines} not access-log lines, "
            f"{st.filtered} not inference requests, {st.malformed} malformed)"
        )


def iter_envoy_records(
    path: str | Path,
    chunk: int = 65536,
    *,
    fmt: EnvoyFormat = "auto",
    time_key: str = "start_time",
    path_key: str = "path",
    inference_only: bool = False,
    reorder_s: float | None = 60.0,
    max_malformed: int = 1000,
    stats: EnvoyLogStats | None = None,
) -> Iterator[EnvoyChunk]:
    """Chunks of (arrival times, model per request) from an Envoy access log (see the module's notes).

    ``fmt`` ``text``/``json`` (``auto``: by the first line starting with ``[`` or ``{``); ``time_key`` and
    ``path_key`` name the JSON keys; ``inference_only`` keeps OIP/KServe inference requests only (probes,
    metadata and everything else are counted as ``filtered``); ``stats`` is filled while streaming.  An
    ``EnvoyLogError`` says why a file is refused; a file with no arrivals at all is refused too."""
    args = (fmt, time_key, path_key, inference_only, reorder_s, max_malformed, stats)
    yield from _stream(path, chunk, *args, want_models=True)


def iter_envoy_times(
    path: str | Path,
    chunk: int = 65536,
    *,
    fmt: EnvoyFormat = "auto",
    time_key: str = "start_time",
    path_key: str = "path",
    inference_only: bool = False,
    reorder_s: float | None = 60.0,
    max_malformed: int = 1000,
    stats: EnvoyLogStats | None = None,
) -> Iterator[F64]:
    """Chunks of absolute arrival times (epoch seconds, float64, sorted unless ``reorder_s`` is None) from an
    Envoy access log: ``iter_envoy_records`` without the models (paths are then read only for
    ``inference_only``)."""
    args = (fmt, time_key, path_key, inference_only, reorder_s, max_malformed, stats)
    for part in _stream(path, chunk, *args, want_models=False):
        yield part.times_s
