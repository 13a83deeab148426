"""The versioned results folder: enough to recompute every figure offline.

Layout::

    results.json        header (schema, versions, host, config, target, server) + one entry per segment
    segment-000.npz     the per-request rows of segment 0 (see Records), compressed
    ...                 (a ``find`` runs several monotonic segments: staircase, refinements)
    segment-001.shard-0.rows   while segment 1 runs: the rows checkpointed so far (``metrics.checkpoint``)

Each segment is written as soon as it ends, so an error or Ctrl-C later keeps what was measured.
While a segment runs, ``results.json`` describes it under ``running_segment`` and every generator
process appends its rows to a checkpoint file about once a second; when the segment ends its ``.npz``
replaces them.  A folder whose run was cut off (``kill -9``, a crash, a full disk) still loads: the
running segment is rebuilt from its checkpoints and marked interrupted.

When the folder refuses a write (a full disk, no permission), nothing measured is dropped: the write and
every later one go to a new folder in ``$TMPDIR`` (``Results.rescue_dir``), a complete results folder
whose ``results.json`` names the segments the first folder kept by their absolute paths; the header's
``relocated`` block says where and why, and the first folder's ``results.json`` is still updated when it
can be.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import platform
import socket
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from satpoint._version import SCHEMA_VERSION, __version__
from satpoint.config import RunConfig
from satpoint.metrics.checkpoint import recover_segment_rows, remove_shard_files
from satpoint.metrics.documents import ResultsDoc, check_version
from satpoint.metrics.observed import Observations, read_observations
from satpoint.metrics.records import Records
from satpoint.plan import Stage, StageSpan, spans

RESULTS_FILE = "results.json"


def default_out(kind: str) -> Path:
    """Where a command writes when given no ``--out``: ``results/KIND-YYYYmmdd-HHMMSS`` in the current
    directory (local time)."""
    return Path("results") / f"{kind}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"


@dataclass
class Segment:
    index: int
    purpose: str  # "run", "staircase", "refine", "closed_loop", ...
    stages: list[Stage]
    arrival: str
    seed: int
    started_unix: float
    records: Records
    generator: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    start_rps: float = 0.0  # the first ramp starts from this rate (a sequence continued from a previous one)
    stopped: str | None = None  # None (ran to the end), "interrupted" (user) or "overload" (clearly saturated)
    repeat: int = 0  # which of ``find --repeats`` searches measured it
    saved_in: Path | None = None  # the folder of its rows file when not the results folder (see ``rescue``)

    @property
    def records_name(self) -> str:
        return f"segment-{self.index:03d}.npz"

    @property
    def spans(self) -> list[StageSpan]:
        # a recorded segment is what ran: falling targets (``find --hysteresis``) were allowed when it was
        # planned, and reading it does not judge the plan again
        return spans(self.stages, descending=True)

    def running_meta(self) -> dict[str, Any]:
        """What ``results.json`` says of a segment while it runs (no rows file yet)."""
        meta = self.meta()
        for key in ("records_file", "requests", "interrupted", "stopped"):
            meta.pop(key)
        return meta

    def meta(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "purpose": self.purpose,
            "stages": [{"target_rps": s.target_rps, "ramp_s": s.ramp_s, "hold_s": s.hold_s} for s in self.stages],
            "start_rps": self.start_rps,
            "arrival": self.arrival,
            "seed": self.seed,
            "started_unix": self.started_unix,
            "generator": self.generator,
            "interrupted": self.interrupted,
            "stopped": self.stopped,
            "repeat": self.repeat,
            "notes": self.notes,
            "records_file": self.records_name,
            "requests": len(self.records),
        }


@dataclass
class Results:
    header: dict[str, Any]
    segments: list[Segment] = field(default_factory=list)
    #: the segment being measured (rows in checkpoint files until it ends), as ``running_meta`` gives it
    running: dict[str, Any] | None = None
    #: what the observer saw of the server (``server-samples.csv``, ``server-metrics.jsonl``), if anything
    observed: Observations | None = None
    #: where every write goes once the results folder refused one (None: the results folder itself)
    rescue_dir: Path | None = None

    @property
    def kind(self) -> str:
        return str(self.header.get("kind", "run"))

    @property
    def config(self) -> RunConfig:
        """The run's configuration as its header records it."""
        return RunConfig.from_header(self.header)

    @config.setter
    def config(self, cfg: RunConfig) -> None:
        self.header["config"] = cfg.to_header()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Host and versions, for the results header."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "versions": {d: _version(d) for d in ("satpoint", "numpy", "uvloop", "httptools", "grpcio")},
    }


def new_header(config: RunConfig, target: dict[str, Any], created_unix: float) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "kind": config.kind,
        "created_unix": created_unix,
        "host": environment(),
        "config": config.to_header(),
        "target": target,
    }


#: the header key that says the results moved to ``$TMPDIR`` (``asked_dir``, ``rescue_dir``, ``error``, ``segments``)
RELOCATED_KEY = "relocated"


def write_header(out_dir: Path, results: Results, rescue_ok: bool = True) -> None:
    """Write ``results.json`` (to the rescue folder once there is one, and then to ``out_dir`` too when it
    can be); a folder that refuses it moves the results to a rescue folder (``rescue``), unless
    ``rescue_ok`` is False (the first header, before anything is measured: the error is raised)."""
    if results.rescue_dir is None:
        try:
            _write_doc(out_dir, results, out_dir)
            return
        except OSError as e:
            if not rescue_ok:
                raise
            rescue(out_dir, results, e, RESULTS_FILE)
    assert results.rescue_dir is not None
    _write_doc(results.rescue_dir, results, out_dir)
    with contextlib.suppress(OSError):  # the first folder still points at everything, when it has room
        _write_doc(out_dir, results, out_dir)


def _write_doc(folder: Path, results: Results, home: Path) -> None:
    """``results.json`` in ``folder``: rows files elsewhere than ``folder`` by their absolute path
    (``home`` is the results folder, where segments without ``saved_in`` are)."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = dict(results.header)
    segments = []
    for seg in results.segments:
        meta = seg.meta()
        where = seg.saved_in or home
        if Path(os.path.abspath(where)) != Path(os.path.abspath(folder)):
            meta["records_file"] = os.path.abspath(where / seg.records_name)
        segments.append(meta)
    doc["segments"] = segments
    if results.running is not None:
        doc["running_segment"] = results.running
    tmp = folder / (RESULTS_FILE + ".tmp")
    try:
        # through its model: what is written has the fields and types of results.schema.json
        tmp.write_text(json.dumps(ResultsDoc.model_validate(doc).model_dump(exclude_unset=True), indent=2, default=str))
        tmp.replace(folder / RESULTS_FILE)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def rescue(out_dir: Path, results: Results, error: OSError, what: str) -> Path:
    """Move the results' writes to a new folder in ``$TMPDIR`` (once; later calls return it), recording in
    the header where and why."""
    if results.rescue_dir is None:
        folder = Path(tempfile.mkdtemp(prefix=f"satpoint-{Path(os.path.abspath(out_dir)).name}-"))
        results.rescue_dir = folder
        results.header[RELOCATED_KEY] = {
            "asked_dir": os.path.abspath(out_dir),
            "rescue_dir": str(folder),
            "error": f"{what}: {error.strerror or error}",
            "segments": [],
        }
    return results.rescue_dir


def relocation_warning(moved: dict[str, Any]) -> str:
    """The line that says the results moved to a rescue folder (the header's ``relocated`` block)."""
    return (
        f"the results could not be written to {moved.get('asked_dir')} ({moved.get('error')}): they are in "
        f"{moved.get('rescue_dir')}, a complete results folder (satpoint report {moved.get('rescue_dir')})"
    )


def start_segment(out_dir: Path, results: Results, seg: Segment) -> None:
    """Record in ``results.json`` that ``seg`` (no rows yet) is being measured, so a run cut off before it
    ends can be rebuilt from its checkpoints."""
    results.running = seg.running_meta()
    write_header(out_dir, results)


def append_segment(out_dir: Path, results: Results, seg: Segment) -> None:
    """Add a finished segment and write it (rows first, then the header that points to them, then the
    checkpoints it replaces are removed)."""
    results.segments.append(seg)
    if results.running is not None and results.running.get("index") == seg.index:
        results.running = None
    folder = results.rescue_dir or out_dir
    try:
        _save_rows(folder, seg)
    except OSError as e:  # a full disk, no permission: the rows go to the rescue folder
        if results.rescue_dir is not None:
            raise
        folder = rescue(out_dir, results, e, seg.records_name)
        _save_rows(folder, seg)
    if folder != out_dir:
        seg.saved_in = folder
        results.header[RELOCATED_KEY]["segments"].append(seg.index)
    write_header(out_dir, results)
    for where in {out_dir, folder}:  # the checkpoints it replaces (wherever they were written)
        with contextlib.suppress(OSError):
            remove_shard_files(where, seg.index)


def _save_rows(folder: Path, seg: Segment) -> None:
    """The rows as one compressed ``.npz``, built in memory and written in one go: written by ``np.savez``
    straight to a full disk, the zip's own ``close`` could fail too and its finaliser print a traceback."""
    path = folder / seg.records_name
    buf = io.BytesIO()
    np.savez_compressed(buf, **seg.records.columns())  # type: ignore[arg-type,unused-ignore]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_bytes(buf.getbuffer())
    except OSError:
        with contextlib.suppress(OSError):  # no torn file left behind
            path.unlink(missing_ok=True)
        raise


def abandon_segment(out_dir: Path, results: Results) -> None:
    """Forget the running segment (it failed before recording anything worth keeping)."""
    if results.running is not None:
        remove_shard_files(out_dir, int(results.running["index"]))
        results.running = None
        write_header(out_dir, results)


def recover_running(out_dir: Path, running: dict[str, Any], note: str) -> Segment | None:
    """The running segment rebuilt from its checkpoints (None if they hold no row), marked interrupted."""
    got = recover_segment_rows(out_dir, int(running["index"]))
    if got is None:
        return None
    rec, notes = got
    seg = _segment(running, rec)
    if seg.purpose == "closed_loop" and len(rec):
        # a closed loop's stage is its achieved rate over the time it ran (see engine.closed_loop)
        elapsed = max(float(np.nanmax(rec.intended)), 1e-3)
        seg.stages = [Stage(max(len(rec) / elapsed, 1e-6), 0.0, elapsed)]
    seg.interrupted = True
    seg.stopped = "interrupted"
    seg.notes = [*seg.notes, note, *notes]
    return seg


def _segment(sd: dict[str, Any], rec: Records) -> Segment:
    return Segment(
        index=int(sd["index"]),
        purpose=str(sd["purpose"]),
        stages=[Stage(float(s["target_rps"]), float(s["ramp_s"]), float(s["hold_s"])) for s in sd["stages"]],
        arrival=str(sd["arrival"]),
        seed=int(sd["seed"]),
        started_unix=float(sd["started_unix"]),
        records=rec,
        generator=dict(sd.get("generator", {})),
        interrupted=bool(sd.get("interrupted", False)),
        notes=list(sd.get("notes", [])),
        start_rps=float(sd.get("start_rps", 0.0)),
        stopped=sd.get("stopped"),
        repeat=int(sd.get("repeat", 0)),
    )


def load_results(out_dir: Path) -> Results:
    path = out_dir / RESULTS_FILE
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise FileNotFoundError(f"{out_dir} holds no readable {RESULTS_FILE}: {e.strerror or e}") from None
    check_version(doc, path, SCHEMA_VERSION)
    seg_docs = doc.pop("segments", [])
    running = doc.pop("running_segment", None)
    results = Results(header=doc)
    for sd in seg_docs:
        path = out_dir / sd["records_file"]  # a segment saved elsewhere (``rescue``) is named by its absolute path
        try:
            with np.load(path) as cols:
                rec = Records.from_columns({k: cols[k] for k in cols.files})
        except (zipfile.BadZipFile, EOFError) as e:
            raise zipfile.BadZipFile(f"{path} is damaged ({e}): it cannot be read") from None
        results.segments.append(_segment(sd, rec))
    if isinstance(running, dict):
        seg = recover_running(
            out_dir, running, "the run was cut off during this segment: rows rebuilt from its checkpoints"
        )
        if seg is not None:
            results.segments.append(seg)
    results.observed = read_observations(out_dir)
    return results
