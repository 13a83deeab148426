"""satpoint: open-loop load testing and saturation search for Open Inference Protocol servers.

The public API (docs/reference/python-api.md)::

    import satpoint

    with satpoint.SimServer(slots=4, service_ms=10) as sim:          # capacity 400 rps
        result = satpoint.run(sim.target(), ["200:1:4"], out="results/demo")
        print(result.summary.stages[0].verdict)                       # "stable"

Names are imported on first use, so ``import satpoint`` stays cheap and has no side effects.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from satpoint._version import SCHEMA_VERSION, __version__

#: public name -> module that defines it
_EXPORTS = {
    # targets
    "Target": "satpoint.endpoints.spec",
    "ModelMix": "satpoint.payloads.mix",
    "SimServer": "satpoint.servers.sim.process",
    "EmbeddedMLServer": "satpoint.api",
    "MLServerSettings": "satpoint.servers.mlserver.server",
    # plans and options
    "Stage": "satpoint.plan",
    "LoadOptions": "satpoint.config",
    "FindOptions": "satpoint.config",
    "ObserveOptions": "satpoint.config",
    "RayOptions": "satpoint.config",
    "FlamegraphOptions": "satpoint.config",
    "VerdictRules": "satpoint.config",
    "RunConfig": "satpoint.config",
    # entry points
    "run": "satpoint.api",
    "run_closed_loop": "satpoint.api",
    "find": "satpoint.api",
    "load": "satpoint.api",
    "report": "satpoint.api",
    "compare": "satpoint.experiments.compare",
    "CompareConfig": "satpoint.experiments.compare",
    "co_demo": "satpoint.experiments.co_demo",
    "CoDemoConfig": "satpoint.experiments.co_demo",
    "sweep": "satpoint.experiments.sweep",
    "SweepConfig": "satpoint.experiments.sweep",
    "BaseServer": "satpoint.experiments.sweep_servers",
    # results
    "RunResult": "satpoint.api",
    "FindResult": "satpoint.api",
    "LoadedResults": "satpoint.api",
    "RunSummary": "satpoint.analysis.summary.model",
    "FindSummary": "satpoint.analysis.summary.model",
    "StageResult": "satpoint.analysis.summary.model",
    "Verdict": "satpoint.analysis.search.verdicts",
    "Outcome": "satpoint.metrics.records",
    # progress events
    "Event": "satpoint.procedures.progress",
    "SegmentStarted": "satpoint.procedures.progress",
    "Snapshot": "satpoint.procedures.progress",
    "SegmentFinished": "satpoint.procedures.progress",
    "Message": "satpoint.procedures.progress",
    # errors
    "SatpointError": "satpoint.errors",
    "TargetUnreachable": "satpoint.errors",
    "PayloadError": "satpoint.errors",
    "PlanError": "satpoint.plan",
}
#: names whose attribute in the defining module differs from the public name
_RENAMED = {"compare": "run_compare", "co_demo": "run_co_demo", "sweep": "run_sweep"}

__all__ = [
    "SCHEMA_VERSION",
    "BaseServer",
    "CoDemoConfig",
    "CompareConfig",
    "EmbeddedMLServer",
    "Event",
    "FindOptions",
    "FindResult",
    "FindSummary",
    "FlamegraphOptions",
    "LoadOptions",
    "LoadedResults",
    "MLServerSettings",
    "Message",
    "ModelMix",
    "ObserveOptions",
    "Outcome",
    "PayloadError",
    "PlanError",
    "RayOptions",
    "RunConfig",
    "RunResult",
    "RunSummary",
    "SatpointError",
    "SegmentFinished",
    "SegmentStarted",
    "SimServer",
    "Snapshot",
    "Stage",
    "StageResult",
    "SweepConfig",
    "Target",
    "TargetUnreachable",
    "Verdict",
    "VerdictRules",
    "__version__",
    "co_demo",
    "compare",
    "find",
    "load",
    "report",
    "run",
    "run_closed_loop",
    "sweep",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'satpoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:
    from satpoint.analysis.search.verdicts import Verdict
    from satpoint.analysis.summary.model import FindSummary, RunSummary, StageResult
    from satpoint.api import (
        EmbeddedMLServer,
        FindResult,
        LoadedResults,
        RunResult,
        find,
        load,
        report,
        run,
        run_closed_loop,
    )
    from satpoint.config import (
        FindOptions,
        FlamegraphOptions,
        LoadOptions,
        ObserveOptions,
        RayOptions,
        RunConfig,
        VerdictRules,
    )
    from satpoint.endpoints.spec import Target
    from satpoint.errors import PayloadError, SatpointError, TargetUnreachable
    from satpoint.experiments.co_demo import CoDemoConfig
    from satpoint.experiments.co_demo import run_co_demo as co_demo
    from satpoint.experiments.compare import CompareConfig
    from satpoint.experiments.compare import run_compare as compare
    from satpoint.experiments.sweep import SweepConfig
    from satpoint.experiments.sweep import run_sweep as sweep
    from satpoint.experiments.sweep_servers import BaseServer
    from satpoint.metrics.records import Outcome
    from satpoint.payloads.mix import ModelMix
    from satpoint.plan import PlanError, Stage
    from satpoint.procedures.progress import Event, Message, SegmentFinished, SegmentStarted, Snapshot
    from satpoint.servers.mlserver.server import MLServerSettings
    from satpoint.servers.sim.process import SimServer
