"""Every JSON document satpoint writes: one envelope, one typed model per document, one way to write and read.

Each document starts with ``{schema_version, tool_version, kind}``: the version of its shape (fields are added,
never renamed; a shape that changes otherwise gets a new ``schema_version``), the satpoint that wrote it, and
what it is.  ``results.json`` and ``summary.json`` keep the ``kind`` they always had (the command that wrote the
folder: ``run`` or ``find``; ``coldstart`` for a cold-start summary); every other document names itself.

A writer builds the document's model and dumps it (``write_document``), so what is written always has the
fields and types of its model, and ``schemas/*.json`` (``reports.files.schemas``) is generated from the same
models.  The models accept fields they do not know, so a document written by a newer satpoint still reads.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from satpoint._version import SCHEMA_VERSION, __version__

_CONFIG = ConfigDict(extra="allow")


class Document(BaseModel):
    """The envelope every JSON document carries."""

    model_config = _CONFIG
    #: the document's file name and the one ``kind`` it has (empty: several, see the subclass)
    FILE: ClassVar[str] = ""
    KIND: ClassVar[str] = ""
    #: the version of the document's shape this satpoint writes and reads
    VERSION: ClassVar[int] = 1

    schema_version: int = Field(description="the version of this document's shape (fields are added, never renamed)")
    tool_version: str = Field(description="the satpoint that wrote it")
    kind: str = Field(description="what the document is")

    @classmethod
    def envelope(cls, kind: str | None = None) -> dict[str, Any]:
        """The three fields a new document of this class starts with."""
        return {"schema_version": cls.VERSION, "tool_version": __version__, "kind": kind or cls.KIND}


class VersionError(ValueError):
    """A document written in a shape this satpoint does not read."""


def check_version(doc: dict[str, Any], path: Path, reads: int, version_key: str = "schema_version") -> None:
    """Refuse a document whose shape this satpoint does not read, naming the satpoint that wrote it."""
    got = doc.get(version_key)
    if got == reads:
        return
    writer = doc.get("tool_version") or doc.get("satpoint_version")
    by = f"written by satpoint {writer}, " if writer else "written by an unknown satpoint, "
    raise VersionError(
        f"{path}: {by}{version_key} {got}; this satpoint ({__version__}) reads {reads}"
        + (": upgrade satpoint to read it" if isinstance(got, int) and got > reads else "")
    )


def write_document(path: Path, doc: BaseModel, *, indent: int | None = 2) -> Path:
    """Write ``doc`` to ``path`` in one step (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        text = json.dumps(doc.model_dump(exclude_unset=True), indent=indent, default=str)
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return path


# -- results.json -------------------------------------------------------------------------------------------


class SegmentMeta(BaseModel):
    """One measured segment (``results.json`` ``segments[]``; ``running_segment`` lacks the last four)."""

    model_config = _CONFIG
    index: int
    purpose: str
    stages: list[dict[str, float]] = Field(description="target_rps, ramp_s, hold_s of each stage")
    start_rps: float = 0.0
    arrival: str
    seed: int
    started_unix: float = Field(description="the wall-clock (unix) time of the segment's run clock's zero")
    generator: dict[str, Any] = {}
    interrupted: bool = False
    stopped: str | None = None
    repeat: int = 0
    notes: list[str] = []
    records_file: str | None = Field(None, description="its rows (.npz), relative to the folder or absolute")
    requests: int | None = None


class ResultsDoc(Document):
    """``results.json``: the header of a results folder (``run``, ``find``) and its segments."""

    FILE: ClassVar[str] = "results.json"
    VERSION: ClassVar[int] = SCHEMA_VERSION
    created_unix: float
    host: dict[str, Any] = {}
    config: dict[str, Any]
    target: dict[str, Any]
    server: dict[str, Any] | None = None
    observe: dict[str, Any] | None = None
    flamegraph: dict[str, Any] | None = None
    trace: dict[str, Any] | None = Field(None, description="run --trace: the replayed trace")
    mix: dict[str, Any] | None = Field(None, description="a model mix")
    target_lost: dict[str, Any] | None = None
    relocated: dict[str, Any] | None = None
    segments: list[SegmentMeta] = []
    running_segment: SegmentMeta | None = None


# -- sweep.json ---------------------------------------------------------------------------------------------


class SweepMeasurement(BaseModel):
    """One measurement of a point (a ``find`` in ``dir``)."""

    model_config = _CONFIG
    point: str
    repeat: int
    phase: str
    dir: str
    status: str = Field(description="running, done, failed or interrupted")
    started_unix: float | None = None
    duration_s: float | None = None
    error: str | None = None
    figures: dict[str, Any] | None = None
    server_cores: float | None = None
    server: dict[str, Any] | None = None
    limits: dict[str, Any] | None = None


class SweepDoc(Document):
    """``sweep.json``: a sweep's configuration, grid, measurements and conclusions."""

    FILE: ClassVar[str] = "sweep.json"
    KIND: ClassVar[str] = "sweep"
    #: the version field of sweep.json before ``schema_version`` (same number); still written, not read
    sweep_version: int | None = Field(None, description="deprecated: same as schema_version")
    created_unix: float
    config: dict[str, Any]
    grid: list[dict[str, Any]]
    measurements: list[SweepMeasurement]
    estimate: dict[str, Any] | None = None
    artefact_quality: dict[str, Any] | None = None
    artefact_choice: dict[str, Any] | None = None
    objective: str | None = None
    points: list[dict[str, Any]] = []
    order: list[str] = []
    pareto_front: list[Any] = []
    best: dict[str, Any] = {}
    models_memory: dict[str, Any] | None = None
    recommendation: list[str] = []
    stopped: str | None = None
    resumed: list[float] | None = None
    duration_s: float | None = None


# -- compare.json -------------------------------------------------------------------------------------------


class CompareProtocol(BaseModel):
    model_config = _CONFIG
    saturation_rps: float | None = None
    max_throughput_rps: float | None = None
    precision_achieved: float | None = None
    generator_cpu_us_per_request: float | None = None
    latency_at: list[dict[str, Any]] = []
    stream: bool | None = None


class CompareDoc(Document):
    """``compare.json``: the same find over REST and gRPC, side by side (each in its own folder)."""

    FILE: ClassVar[str] = "compare.json"
    KIND: ClassVar[str] = "compare"
    protocols: dict[str, CompareProtocol]
    folders: dict[str, str] = Field({}, description="each protocol's results folder, relative to this one")


# -- coldstart: summary.json and coldstart.json ---------------------------------------------------------------


class ColdStartSummaryDoc(Document):
    """``summary.json`` of ``satpoint coldstart`` (``kind`` ``coldstart``; not a run's summary)."""

    FILE: ClassVar[str] = "summary.json"
    KIND: ClassVar[str] = "coldstart"
    satpoint_version: str | None = Field(None, description="deprecated: same as tool_version")
    target: dict[str, Any]
    warnings: list[str] = []
    server: dict[str, Any] | None = None
    options: dict[str, Any]
    coldstart: dict[str, Any]
    overcommit: list[dict[str, Any]] = []
    recommendation: dict[str, Any]
    note: str | None = None


class ColdStartDataDoc(Document):
    """``coldstart.json``: every repetition of ``satpoint coldstart`` and every overcommit run's counters."""

    FILE: ClassVar[str] = "coldstart.json"
    KIND: ClassVar[str] = "coldstart_data"
    repetitions: list[dict[str, Any]]
    overcommit: list[dict[str, Any]] = []


# -- comparison.json (demo co), headroom.json (find --trace), pipeline.json (pipeline) -----------------------


class ComparisonDoc(Document):
    """``comparison.json`` of ``satpoint demo co``: the open and the closed loop against one server."""

    FILE: ClassVar[str] = "comparison.json"
    KIND: ClassVar[str] = "co_comparison"
    open_loop: dict[str, Any]
    closed_loop: dict[str, Any]
    open_over_closed: dict[str, float | None]
    rate_rps: float | None = None
    users: int | None = None
    think_ms: float | None = None
    duration_s: float | None = None
    pause_every_s: float | None = None
    pause_s: float | None = None
    slots: int | None = None
    service_ms: float | None = None
    open_dir: str | None = None
    closed_dir: str | None = None
    report: str | None = None
    notes: list[str] = []


class HeadroomDoc(Document):
    """``headroom.json`` of ``find --trace``: how far the recorded trace can be sped up (the summary.json beside
    it holds the same block as ``trace_headroom``)."""

    FILE: ClassVar[str] = "headroom.json"
    KIND: ClassVar[str] = "headroom"
    speed: float | None = None
    bracket: list[float | None]
    precision: float
    ended: str | None = None
    lower_bound: bool
    confirmed: bool | None = None
    trace_peak_rps_per_minute: float
    trace_peak_rps_per_second: float | None = None
    capacity_rps: float | None = None
    margin: float
    target_rps_per_replica: float | None = None
    replicas_for_peak: int | None = None
    sizing_withheld: str | None = None
    replays: list[dict[str, Any]]
    latency_at: list[dict[str, Any]] = []
    slice_span_s: float | None = None
    slice_requests: int | None = None
    dropped: Any = None
    source_note: str | None = None
    answer_folder: str | None = None
    slo_ms: dict[str, float] | None = None


class HeadroomSummaryDoc(Document):
    """``summary.json`` of a ``find --trace`` that found no stable speed (``kind`` headroom): the headroom block
    alone. With an answer, the folder's summary.json is its replay's run summary plus ``trace_headroom``."""

    FILE: ClassVar[str] = "summary.json"
    KIND: ClassVar[str] = "headroom"
    trace_headroom: dict[str, Any]


class PipelineDoc(Document):
    """``pipeline.json`` of ``satpoint pipeline``: each step's capacity, the prediction and the measured pipeline."""

    FILE: ClassVar[str] = "pipeline.json"
    KIND: ClassVar[str] = "pipeline"
    name: str | None = None
    called_as: str | None = None
    dag: dict[str, Any]
    steps: list[dict[str, Any]]
    predicted_saturation_rps: float | None = None
    prediction: dict[str, Any] | None = None
    bottleneck: str | list[str] | None = None
    saturation_rps: float | None = None
    lower_bound: bool | None = None
    measured_over_predicted: float | None = None
    critical_path: dict[str, Any] | None = None
    overhead_ms: dict[str, float | None] | None = None
    sizing: dict[str, Any] | None = None


#: schema name -> model, for the documents defined here (``reports.files.schemas`` adds summary and diff)
DOCUMENTS: dict[str, type[Document]] = {
    "results": ResultsDoc,
    "sweep": SweepDoc,
    "compare": CompareDoc,
    "coldstart-summary": ColdStartSummaryDoc,
    "coldstart-data": ColdStartDataDoc,
    "comparison": ComparisonDoc,
    "headroom": HeadroomDoc,
    "headroom-summary": HeadroomSummaryDoc,
    "pipeline": PipelineDoc,
}
