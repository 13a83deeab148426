"""REST vs gRPC: the saturation search per protocol on one server, then latency at equal offered loads.

Each protocol gets its own results folder under ``out_dir/<protocol>``; ``compare.json`` holds the
side-by-side figures (a pure function of the per-protocol summaries) and ``report.html`` overlays them.
With no target URL the embedded MLServer is started (and always stopped).
"""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from satpoint.analysis.summary.build import build_summary
from satpoint.analysis.sweep.measurement import stream_figures
from satpoint.config import FindOptions, LoadOptions, VerdictRules
from satpoint.endpoints.spec import Target
from satpoint.metrics.documents import CompareDoc, check_version, write_document
from satpoint.metrics.results import load_results
from satpoint.procedures.progress import OnEvent, say
from satpoint.procedures.saturation import profile_session, search_target
from satpoint.procedures.session import Session, require_generator
from satpoint.reports.files.results import write_all
from satpoint.servers.embedded import check_extra
from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget

COMPARE_FILE = CompareDoc.FILE
PROTOCOLS = ("rest", "grpc")


@dataclass(frozen=True)
class CompareConfig:
    """What to compare: protocols, the server (URLs, or the embedded MLServer), the search's settings."""

    protocols: tuple[str, ...] = PROTOCOLS
    url: str | None = None  # REST base URL; None: the embedded MLServer
    grpc_url: str | None = None
    model: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    payload_file: Path | None = None
    grpc_raw: bool = False
    workers: int = 1
    server: str = "mlserver"  # the embedded server without a URL: mlserver or triton
    binary_data: bool = False  # REST: Triton's binary tensor extension
    # what the embedded MLServer serves (None: its default, the iris demo model on sklearn); with a URL
    # they are an error
    demo_model: str | None = None
    runtime: str | None = None
    model_dir: Path | None = None
    server_cpus: tuple[int, ...] | None = None
    load: LoadOptions = field(default_factory=lambda: LoadOptions(drain_s=5.0))
    find: FindOptions = field(default_factory=lambda: FindOptions(budget_s=240.0, budget_given=False, profile=False))
    ca_cert: Path | None = None  # TLS settings for the https:// / grpcs:// URLs among url and grpc_url
    insecure: bool = False
    client_cert: Path | None = None
    client_key: Path | None = None
    stream: bool = False  # stream every answer (REST infer_stream, gRPC ModelStreamInfer)

    def validate(self) -> CompareConfig:
        protos = self.protocols
        if not protos or any(p not in PROTOCOLS for p in protos) or len(set(protos)) != len(protos):
            raise ValueError("protocols take rest and/or grpc, e.g. rest,grpc")
        if self.url is not None and self.model is None:
            raise ValueError("a URL needs a model name")
        if self.url is not None and "grpc" in protos and self.grpc_url is None:
            raise ValueError("comparing gRPC on a given server needs its gRPC address")
        tls_given = self.insecure or any(p is not None for p in (self.ca_cert, self.client_cert, self.client_key))
        urls = [u for u in (self.url, self.grpc_url) if u is not None]
        if tls_given and not any(u.startswith(("https://", "grpcs://")) for u in urls):
            raise ValueError("--ca-cert/--insecure/--client-cert/--client-key need an https:// or grpcs:// URL")
        if self.server not in ("mlserver", "triton"):
            raise ValueError(f"server takes mlserver or triton, got {self.server!r}")
        if self.server == "triton" and (self.runtime is not None or self.model_dir is not None or self.workers != 1):
            raise ValueError("runtime, model_dir and workers describe the embedded MLServer, not the embedded Triton")
        embedded = {"demo_model": self.demo_model, "runtime": self.runtime, "model_dir": self.model_dir}
        if any(v is not None for v in embedded.values()):
            if self.url is not None or self.grpc_url is not None:
                raise ValueError("demo_model, runtime and model_dir describe the embedded MLServer: not with a URL")
            self.server_settings()  # a ValueError now (bad name, bad folder), before anything starts
        self.load.validate()
        self.find.validate()
        return self

    def server_settings(self) -> MLServerSettings:
        """The embedded MLServer's settings (used when no URL is given)."""
        chosen: dict[str, Any] = {"demo_model": self.demo_model, "runtime": self.runtime, "model_dir": self.model_dir}
        return MLServerSettings(
            parallel_workers=self.workers, cpus=self.server_cpus, **{k: v for k, v in chosen.items() if v is not None}
        )


@dataclass
class CompareOutcome:
    doc: dict[str, Any]
    out_dir: Path
    dirs: dict[str, Path]
    interrupted: bool

    @property
    def document(self) -> CompareDoc:
        """``doc`` typed (``compare.json``'s model)."""
        return CompareDoc.model_validate(self.doc)


def compare_rows(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The side-by-side figures (a pure function of the per-protocol summaries).  With ``--stream`` each
    protocol says so (``stream``) and each ``latency_at`` entry has ``stream``: time to first chunk and gaps
    between chunks at that load (``ttfc_p50_ms``, ``ttfc_p99_ms``, ``gap_p50_ms``, ``gap_p99_ms``)."""
    out: dict[str, Any] = {"protocols": {}}
    for proto, s in summaries.items():
        streamed = bool((s.get("target") or {}).get("stream"))
        out["protocols"][proto] = {
            "saturation_rps": s.get("saturation_rps"),
            "max_throughput_rps": s.get("max_throughput_rps"),
            "precision_achieved": s.get("precision_achieved"),
            "generator_cpu_us_per_request": s.get("generator", {}).get("cpu_us_per_request"),
            "latency_at": [
                {
                    "offered_rps": r["offered_rps"],
                    "latency_ms": r["latency_ms"],
                    "verdict": r["verdict"],
                    **({"stream": stream_figures(r.get("stream")) or None} if streamed else {}),
                }
                for r in s.get("latency_at", [])
            ],
            **({"stream": True} if streamed else {}),
        }
    return out


def _target(cfg: CompareConfig, url: str, model: str, protocol: str) -> Target:
    """The target of one protocol; the TLS settings go to the URLs that use TLS."""
    tls = Target(url, model).uses_tls
    return Target(
        url=url,
        model=model,
        protocol=protocol,
        headers=cfg.headers,
        payload_file=cfg.payload_file,
        grpc_raw=cfg.grpc_raw,
        binary_data=cfg.binary_data and protocol == "rest",
        ca_cert=cfg.ca_cert if tls else None,
        insecure=cfg.insecure and tls,
        client_cert=cfg.client_cert if tls else None,
        client_key=cfg.client_key if tls else None,
        stream=cfg.stream,
    )


def run_compare(
    cfg: CompareConfig, out_dir: Path, *, stop: threading.Event | None = None, on_event: OnEvent | None = None
) -> CompareOutcome:
    """Search each protocol, profile all of them at the lowest saturation point, write everything."""
    cfg.validate()
    require_generator(cfg.load)  # --realtime refused here, before the server starts
    if cfg.url is None:
        check_extra(cfg.server)  # the embedded server's extra installed
    stop = stop or threading.Event()
    rules = VerdictRules()
    sessions: dict[str, Session] = {}
    with ExitStack() as stack:
        server_info = None
        addr: dict[str, str | None] = {"rest": cfg.url, "grpc": cfg.grpc_url}
        name = cfg.model
        if cfg.url is None and cfg.server == "triton":
            from satpoint.servers.triton.server import TritonSettings, TritonTarget

            tsettings = TritonSettings(demo_model=cfg.demo_model or "iris", cpus=cfg.server_cpus)
            say(on_event, f"starting the embedded Triton ({tsettings.demo_model} model)")
            triton_server = stack.enter_context(TritonTarget(tsettings))
            server_info = triton_server.info()
            addr = {"rest": triton_server.rest_url, "grpc": triton_server.grpc_address}
            name = triton_server.model_name
        elif cfg.url is None:
            settings = cfg.server_settings()
            what = (
                f"model {settings.served_model_name} from {settings.model_dir}"
                if settings.model_dir is not None
                else f"{settings.demo_model} model, {settings.runtime} runtime"
            )
            say(on_event, f"starting the embedded MLServer ({what}, parallel_workers={cfg.workers})")
            server = stack.enter_context(MLServerTarget(settings))
            server_info = server.info()
            addr = {"rest": server.rest_url, "grpc": server.grpc_address}
            name = server.model_name
        assert name is not None
        specs = {p: _target(cfg, str(addr[p]), name, p) for p in cfg.protocols}
        for p in cfg.protocols:
            if stop.is_set():
                break
            say(on_event, f"── {p} ──")
            sessions[p] = search_target(
                specs[p], cfg.load, cfg.find, rules, out_dir / p, stop=stop, on_event=on_event, server_info=server_info
            )
        sats = {p: build_summary(s.results).get("saturation_rps") for p, s in sessions.items()}
        common = min((v for v in sats.values() if v), default=None)
        if common and not stop.is_set():
            say(on_event, f"── latency at equal offered loads (fractions of {common:.1f} rps) ──")
            for s in sessions.values():
                profile_session(s, replace(cfg.find, profile=True), common)
    summaries = {p: write_all(out_dir / p, s.results, html=True) for p, s in sessions.items()}
    doc = _write_compare(out_dir, summaries)
    return CompareOutcome(doc, out_dir, {p: out_dir / p for p in sessions}, stop.is_set())


def _write_compare(out_dir: Path, summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``compare.json`` (through its model) and, with two protocols, the overlaid ``report.html``."""
    doc = {**CompareDoc.envelope(), **compare_rows(summaries), "folders": {p: p for p in summaries}}
    write_document(out_dir / COMPARE_FILE, CompareDoc.model_validate(doc))
    if len(summaries) > 1:
        from satpoint.reports.html.report import write_report

        write_report([out_dir / p for p in summaries], out_dir / "report.html")
    return doc


def rewrite_compare(out_dir: Path) -> dict[str, Any]:
    """Rewrite a compare folder offline: each protocol's folder (``satpoint report``), then ``compare.json``
    and ``report.html`` from them; measures nothing. Returns the document."""
    path = out_dir / COMPARE_FILE
    old = json.loads(path.read_text())
    if "schema_version" in old:  # compare.json before 0.2 had no version: its shape is version 1's
        check_version(old, path, CompareDoc.VERSION)
    folders = old.get("folders") or {p: p for p in old.get("protocols", {})}
    summaries = {p: write_all(out_dir / d, load_results(out_dir / d), html=True) for p, d in folders.items()}
    return _write_compare(out_dir, summaries)
