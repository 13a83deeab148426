"""The quality of each sweep point's artefact, computed once before the first measurement.

For an embedded-MLServer sweep over demo-model artefacts (the ``runtime`` and ``demo_model`` knobs; a
point serving the user's ``model_dir`` has none), every distinct artefact is run offline on the held-out
split (``servers.artefact_quality``) and the figures are kept per point in ``sweep.json``
(``artefact_quality``, shown as each point's ``quality``). A sweep of one plain ``sklearn`` artefact
computes nothing. A failure is a warning: the sweep measures speed all the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from satpoint.analysis.sweep_space import Point
from satpoint.experiments.sweep_config import SweepConfig
from satpoint.progress import OnEvent, say

__all__ = ["point_artefacts", "sweep_quality"]


def point_artefacts(cfg: SweepConfig, points: Sequence[Point]) -> dict[str, tuple[str, str]]:
    """Point id → (demo model, runtime) for the points that serve a demo model on the embedded MLServer."""
    from satpoint.servers.mlserver_settings import DEFAULT_DEMO_MODEL, DEFAULT_RUNTIME

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


def sweep_quality(cfg: SweepConfig, points: Sequence[Point], on_event: OnEvent | None = None) -> dict[str, Any]:
    """Point id → its artefact's quality figures (``{"error": …}`` when they could not be computed);
    empty when the sweep is not over artefacts."""
    artefacts = point_artefacts(cfg, points)
    distinct = set(artefacts.values())
    if not distinct or (len(distinct) == 1 and next(iter(distinct))[1] == "sklearn"):
        return {}
    say(on_event, f"quality of {len(distinct)} artefact(s) on the demo data's held-out split (run offline, once each)")
    from satpoint.servers.artefact_quality import artefact_quality

    try:
        figures = artefact_quality(sorted(distinct))
    except (ValueError, RuntimeError, ImportError, OSError) as e:
        say(on_event, f"WARNING: the artefacts' quality was not measured: {e}", "warning")
        return {pid: {"error": str(e)} for pid in artefacts}
    return {pid: figures[a] for pid, a in artefacts.items()}
