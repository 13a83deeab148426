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
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from satpoint._version import SCHEMA_VERSION, __version__
from satpoint.config import RunConfig
from satpoint.metrics.checkpoint import recover_segment_rows, remove_shard_files
from satpoint.metrics.observed import Observations, read_observations
from satpoint.metrics.records import Records
from satpoint.plan import Stage, StageSpan, spans

RESULTS_FILE = "results.json"


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

    @property
    def spans(self) -> list[StageSpan]:
        return spans(self.stages)

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
            "records_file": f"segment-{self.index:03d}.npz",
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


def write_header(out_dir: Path, results: Results) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = dict(results.header)
    doc["segments"] = [s.meta() for s in results.segments]
    if results.running is not None:
        doc["running_segment"] = results.running
    tmp = out_dir / (RESULTS_FILE + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    tmp.replace(out_dir / RESULTS_FILE)


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
    out_dir.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out_dir / f"segment-{seg.index:03d}.npz", **seg.records.columns())  # type: ignore[arg-type, unused-ignore]
    write_header(out_dir, results)
    remove_shard_files(out_dir, seg.index)


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
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {doc.get('schema_version')} is not {SCHEMA_VERSION}")
    seg_docs = doc.pop("segments", [])
    running = doc.pop("running_segment", None)
    results = Results(header=doc)
    for sd in seg_docs:
        with np.load(out_dir / sd["records_file"]) as cols:
            rec = Records.from_columns({k: cols[k] for k in cols.files})
        results.segments.append(_segment(sd, rec))
    if isinstance(running, dict):
        seg = recover_running(
            out_dir, running, "the run was cut off during this segment: rows rebuilt from its checkpoints"
        )
        if seg is not None:
            results.segments.append(seg)
    results.observed = read_observations(out_dir)
    return results
