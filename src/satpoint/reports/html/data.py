"""What the HTML report draws, computed from a results folder (no plotting here).

Everything is aggregated: per-stage dicts from the summary, bucketed time series (one bucket per
second unless the run is long, then wider buckets so a trace stays under ``MAX_POINTS`` points) and a
few hundred points of each stage's latency percentile spectrum.  No per-request row is ever embedded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.analysis.server.server_side import run_clock
from satpoint.analysis.summary.build import build_summary
from satpoint.metrics.records import ERROR_NAMES, Outcome, Records
from satpoint.metrics.results import Results, Segment, load_results

F64 = npt.NDArray[np.float64]

#: at most this many time buckets per folder (the bucket widens beyond 1 s for long runs)
MAX_POINTS = 1500
#: points of a latency percentile spectrum (before the exact maximum is appended)
SPECTRUM_POINTS = 160


@dataclass
class Band:
    """One stage on the report's timeline (seconds since the folder's first segment started)."""

    start_s: float
    hold_start_s: float
    end_s: float
    target_rps: float
    segment: int
    stage: int
    purpose: str


@dataclass
class Series:
    """Bucketed time series on the laid-out timeline; rates are per second, latencies in ms."""

    width_s: float
    t: list[float | None] = field(default_factory=list)  # bucket mid-points; None breaks a line
    offered: list[float | None] = field(default_factory=list)
    throughput: list[float | None] = field(default_factory=list)
    p50: list[float | None] = field(default_factory=list)
    p99: list[float | None] = field(default_factory=list)
    lag_p99: list[float | None] = field(default_factory=list)
    errors: dict[str, list[float]] = field(default_factory=dict)  # class -> errors/s, aligned with t


@dataclass
class Spectrum:
    """Latency percentile spectrum of one stage's steady window: x = 1 / (1 - p), y in ms."""

    segment: int
    stage: int
    number: int  # 1-based row in the stage table
    target_rps: float
    verdict: str
    count: int
    x: list[float]
    y_ms: list[float]


@dataclass
class ServerSeries:
    """The server's process tree over the laid-out timeline (between segments: a gap)."""

    t: list[float | None] = field(default_factory=list)  # interval mid-points
    cores: list[float | None] = field(default_factory=list)  # ΔCPU seconds / Δwall over the interval
    rss_mb: list[float | None] = field(default_factory=list)
    allowed_cores: float | None = None


@dataclass
class FolderData:
    path: Path
    label: str
    colour: str
    results: Results
    summary: dict[str, Any]
    offsets: dict[int, float]  # segment index -> timeline offset, s
    bands: list[Band]
    series: Series
    spectra: list[Spectrum]
    server: ServerSeries | None = None

    @property
    def header(self) -> dict[str, Any]:
        return self.results.header

    @property
    def kind(self) -> str:
        return self.results.kind


def _r(x: float, digits: int = 4) -> float | None:
    """Round to ``digits`` significant digits; NaN and infinities become None (a gap)."""
    if not math.isfinite(x):
        return None
    if x == 0:
        return 0.0
    return round(x, max(0, digits - 1 - math.floor(math.log10(abs(x)))))


def _segment_end(seg: Segment) -> float:
    sp = seg.spans
    return sp[-1].end_s if sp else 0.0


def timeline_offsets(segments: list[Segment]) -> dict[int, float]:
    """Lay segments end to end: offset = started_unix - first started_unix, never overlapping."""
    out: dict[int, float] = {}
    if not segments:
        return out
    first = segments[0].started_unix
    prev_end = 0.0
    for seg in segments:
        off = seg.started_unix - first
        if not math.isfinite(off) or off < prev_end:
            off = prev_end
        out[seg.index] = off
        prev_end = off + _segment_end(seg)
    return out


def _data_end(seg: Segment) -> float:
    done = seg.records.done
    finite = done[np.isfinite(done)]
    last = float(finite.max()) if len(finite) else 0.0
    return max(_segment_end(seg), last)


def bucket_width(segments: list[Segment], max_points: int = MAX_POINTS) -> float:
    """1 s, or a whole number of seconds so the folder's timeline fits in ``max_points`` buckets."""
    total = sum(_data_end(s) for s in segments)  # buckets never span the gaps between segments
    return float(max(1, math.ceil(total / max_points)))


def error_classes(rec: Records) -> tuple[npt.NDArray[np.bool_], list[str], npt.NDArray[np.int64]]:
    """Error rows (answered or timed out, not OK) and their class, named as in the summary."""
    oc = rec.outcome
    mask = rec.error_mask()
    names: list[str] = []
    codes = np.zeros(int(np.count_nonzero(mask)), dtype=np.int64)
    if not len(codes):
        return mask, names, codes
    o = oc[mask].astype(np.int64)
    st = rec.status[mask].astype(np.int64)
    keyed = np.where(np.isin(o, [Outcome.HTTP_ERROR, Outcome.GRPC_ERROR]), o * 1_000_000 + st, o * 1_000_000)
    uniq, codes = np.unique(keyed, return_inverse=True)
    for k in uniq.tolist():
        outcome, status = Outcome(int(k) // 1_000_000), int(k) % 1_000_000
        if outcome is Outcome.HTTP_ERROR:
            names.append(f"http_{status}")
        elif outcome is Outcome.GRPC_ERROR:
            names.append(f"grpc_{status}")
        else:
            names.append(ERROR_NAMES[outcome])
    return mask, names, codes.astype(np.int64)


def _pct(values: F64, q: float) -> float:
    return float(np.percentile(values, q)) * 1000 if len(values) else math.nan


def segment_series(seg: Segment, offset: float, width: float, out: Series) -> None:
    """Append one segment's buckets to ``out`` (a None row first, so lines break between segments)."""
    rec = seg.records
    if len(rec) == 0:
        return
    n_b = math.floor(_data_end(seg) / width) + 1  # the last bucket holds the data's end, even on an edge
    edges = np.arange(n_b + 1, dtype=np.float64) * width
    due_idx = np.searchsorted(rec.intended, edges)
    ok_counts = np.diff(np.searchsorted(np.sort(rec.done[rec.ok_mask()]), edges))
    keep = rec.latency_mask()
    lat = rec.latency_s()
    lag = rec.send_lag_s()
    err_mask, names, codes = error_classes(rec)
    err_done = rec.done[err_mask]
    per_class: dict[str, npt.NDArray[np.int64]] = {}
    for k, name in enumerate(names):
        counts = np.diff(np.searchsorted(np.sort(err_done[codes == k]), edges))
        per_class[name] = per_class.get(name, np.zeros(n_b, dtype=np.int64)) + counts
    if out.t:
        _append_gap(out)
    base = len(out.t)
    for b in range(n_b):
        a, z = int(due_idx[b]), int(due_idx[b + 1])
        sl = slice(a, z)
        lt = lat[sl][keep[sl]]
        lt = lt[~np.isnan(lt)]
        lg = lag[sl]
        lg = lg[~np.isnan(lg)]
        out.t.append(_r(offset + (b + 0.5) * width, 6))
        out.offered.append(_r((z - a) / width))
        out.throughput.append(_r(float(ok_counts[b]) / width))
        out.p50.append(_r(_pct(lt, 50)))
        out.p99.append(_r(_pct(lt, 99)))
        out.lag_p99.append(_r(_pct(lg, 99)))
    for name, counts in per_class.items():
        col = out.errors.setdefault(name, [0.0] * base)
        col.extend([0.0] * (base - len(col)))
        col.extend(float(_r(float(c) / width) or 0.0) for c in counts.tolist())
    for col in out.errors.values():
        col.extend([0.0] * (len(out.t) - len(col)))


def _append_gap(out: Series) -> None:
    for col in (out.t, out.offered, out.throughput, out.p50, out.p99, out.lag_p99):
        col.append(None)
    for ecol in out.errors.values():
        ecol.append(0.0)


def build_series(segments: list[Segment], offsets: dict[int, float], max_points: int = MAX_POINTS) -> Series:
    width = bucket_width(segments, max_points)
    out = Series(width_s=width)
    for seg in segments:
        segment_series(seg, offsets[seg.index], width, out)
    return out


def build_bands(segments: list[Segment], offsets: dict[int, float]) -> list[Band]:
    out = []
    for seg in segments:
        off = offsets[seg.index]
        for sp in seg.spans:
            out.append(
                Band(
                    start_s=off + sp.start_s,
                    hold_start_s=off + sp.hold_start_s,
                    end_s=off + sp.end_s,
                    target_rps=sp.stage.target_rps,
                    segment=seg.index,
                    stage=sp.index,
                    purpose=seg.purpose,
                )
            )
    return out


def window_latencies_s(rec: Records, start_s: float, end_s: float) -> F64:
    """Latencies of the rows due in [start_s, end_s): OK plus censored, as the stage metrics count them."""
    lo, hi = np.searchsorted(rec.intended, [start_s, end_s], side="left")
    part = rec.select(np.arange(lo, hi))
    lat = part.latency_s()[part.latency_mask()]
    return np.sort(lat[~np.isnan(lat)])


def spectrum_points(sorted_s: F64, points: int = SPECTRUM_POINTS) -> tuple[list[float], list[float]]:
    """(1 / (1 - p), latency ms) on a log grid from p = 0 up to the maximum (plotted at x = n)."""
    n = len(sorted_s)
    if n == 0:
        return [], []
    if n == 1:
        v = float(sorted_s[0]) * 1000
        return [1.0], [v]
    xs = np.unique(np.geomspace(1.0, float(n), points))
    ps = 100.0 * (1.0 - 1.0 / xs)
    ys = np.percentile(sorted_s, ps) * 1000
    ys[-1] = float(sorted_s[-1]) * 1000  # the last point is the exact maximum
    return [float(_r(float(x), 5) or 0.0) for x in xs], [float(_r(float(y)) or 0.0) for y in ys]


def build_spectra(results: Results, stages: list[dict[str, Any]]) -> list[Spectrum]:
    segs = {s.index: s for s in results.segments}
    out = []
    for number, st in enumerate(stages, start=1):
        seg = segs.get(int(st["segment"]))
        if seg is None:
            continue
        lat = window_latencies_s(seg.records, float(st["window_start_s"]), float(st["window_end_s"]))
        x, y = spectrum_points(lat)
        if not x:
            continue
        out.append(
            Spectrum(
                segment=seg.index,
                stage=int(st["index"]),
                number=number,
                target_rps=float(st["target_rps"]),
                verdict=str(st.get("verdict", "")),
                count=len(lat),
                x=x,
                y_ms=y,
            )
        )
    return out


def build_server_series(
    results: Results, offsets: dict[int, float], max_points: int = 2 * MAX_POINTS
) -> ServerSeries | None:
    """CPU cores and RSS of the server's process tree per sample interval, placed on the report's
    timeline segment by segment (None: fewer than two samples).  Long runs use every k-th sample, so
    an interval's cores are still exact (ΔCPU / Δwall over the wider interval)."""
    obs = results.observed
    if obs is None or obs.n_samples < 2:
        return None
    s = obs.samples
    k = max(1, math.ceil(obs.n_samples / max_points))
    idx = np.arange(0, obs.n_samples, k)
    mono, unix = s["mono_s"][idx], s["unix_s"][idx]
    cpu = s["cpu_user_s"][idx] + s["cpu_system_s"][idx]
    dt = np.diff(mono)
    with np.errstate(divide="ignore", invalid="ignore"):
        cores = np.where(dt > 0, np.diff(cpu) / dt, np.nan)
    mid_mono, mid_unix = 0.5 * (mono[1:] + mono[:-1]), 0.5 * (unix[1:] + unix[:-1])
    rss = s["rss_bytes"][idx][1:] / 2**20
    head = results.header.get("observe") or {}
    allowed = head.get("allowed_cores")
    out = ServerSeries(allowed_cores=float(allowed) if isinstance(allowed, (int, float)) else None)
    for seg in results.segments:
        t = run_clock(seg, mid_mono, mid_unix)
        sel = np.flatnonzero((t >= 0) & (t <= _data_end(seg)))
        if not len(sel):
            continue
        if out.t:
            out.t.append(None)
            out.cores.append(None)
            out.rss_mb.append(None)
        off = offsets[seg.index]
        out.t.extend(_r(float(off + t[i]), 6) for i in sel)
        out.cores.extend(_r(float(cores[i])) for i in sel)
        out.rss_mb.extend(_r(float(rss[i])) for i in sel)
    return out if out.t else None


def folder_labels(dirs: list[Path]) -> list[str]:
    """Folder names as legend labels; parents are added only to tell equal names apart."""
    resolved = [d.resolve() for d in dirs]
    for depth in range(1, 4):
        labels = ["/".join(p.parts[-depth:]) or str(p) for p in resolved]
        if len(set(labels)) == len(labels):
            return labels
    return [f"{lab} ({i + 1})" for i, lab in enumerate("/".join(p.parts[-3:]) for p in resolved)]


def load_folder(path: Path, label: str, colour: str, max_points: int = MAX_POINTS) -> FolderData:
    results = load_results(path)
    summary = build_summary(results)
    offsets = timeline_offsets(results.segments)
    return FolderData(
        path=path,
        label=label,
        colour=colour,
        results=results,
        summary=summary,
        offsets=offsets,
        bands=build_bands(results.segments, offsets),
        series=build_series(results.segments, offsets, max_points),
        spectra=build_spectra(results, summary["stages"]),
        server=build_server_series(results, offsets),
    )
