"""A sweep's configuration: the grid, the server it runs on, the search per measurement, repeats and
objective, validated before anything starts and written to (and read back from) ``sweep.json``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from satpoint.analysis.search.thresholds import parse_slo
from satpoint.analysis.sweep.artefact_choice import DEFAULT_MAX_QUALITY_LOSS_PP
from satpoint.analysis.sweep.conclusions import OBJECTIVES, Objective
from satpoint.analysis.sweep.space import (
    SERVER_KINDS,
    Point,
    check_artefact_point,
    check_triton_point,
    grid,
    parse_set,
)
from satpoint.config import FindOptions, LoadOptions
from satpoint.endpoints.spec import Target
from satpoint.experiments.sweep_servers import BaseServer, point_limits
from satpoint.servers.embedded import MODEL_REPO_ON_TRITON
from satpoint.servers.limits.cgroups import ResourceLimits, check_available


@dataclass(frozen=True)
class SweepConfig:
    """A sweep: the grid (``sets``), the server it runs on, and how each point is measured and judged."""

    sets: tuple[str, ...]
    server: BaseServer = field(default_factory=BaseServer)
    repeats: int = 1
    remeasure_top: int = 3
    objective: Objective = "saturation"
    at_rps: float | None = None
    slo: tuple[str, ...] = ()
    max_error_rate: float = 0.01
    budget_s: float | None = None
    #: each measurement searches with ``find``'s precision and rules (only without its latency profile)
    find: FindOptions = field(
        default_factory=lambda: FindOptions(precision=0.05, profile=False, budget_s=240.0, budget_given=False)
    )
    load: LoadOptions = field(default_factory=lambda: LoadOptions(drain_s=5.0))
    #: the accuracy (percentage points, held-out split) an artefact may lose and still be recommended
    max_quality_loss_pp: float = DEFAULT_MAX_QUALITY_LOSS_PP
    #: a user's model folders judged on these requests (``servers.mlserver.folder_quality``), against this folder
    #: (None: the first point's)
    eval_data: str | None = None
    reference_model_dir: str | None = None
    #: the server's memory budget (MB): the largest model count that meets --slo within it is recommended
    server_memory_mb: float | None = None

    def points(self) -> list[Point]:
        return grid(parse_set(self.sets, self.server.kind, self.server.reconfigure))

    def validate(self) -> SweepConfig:
        if self.server.kind not in SERVER_KINDS:
            raise ValueError(f"server kind {self.server.kind!r}: choose one of {', '.join(SERVER_KINDS)}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective {self.objective!r}: choose one of {', '.join(OBJECTIVES)}")
        if self.objective == "p99" and self.at_rps is None:
            raise ValueError("the p99 objective compares points at one rate: give --at-rps")
        if self.objective == "slo" and not self.slo:
            raise ValueError("the slo objective needs --slo, e.g. --slo p99<50ms")
        if self.at_rps is not None and self.at_rps <= 0:
            raise ValueError("--at-rps must be > 0")
        if self.repeats < 1 or self.remeasure_top < 0:
            raise ValueError("repeats must be >= 1 and --remeasure-top >= 0")
        if self.budget_s is not None and self.budget_s <= 0:
            raise ValueError("--budget-s must be > 0")
        if not 0 <= self.max_quality_loss_pp <= 100:
            raise ValueError(f"--max-quality-loss is in percentage points, 0 to 100; got {self.max_quality_loss_pp:g}")
        if self.server_memory_mb is not None and not self.server_memory_mb > 0:
            raise ValueError(f"--server-memory-mb must be > 0, got {self.server_memory_mb:g}")
        if self.reference_model_dir is not None and self.eval_data is None:
            raise ValueError("--reference-model-dir is what --eval-data's answers are compared with: give --eval-data")
        self._check_served()
        if self.server.kind == "remote" and (self.server.url is None and self.server.grpc_url is None):
            raise ValueError("a remote sweep needs --url (and --grpc-url for gRPC) and --model")
        if self.server.kind == "remote" and self.server.model is None:
            raise ValueError("a remote sweep needs --model")
        if self.server.has_tls_options:
            self._validate_tls()
        parse_slo(list(self.slo))
        self.find.validate()
        self.load.validate()
        points = self.points()
        if self.server.kind != "remote":
            have = len(os.sched_getaffinity(0))
            too_many = sorted({int(n) for p in points if (n := p.values.get("server_cpus")) and int(n) > have})
            if too_many:
                raise ValueError(f"server_cpus={too_many[0]}: satpoint may use {have} CPUs on this machine")
        if self.server.kind == "mlserver":
            for p in points:  # an artefact that cannot be built (onnx-int8 or pruned:F without an MLP)
                check_artefact_point(p.values, self.server.demo_model, self.server.runtime, self.server.model_dir)
                self._check_models_point(p)
            limited = [point_limits(p.values) for p in points]
            wanted = ResourceLimits(
                cpu_cores=min((x["cpu_limit"] for x in limited if "cpu_limit" in x), default=None),
                memory_bytes=max((x["memory_limit"] for x in limited if "memory_limit" in x), default=None),
            )
            check_available(wanted)  # limits this machine cannot apply: refused before any server starts
        if self.eval_data is not None:
            self._validate_eval_data(points)
        if self.server.kind in ("triton", "remote"):
            for p in points:
                base_mbs = self.server.max_batch_size if self.server.kind == "triton" else None
                check_triton_point({"batch": self.server.batch, **p.values}, base_mbs)
        if self.server.kind == "remote":
            protos = {p.values.get("protocol", self.server.protocol) for p in points}
            if "grpc" in protos and self.server.grpc_url is None:
                raise ValueError("protocol=grpc on a remote server needs --grpc-url")
            if "rest" in protos and self.server.url is None:
                raise ValueError("protocol=rest on a remote server needs --url")
        return self

    def _check_served(self) -> None:
        """The model options each server kind takes: the MLServer's folders and runtimes on MLServer only,
        copies of the demo model (``--demo-models``) on either embedded server."""
        s = self.server
        if s.kind == "triton" and s.model_repo is not None:
            raise ValueError(MODEL_REPO_ON_TRITON)
        if s.kind != "mlserver" and (s.runtime or s.model_dir or s.model_repo):
            raise ValueError("--runtime/--model-dir/--model-repo describe the embedded MLServer")
        if s.kind not in ("mlserver", "triton") and s.demo_models is not None:
            raise ValueError("--demo-models describes an embedded server (--server mlserver or triton)")

    def _check_models_point(self, p: Point) -> None:
        """Copies of the demo model (``models``, ``--demo-models``) serve no model folder or repository."""
        s = self.server
        copies = p.values.get("models", s.demo_models)
        if copies is not None and (p.values.get("model_dir", s.model_dir) is not None or s.model_repo is not None):
            raise ValueError(
                f"{p.label}: models (copies of the demo model) excludes a model folder (model_dir, --model-dir, "
                "--model-repo)"
            )
        if s.model_repo is not None and p.values.get("model_dir", s.model_dir) is not None:
            raise ValueError("--model-repo serves a repository of model folders: no model_dir with it")

    def _validate_eval_data(self, points: list[Point]) -> None:
        """``--eval-data`` judges model folders on the embedded MLServer: every point serves one, the file
        reads as requests, the reference is a model folder."""
        from satpoint.servers.mlserver.folder_quality import read_eval_data
        from satpoint.servers.mlserver.settings import read_model_folder

        if self.server.kind != "mlserver" or any(
            p.values.get("model_dir", self.server.model_dir) is None for p in points
        ):
            raise ValueError(
                "--eval-data judges your model folders on the embedded MLServer (--model-dir or --set model_dir=…); "
                "the demo models are judged on their held-out split without it"
            )
        read_eval_data(self.eval_data or "")
        if self.reference_model_dir is not None:
            read_model_folder(Path(self.reference_model_dir))

    def _validate_tls(self) -> None:
        """TLS options describe a remote server's https:// or grpcs:// URL, and name files that exist."""
        tls_urls = [u for u in (self.server.url, self.server.grpc_url) if u and self.server.tls_fields(u)]
        if self.server.kind != "remote" or not tls_urls:
            raise ValueError("--ca-cert/--insecure/--client-cert/--client-key need an https:// or grpcs:// URL")
        for u in tls_urls:
            Target(u, self.server.model or "", **self.server.tls_fields(u)).validate()

    def to_dict(self) -> dict[str, Any]:
        f = self.find
        return {
            "sets": list(self.sets),
            "server": self.server.to_dict(),
            "repeats": self.repeats,
            "remeasure_top": self.remeasure_top,
            "objective": self.objective,
            "at_rps": self.at_rps,
            "slo": list(self.slo),
            "max_error_rate": self.max_error_rate,
            "budget_s": self.budget_s,
            "max_quality_loss_pp": self.max_quality_loss_pp,
            "eval_data": self.eval_data,
            "reference_model_dir": self.reference_model_dir,
            "server_memory_mb": self.server_memory_mb,
            "find": {k: getattr(f, k) for k in f.__dataclass_fields__},
            "load": self.load.describe(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], headers: tuple[tuple[str, str], ...] = ()) -> SweepConfig:
        """The configuration ``sweep.json`` recorded (header values are not recorded: pass them again)."""
        fkw = {k: v for k, v in (d.get("find") or {}).items() if k in FindOptions.__dataclass_fields__}
        fkw.setdefault("budget_given", False)  # a sweep's finds plan from their budget unless it says otherwise
        return cls(
            sets=tuple(d["sets"]),
            server=BaseServer.from_dict(d.get("server") or {}, headers),
            repeats=int(d.get("repeats", 1)),
            remeasure_top=int(d.get("remeasure_top", 3)),
            objective=d.get("objective", "saturation"),
            at_rps=d.get("at_rps"),
            slo=tuple(d.get("slo") or ()),
            max_error_rate=float(d.get("max_error_rate", 0.01)),
            budget_s=d.get("budget_s"),
            find=FindOptions(**fkw),
            load=LoadOptions.from_dict(dict(d.get("load") or {})),
            max_quality_loss_pp=float(d.get("max_quality_loss_pp", DEFAULT_MAX_QUALITY_LOSS_PP)),
            eval_data=d.get("eval_data"),
            reference_model_dir=d.get("reference_model_dir"),
            server_memory_mb=d.get("server_memory_mb"),
        )


def env_items(items: list[str] | None) -> list[tuple[str, str]]:
    """``--env NAME=VALUE`` values as pairs (a clear error for one without ``=`` or a name)."""
    out = []
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--env takes NAME=VALUE, got {item!r}")
        out.append((name, value))
    return out
