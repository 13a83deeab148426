"""Triton's statistics endpoint (``GET /v2/models/M/stats``) as samples like a Prometheus scrape's, so the
observer records it beside the metrics endpoints and ``analysis.server.server_side`` takes deltas per stage.

Each model version's cumulative figures become ``triton_stats_<phase>_ns`` / ``triton_stats_<phase>_count``
(phases: success, fail, queue, compute_input, compute_infer, compute_output) and
``triton_stats_inference_count`` / ``triton_stats_execution_count`` (their ratio over a stage is the batch
size Triton's scheduler achieved), labelled with ``model`` and ``version``.
"""

from __future__ import annotations

import json
from typing import Any

from satpoint.metrics.observed import PromSample

PREFIX = "triton_stats_"
PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


def is_stats_url(url: str) -> bool:
    """Whether ``url`` is a Triton statistics endpoint (``…/v2/models/M[/versions/V]/stats``)."""
    path = url.split("?", 1)[0].rstrip("/")
    return path.endswith("/stats") and "/v2/models/" in path


def stats_samples(doc: Any) -> list[PromSample]:
    """The samples of one statistics answer; a ``ValueError`` when it is not one."""
    if not isinstance(doc, dict) or not isinstance(doc.get("model_stats"), list):
        raise ValueError("not a Triton statistics answer (no model_stats list)")
    out: list[PromSample] = []
    for m in doc["model_stats"]:
        labels = {"model": str(m.get("name", "")), "version": str(m.get("version", ""))}
        out.append((PREFIX + "inference_count", labels, float(m.get("inference_count", 0))))
        out.append((PREFIX + "execution_count", labels, float(m.get("execution_count", 0))))
        phases = m.get("inference_stats") or {}
        for phase in PHASES:
            figures = phases.get(phase) or {}
            out.append((f"{PREFIX}{phase}_count", labels, float(figures.get("count", 0))))
            out.append((f"{PREFIX}{phase}_ns", labels, float(figures.get("ns", 0))))
    return out


def parse_stats(text: str) -> list[PromSample]:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f"Triton statistics are not JSON: {e}") from None
    return stats_samples(doc)
