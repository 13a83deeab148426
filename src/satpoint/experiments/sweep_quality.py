"""The quality of each sweep point's artefact, computed once before the first measurement.

For an embedded-MLServer sweep over demo-model artefacts (the ``runtime`` and ``demo_model`` knobs; a
point serving the user's ``model_dir`` has none), every distinct artefact is run offline on the held-out
split (``servers.artefacts.quality``) and the figures are kept per point in ``sweep.json``
(``artefact_quality``, shown as each point's ``quality``). A sweep of one plain ``sklearn`` artefact
computes nothing. A failure is a warning: the sweep measures speed all the same.

With ``--eval-data FILE`` the points serve the user's model folders instead: each distinct folder (and
``--reference-model-dir``) is run offline on FILE's requests through its own MLServer runtime
(``servers.mlserver.folder_quality``), with the same figures per point. There a failure (the file's requests do not
fit the model) stops the sweep before any server starts: the user asked for the comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from satpoint.analysis.sweep.space import Point
from satpoint.experiments.sweep_config import SweepConfig
from satpoint.procedures.progress import OnEvent, say

__all__ = ["point_artefacts", "point_folders", "sweep_quality"]


def point_artefacts(cfg: SweepConfig, points: Sequence[Point]) -> dict[str, tuple[str, str]]:
    """Point id → (demo model, runtime) for the points that serve a demo model on the embedded MLServer."""
    from satpoint.servers.mlserver.settings import DEFAULT_DEMO_MODEL, DEFAULT_RUNTIME

    base = cfg.server
    if base.kind != "mlserver":
        return {}
    out: dict[str, tuple[str, str]] = {}
    for p in points:
        v = p.values
        if v.get("model_dir", base.model_dir) is not None:
            continue
        name = str(v.get("demo_model", base.demo_model or DEFAULT_DEMO_MODEL))
        out[p.id] = (name, str(v.get("runtime", base.runtime or DEFAULT_RUNTIME)))
    return out


def point_folders(cfg: SweepConfig, points: Sequence[Point]) -> dict[str, str]:
    """Point id → the model folder it serves (``model_dir`` knob or ``--model-dir``), in grid order."""
    if cfg.server.kind != "mlserver":
        return {}
    out: dict[str, str] = {}
    for p in points:
        folder = p.values.get("model_dir", cfg.server.model_dir)
        if folder is not None:
            out[p.id] = str(folder)
    return out


def sweep_quality(cfg: SweepConfig, points: Sequence[Point], on_event: OnEvent | None = None) -> dict[str, Any]:
    """Point id → its artefact's quality figures (``{"error": …}`` when they could not be computed);
    empty when the sweep is not over artefacts."""
    if cfg.eval_data is not None:
        from satpoint.servers.mlserver.folder_quality import variant_quality
        from satpoint.servers.mlserver.settings import DEFAULT_RUNTIME

        folders = point_folders(cfg, points)
        by_id = {p.id: p for p in points}
        variants = {  # a runtime (onnx, onnx-int8, openvino) serves the folder's ONNX model as satpoint does
            pid: (f, str(by_id[pid].values.get("runtime", cfg.server.runtime or DEFAULT_RUNTIME)))
            for pid, f in folders.items()
        }
        judged = list(dict.fromkeys(variants.values()))
        ref = cfg.reference_model_dir or (judged[0][0] if judged else None)
        say(
            on_event,
            f"quality of {len(judged)} model folder artefact(s) on --eval-data {cfg.eval_data} against {ref} "
            "(run offline through each folder's runtime, once each)",
        )
        by_variant = variant_quality(judged, cfg.eval_data, cfg.reference_model_dir)
        return {pid: by_variant[v] for pid, v in variants.items()}
    artefacts = point_artefacts(cfg, points)
    distinct = set(artefacts.values())
    if not distinct or (len(distinct) == 1 and next(iter(distinct))[1] == "sklearn"):
        return {}
    say(on_event, f"quality of {len(distinct)} artefact(s) on the demo data's held-out split (run offline, once each)")
    from satpoint.servers.artefacts.quality import artefact_quality

    try:
        figures = artefact_quality(sorted(distinct))
    except (ValueError, RuntimeError, ImportError, OSError) as e:
        say(on_event, f"WARNING: the artefacts' quality was not measured: {e}", "warning")
        return {pid: {"error": str(e)} for pid in artefacts}
    return {pid: figures[a] for pid, a in artefacts.items()}
