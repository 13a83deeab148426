"""``find --pipeline``: the saturation point of a pipeline, step by step, against a server that serves it.

The method of Seldon's performance guide, in one call: every model a step calls is searched alone (``api.find``,
its request built from that model's own metadata), then the pipeline end to end; the steps' figures give the
prediction (``satpoint.pipeline.predict``: the least step capacity, the bottleneck, the critical path, the
sizing), and the end-to-end search says how close the pipeline comes to it.

Calls: each step's model by its name (with ``Seldon-Model: MODEL`` for a Seldon pipeline), the pipeline by
``called_as`` (default ``NAME.pipeline`` for Seldon, the ensemble's name for Triton; a chain needs it), with
``Seldon-Model: NAME.pipeline`` for Seldon.  Every model and the pipeline are checked (readiness, metadata, one
test request) before any load: one that is not served stops the whole command before anything starts.

Results: the end-to-end search's folder is ``out`` itself (a ``find`` folder like any other), each model's
search is ``out/steps/MODEL``, and the pipeline's figures are a ``pipeline`` block in ``out/summary.json``, also
written alone to ``out/pipeline.json`` (a ``satpoint report`` that rewrites ``summary.json`` keeps that one).
A model that two steps call serves both: its capacity is shared between them (each step: capacity / calls).
Latency for the critical path and the overhead: each search's lowest profiled rate (light load), p50 and p99;
a sum of percentiles is not the percentile of a sum, so the p99 overhead is a rough figure.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from satpoint import api
from satpoint.analysis.summary.model import FindSummary, parse_summary
from satpoint.config import FindOptions, LoadOptions
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.errors import ConfigError
from satpoint.metrics.documents import PipelineDoc, write_document
from satpoint.pipeline.dag import PipelineDag
from satpoint.pipeline.predict import critical_path, predict_capacity, size_pipeline
from satpoint.procedures.progress import OnEvent, say

SELDON_HEADER = "Seldon-Model"
PIPELINE_FILE = PipelineDoc.FILE


@dataclass(frozen=True)
class PipelineFindResult:
    """The ``pipeline`` block, the folder, each model's search (by model) and the end-to-end one (None when
    stopped before it)."""

    block: dict[str, Any]
    out_dir: Path
    steps: dict[str, api.FindResult]
    pipeline: api.FindResult | None


def called_as(dag: PipelineDag, name: str | None = None) -> str:
    """The model name the whole pipeline is called by (see the module's doc)."""
    if name:
        return name
    if dag.kind == "seldon":
        return f"{dag.name}.pipeline"
    if dag.kind == "triton":
        return dag.name
    raise ConfigError("--pipeline-model: a chain of --step models needs the name the whole pipeline is called by")


def _target(url: str, model: str, protocol: str, seldon: bool, options: Mapping[str, Any]) -> Target:
    extra = dict(options)
    headers = tuple(extra.pop("headers", ()))
    if seldon:
        headers = (*(h for h in headers if h[0].lower() != SELDON_HEADER.lower()), (SELDON_HEADER, model))
    return Target(url=url, model=model, protocol=protocol, headers=headers, **extra)


def find_pipeline(
    url: str,
    dag: PipelineDag,
    *,
    pipeline_model: str | None = None,
    protocol: str = "rest",
    seldon_headers: bool | None = None,
    target_options: Mapping[str, Any] | None = None,
    options: FindOptions | None = None,
    load: LoadOptions | None = None,
    target_rps: float | None = None,
    out: Path | str | None = None,
    html: bool = True,
    on_event: OnEvent | None = None,
    stop: threading.Event | None = None,
) -> PipelineFindResult:
    """Search each step's model alone, then the pipeline end to end, and predict from the steps (see the
    module's doc).  ``options`` and ``load`` are each search's; ``target_rps`` the sizing's target (default:
    ``options.peak_rps``, else the fastest step's per-replica target)."""
    opts = (options or FindOptions()).validate()
    name = called_as(dag, pipeline_model)
    seldon = dag.kind == "seldon" if seldon_headers is None else seldon_headers
    models = list(dict.fromkeys(s.model for s in dag.steps))
    extra = dict(target_options or {})
    targets = {m: _target(url, m, protocol, seldon, extra) for m in models}
    whole = _target(url, name, protocol, seldon, extra)
    for target in (*targets.values(), whole):  # every name served, before any load
        prepare(target)
    out_dir = Path(out) if out is not None else api.default_out("find")
    stop = stop or threading.Event()
    found: dict[str, api.FindResult] = {}
    for i, model in enumerate(models, 1):
        if stop.is_set():
            break
        say(on_event, f"pipeline {dag.name}: step model {model} alone ({i}/{len(models)})")
        found[model] = api.find(
            targets[model], options=opts, load=load, out=out_dir / "steps" / model, html=html,
            on_event=on_event, stop=stop,
        )  # fmt: skip
    end_to_end: api.FindResult | None = None
    if not stop.is_set():
        say(on_event, f"pipeline {dag.name}: the whole pipeline as {name}")
        end_to_end = api.find(whole, options=opts, load=load, out=out_dir, html=html, on_event=on_event, stop=stop)
    block = pipeline_block(
        dag,
        name,
        {m: r.summary for m, r in found.items()},
        end_to_end.summary if end_to_end else None,
        margin=opts.margin,
        target_rps=target_rps if target_rps is not None else opts.peak_rps,
    )
    _write_block(out_dir, block)
    return PipelineFindResult(block, out_dir, found, end_to_end)


def _light(summary: FindSummary) -> tuple[float | None, float | None]:
    """p50 and p99 (ms) at the search's lowest profiled rate."""
    if not summary.latency_at:
        return None, None
    lowest = min(summary.latency_at, key=lambda x: x.offered_rps)
    return lowest.latency_ms.p50, lowest.latency_ms.p99


def pipeline_block(
    dag: PipelineDag,
    name: str,
    steps: Mapping[str, FindSummary],
    whole: FindSummary | None,
    *,
    margin: float = 0.15,
    target_rps: float | None = None,
) -> dict[str, Any]:
    """The ``pipeline`` block of ``summary.json`` from each model's search (``steps``, by model) and the
    end-to-end one (``whole``); a pure function of the summaries."""
    calls = {m: sum(1 for s in dag.steps if s.model == m) for m in steps}
    capacity: dict[str, float] = {}
    lower: set[str] = set()
    latency: dict[str, tuple[float | None, float | None]] = {}
    rows: list[dict[str, Any]] = []
    for step in dag.steps:
        summary = steps.get(step.model)
        sat = summary.saturation_rps if summary is not None else None
        if summary is not None and sat is not None:
            capacity[step.name] = sat / calls[step.model]
            if summary.lower_bound:
                lower.add(step.name)
        latency[step.name] = _light(summary) if summary is not None else (None, None)
        rows.append({
            "step": step.name, "model": step.model, "saturation_rps": sat,
            "lower_bound": summary.lower_bound if summary is not None else None,
            "latency_ms": {"p50": latency[step.name][0], "p99": latency[step.name][1]},
            "folder": f"steps/{step.model}" if summary is not None else None,
        })  # fmt: skip
    block: dict[str, Any] = {
        "name": dag.name, "called_as": name, "dag": dag.to_dict(), "steps": rows,
        "predicted_saturation_rps": None, "prediction": None, "bottleneck": None,
        "saturation_rps": whole.saturation_rps if whole is not None else None,
        "lower_bound": whole.lower_bound if whole is not None else None,
        "measured_over_predicted": None, "critical_path": None, "overhead_ms": None, "sizing": None,
    }  # fmt: skip
    if len(capacity) == len(dag.steps):
        prediction = predict_capacity(dag, capacity, lower_bounds=lower)
        block.update(
            predicted_saturation_rps=prediction.saturation_rps,
            prediction=prediction.to_dict(),
            bottleneck=prediction.bottleneck,
            sizing=size_pipeline(dag, capacity, target_rps, margin=margin, lower_bounds=lower).to_dict(),
        )
        if block["saturation_rps"] is not None:
            block["measured_over_predicted"] = round(block["saturation_rps"] / prediction.saturation_rps, 4)
    p50_s = {n: v[0] / 1000.0 for n, v in latency.items() if v[0] is not None}
    if len(p50_s) == len(dag.steps):
        path = critical_path(dag, p50_s)
        p99 = [latency[n][1] for n in path.steps]
        path_ms: dict[str, float | None] = {
            "p50": round(path.latency_s * 1000, 3),
            "p99": round(sum(v for v in p99 if v is not None), 3) if None not in p99 else None,
        }
        block["critical_path"] = {"steps": list(path.steps), "latency_ms": path_ms}
        if whole is not None:
            e2e = dict(zip(("p50", "p99"), _light(whole), strict=True))
            block["overhead_ms"] = {
                k: round(e - p, 3) if (e := e2e[k]) is not None and (p := path_ms[k]) is not None else None
                for k in path_ms
            }
    return block


def _write_block(out_dir: Path, block: dict[str, Any]) -> None:
    write_document(out_dir / PIPELINE_FILE, PipelineDoc.model_validate({**PipelineDoc.envelope(), **block}))
    summary_path = out_dir / "summary.json"
    if summary_path.exists():
        doc = json.loads(summary_path.read_text())
        doc["pipeline"] = block
        write_document(summary_path, parse_summary(doc))
