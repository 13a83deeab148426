"""``satpoint coldstart``: what a cold model costs, measured through the server's repository API.

Against a URL (MLServer, or Triton in explicit model-control mode) or, with no target, an embedded server
with several demo models (MLServer: ``demo_models``; Triton: ``servers.triton.repo``), for each of
``repeats`` rounds and each model in turn:

1. unload the model (``POST /v2/repository/models/M/unload``) and wait until it no longer answers ready
   (Triton's unload answers before it is done);
2. start a small open-loop stream at the model (``during_rps``; 0: none), then load it
   (``.../load``: both servers answer once the model is loaded) and time the answer; the stream sends
   nothing intended after the load answered, and each of its requests is judged from its intended time,
   errors included (MLServer answers 404 while the model is absent, 400 while it loads);
3. right after the load's answer, the first inference, then a few warm ones (the reference).

Then, with ``resident`` (one or more K), one constant-rate run per K of a mix over the N models through
``transports.overcommit`` (at most K resident, load on demand, LRU eviction: an overcommitting scheduler's
policy, emulated on the client's side, not Seldon's own code): its latency distribution, that of the cold
requests, the share of cold requests, and the smallest K whose p99 met ``slo_p99_ms``.

Over REST or gRPC (``protocol``: a ``grpc://``/``grpcs://`` URL, ``--protocol grpc``, or the embedded
server's gRPC port): over gRPC every call is (``RepositoryIndex``/``RepositoryModelLoad``/
``RepositoryModelUnload`` through ``transports.grpc.grpc_repository``, ``ModelReady``, ``ModelInfer`` for the
inferences, the stream during a load and the overcommit runs), and the summary's ``target.protocol`` says so.

Everything is written to the results folder: ``coldstart.json`` (every repetition, every overcommit
run's counters), ``summary.json`` (``kind: coldstart``: the distributions and the recommendation) and
``report.html``.  A URL target is left as it was found: every model measured is loaded again at the end.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from satpoint._version import __version__
from satpoint.analysis.models.coldstart import (
    Repetition,
    coldstart_summary,
    during_rows,
    overcommit_summary,
    recommend,
)
from satpoint.analysis.search.thresholds import parse_slo
from satpoint.endpoints.grpc import GrpcFactoryBuilder
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.repository import PROTOCOLS, repository_client, resolve_protocol
from satpoint.endpoints.rest import RestFactoryBuilder
from satpoint.endpoints.spec import INSECURE_WARNING, Target
from satpoint.engine.dispatcher import DispatchOptions
from satpoint.engine.runner import run_schedule
from satpoint.engine.side_stream import SideStream
from satpoint.errors import ConfigError, ModelNotFound
from satpoint.metrics.documents import ColdStartDataDoc, ColdStartSummaryDoc, write_document
from satpoint.metrics.records import Outcome, Records
from satpoint.procedures.progress import OnEvent, say
from satpoint.procedures.session import announce_target
from satpoint.redact import redact_doc, redact_text, redact_url
from satpoint.reports.html.coldstart import write_html
from satpoint.servers.embedded import check_extra
from satpoint.transports.control_call import Inference
from satpoint.transports.grpc.control_grpc import GrpcControl
from satpoint.transports.grpc.grpc_repository import GRPC_HEADER_PREFIX
from satpoint.transports.overcommit import OvercommitBuilder, load_failed, settle
from satpoint.transports.repository import RepositoryError, loaded_models
from satpoint.transports.rest.control_rest import RestControl
from satpoint.transports.rest.pool import encode_json_body

SUMMARY_FILE = ColdStartSummaryDoc.FILE
DATA_FILE = ColdStartDataDoc.FILE
REPORT_FILE = "report.html"

perf = time.perf_counter

#: a successful inference's status: HTTP 200, gRPC OK
OK_STATUS = {"rest": 200, "grpc": 0}


@dataclass(frozen=True)
class ColdStartOptions:
    """What ``satpoint coldstart`` measures and how (see the module's docstring)."""

    repeats: int = 20
    during_rps: float = 200.0
    warm_requests: int = 5
    call_timeout_s: float = 120.0
    request_timeout_s: float = 30.0
    models: tuple[str, ...] = ()  # empty: every model the embedded server serves / every READY model of a URL
    demo_models: int = 3  # the embedded server's model count
    demo_model: str = "iris"  # ... copies of this demo model
    server: str = "mlserver"  # the embedded server: mlserver or triton
    protocol: str = "rest"  # the embedded server's: rest or grpc (a URL target's is its Target's)
    resident: tuple[int, ...] = ()  # overcommit runs: one per K (empty: none)
    mix: str = "uniform"  # uniform or zipf:S
    rate_rps: float = 20.0
    duration_s: float = 30.0
    slo_p99_ms: float | None = None
    seed: int = 0
    server_cpus: tuple[int, ...] | None = None

    def validate(self) -> ColdStartOptions:
        if self.repeats < 1:
            raise ConfigError(f"--repeats must be >= 1, got {self.repeats}")
        if self.during_rps < 0 or self.rate_rps <= 0 or self.duration_s <= 0:
            raise ConfigError("--during-rps must be >= 0; --rate and --duration must be > 0")
        if self.demo_models < 2:
            raise ConfigError(f"--demo-models must be >= 2 (a cold start needs another model), got {self.demo_models}")
        if self.server not in ("mlserver", "triton"):
            raise ConfigError(f"--server: mlserver or triton, got {self.server!r}")
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"--protocol: rest or grpc, got {self.protocol!r}")
        if any(k < 1 for k in self.resident):
            raise ConfigError(f"--resident: each K must be >= 1, got {list(self.resident)}")
        if self.slo_p99_ms is not None and not self.resident:
            raise ConfigError("--slo/--slo-p99-ms judge the overcommit runs: give --resident K[,K...]")
        mix_weights(self.mix, 2)  # a ConfigError for a mix it cannot read
        return self


def parse_slo_p99(slo: Sequence[str], p99_ms: float | None) -> float | None:
    """``--slo p99<100ms`` (the threshold grammar; p99 only) or ``--slo-p99-ms 100``, as a p99 limit in ms."""
    limits = parse_slo(slo)
    if set(limits) - {"p99"} or (limits and p99_ms is not None):
        raise ConfigError("coldstart --slo: one p99 objective (p99<100ms), not with --slo-p99-ms")
    return limits.get("p99", p99_ms)


def parse_resident(text: str | None) -> tuple[int, ...]:
    """``1,2,3`` as a tuple of K values (each >= 1), in the order given, once each."""
    if not text:
        return ()
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--resident: comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ConfigError(f"--resident: each K must be >= 1, got {text!r}")
    return tuple(dict.fromkeys(values))


def mix_weights(mix: str, n: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The weights of ``n`` models: ``uniform``, or ``zipf:S`` (model of rank r, 1-based: 1/r^S)."""
    if mix == "uniform":
        w = np.ones(n)
    elif mix.startswith("zipf:"):
        try:
            s = float(mix.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"--mix zipf:S needs a number S, got {mix!r}") from None
        if s < 0:
            raise ConfigError(f"--mix zipf:S needs S >= 0, got {s}")
        w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    else:
        raise ConfigError(f"--mix: uniform or zipf:S, got {mix!r}")
    out: np.ndarray[Any, np.dtype[np.float64]] = w / w.sum()
    return out


@dataclass
class ColdStartResult:
    summary: dict[str, Any]
    out_dir: Path
    repetitions: list[Repetition] = field(default_factory=list)

    @property
    def document(self) -> ColdStartSummaryDoc:
        return ColdStartSummaryDoc.model_validate(self.summary)  # summary.json's model


@dataclass(frozen=True)
class _Served:
    """What the measurement talks to: the base URL, the models, the repository client, the target spec
    (headers, TLS) and facts about the server for the summary."""

    url: str
    models: tuple[str, ...]
    client: RestControl | GrpcControl  # the target's control client (``transports.control``), as spec.protocol
    spec: Target
    info: dict[str, Any]

    @property
    def ok_status(self) -> int:
        return OK_STATUS[self.spec.protocol]


# -- one repetition --------------------------------------------------------------------------------------


def _infer_s(served: _Served, model: str, body: bytes, timeout_s: float) -> tuple[float, int]:
    """One inference's time and status (HTTP status; over gRPC the gRPC code, 0 for OK).  ``body``: the
    JSON body, or over gRPC the serialized ``ModelInferRequest``."""
    t0 = perf()
    status, _, _ = served.client.infer_one(Inference(body, model, timeout_s=timeout_s))
    return perf() - t0, status


Builder = RestFactoryBuilder | GrpcFactoryBuilder


def _repetition(
    served: _Served, model: str, rep: int, builder: Builder, body: bytes, opts: ColdStartOptions
) -> Repetition:
    client = served.client
    out = Repetition(model=model, rep=rep)
    out.unload_s = client.unload(model)
    out.absent_wait_s = client.wait_absent(model, timeout_s=opts.call_timeout_s)
    stream = SideStream(builder, opts.during_rps, opts.call_timeout_s + 5, opts.request_timeout_s)
    t0 = stream.start() if opts.during_rps > 0 else perf()
    while perf() < t0:
        time.sleep(max(0.0, t0 - perf()))
    t_start = t0  # the load is called at the stream's origin: its first request is intended then
    t_end: float | None = None
    try:
        try:
            out.load_s = client.load(model)
        except ModelNotFound:
            raise
        except RepositoryError as e:
            out.load_error = redact_text(str(e), served.spec.secret_values())  # a server may echo a credential
        t_end = perf()
        if out.load_error is None:
            out.first_infer_s, out.first_status = _infer_s(served, model, body, opts.request_timeout_s)
            warm = [_infer_s(served, model, body, opts.request_timeout_s) for _ in range(opts.warm_requests)]
            ok = [s for s, status in warm if status == served.ok_status]
            out.warm_infer_s = statistics.median(ok) if ok else None
    finally:
        if opts.during_rps > 0:
            rec = stream.finish(t_end if t_end is not None else perf())
    if opts.during_rps > 0 and t_end is not None:
        lat, outcome, status = during_rows(rec, t_start, t_end)
        out.during_latency_s, out.during_outcome, out.during_status = lat, outcome, status
    if out.load_error is not None:
        with contextlib.suppress(RepositoryError):
            client.load(model)  # leave it loaded for the next round
    return out


# -- overcommit runs -------------------------------------------------------------------------------------


def _overcommit_run(
    served: _Served,
    builder: Builder,
    k: int,
    opts: ColdStartOptions,
    stop: threading.Event | None,
    rows_csv: Path | None = None,
) -> dict[str, Any]:
    n_models = len(served.models)
    weights = mix_weights(opts.mix, n_models)
    n = max(1, int(opts.rate_rps * opts.duration_s))
    due = np.arange(n, dtype=np.float64) / opts.rate_rps
    rows = np.random.default_rng(opts.seed).choice(n_models, size=n, p=weights).astype(np.int64)
    initial = tuple(int(i) for i in np.argsort(-weights, kind="stable")[:k])
    settle(served.client, served.models, initial)  # before the run's clock starts
    wrapped = OvercommitBuilder(
        builder,
        served.client,
        served.models,
        tuple(range(n_models)),
        resident=min(k, n_models),
        initial=initial,
        keep_cold_rows=True,
        failed=load_failed(served.spec.protocol),
    )
    options = DispatchOptions(
        timeout_s=opts.request_timeout_s,
        drain_s=opts.request_timeout_s,
        warm_connections=8,
        payload_count=n_models,
        payload_index=rows,
    )
    out = run_schedule(due, wrapped, options, procs=1, stop_event=stop)
    counters = dict(out.shards[0].transport.get("overcommit", {})) if out.shards else {}
    cold_rows = counters.pop("cold_rows", [])
    summary = overcommit_summary(
        out.records,
        cold_rows,
        counters,
        resident=k,
        models=n_models,
        mix=opts.mix,
        rate_rps=opts.rate_rps,
        duration_s=opts.duration_s,
        model_of_row=rows[: len(out.records)],
    )
    summary["interrupted"] = out.interrupted
    if rows_csv is not None:
        write_rows(rows_csv, out.records, rows[: len(out.records)], cold_rows, served.models)
    return summary


def write_rows(path: Path, rec: Records, model_of_row: Any, cold_rows: Sequence[int], models: Sequence[str]) -> None:
    """One overcommit run's rows: intended time, latency from it, outcome, status, model, cold."""
    cold = np.zeros(len(rec), dtype=np.bool_)
    if len(cold_rows):
        cold[np.asarray(cold_rows, dtype=np.int64)] = True
    lines = ["intended_s,latency_ms,outcome,status,model,cold"]
    for i in range(len(rec)):
        lat = (rec.done[i] - rec.intended[i]) * 1000
        lines.append(
            f"{rec.intended[i]:.6f},{lat:.3f},{Outcome(int(rec.outcome[i])).name.lower()},{int(rec.status[i])},"
            f"{models[int(model_of_row[i])]},{int(cold[i])}"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# -- the whole measurement -----------------------------------------------------------------------------------


def _builders(served: _Served) -> tuple[dict[str, Builder], dict[str, bytes], Builder]:
    """Per model: a recipe (REST or gRPC, as the target) whose first request is that model's, and the body
    of one inference (JSON; over gRPC the serialized ``ModelInferRequest``); and one recipe holding every
    model's request in model order (the overcommit mix)."""
    per: dict[str, Builder] = {}
    bodies: dict[str, bytes] = {}
    for m in served.models:
        prepared = prepare(replace(served.spec, model=m), max_inflight=256, payload_count=1, control=served.client)
        builder = prepared.builder
        if isinstance(builder, GrpcFactoryBuilder) and not builder.stream:
            bodies[m] = builder.messages[0]
        elif isinstance(builder, RestFactoryBuilder):
            bodies[m] = encode_json_body(prepared.payload_docs[0])
        else:
            raise ConfigError("coldstart sends unary inferences, over REST or gRPC")
        per[m] = builder
    first = per[served.models[0]]
    if isinstance(first, GrpcFactoryBuilder):
        messages = tuple(b.messages[0] for b in per.values() if isinstance(b, GrpcFactoryBuilder))
        return per, bodies, replace(first, messages=messages, max_inflight=512)
    requests = tuple(b.requests[0] for b in per.values() if isinstance(b, RestFactoryBuilder))
    return per, bodies, replace(first, requests=requests, max_inflight=512)


def measure(
    served: _Served,
    opts: ColdStartOptions,
    out_dir: Path,
    *,
    on_event: OnEvent | None = None,
    stop: threading.Event | None = None,
) -> ColdStartResult:
    """Cold starts and the overcommit runs against ``served`` (see the module's docstring)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    per, bodies, mixed = _builders(served)
    reps: list[Repetition] = []
    runs: list[dict[str, Any]] = []
    try:
        for r in range(opts.repeats):
            for m in served.models:
                if stop is not None and stop.is_set():
                    break
                rep = _repetition(served, m, r, per[m], bodies[m], opts)
                reps.append(rep)
                say(
                    on_event,
                    f"round {r + 1}/{opts.repeats} {m}: load {_ms(rep.load_s)} ms, first inference "
                    f"{_ms(rep.first_infer_s)} ms, {len(rep.during_latency_s)} requests during the load"
                    + (f"; load failed: {rep.load_error}" if rep.load_error else ""),
                )
        for k in opts.resident:
            if stop is not None and stop.is_set():
                break
            say(on_event, f"overcommit: {len(served.models)} models, at most {k} resident, {opts.rate_rps:g} rps "
                f"for {opts.duration_s:g} s, mix {opts.mix}")  # fmt: skip
            run = _overcommit_run(served, mixed, k, opts, stop, out_dir / f"overcommit-k{k}.csv")
            runs.append(run)
            say(
                on_event,
                f"K={k}: p99 {run['latency_ms']['p99']} ms, cold share {run['cold_share']}, loads {run['loads']}, "
                f"errors {run['errors']}",
            )
    finally:
        if runs:  # a URL target is left with every measured model loaded, as found
            for m in served.models:
                with contextlib.suppress(RepositoryError):
                    served.client.load(m)
    summary = write_results(served, opts, reps, runs, out_dir)
    return ColdStartResult(summary, out_dir, reps)


def write_results(
    served: _Served, opts: ColdStartOptions, reps: Sequence[Repetition], runs: Sequence[dict[str, Any]], out_dir: Path
) -> dict[str, Any]:
    cold = coldstart_summary(reps, ok_status=served.ok_status)
    target = served.spec.describe()
    summary: dict[str, Any] = {
        **ColdStartSummaryDoc.envelope(),
        "satpoint_version": __version__,  # the name before tool_version, kept for older readers
        "target": {
            "url": target.get("url"),
            "models": list(served.models),
            "tls": target.get("tls"),
            "protocol": served.spec.protocol,  # every call's: the repository API's, readiness, inferences
        },
        "warnings": [INSECURE_WARNING] if served.spec.insecure and served.spec.uses_tls else [],
        "server": served.info,
        "options": {
            "repeats": opts.repeats,
            "during_rps": opts.during_rps,
            "warm_requests": opts.warm_requests,
            "resident": list(opts.resident),
            "mix": opts.mix,
            "rate_rps": opts.rate_rps,
            "duration_s": opts.duration_s,
            "slo_p99_ms": opts.slo_p99_ms,
            "seed": opts.seed,
        },
        "coldstart": cold,
        "overcommit": list(runs),
        "recommendation": recommend(cold, runs, opts.slo_p99_ms),
        "note": "overcommit emulates an overcommitting scheduler's policy (Seldon Core 2's agent: load on "
        "demand, evict the least recently used) from the client's side; it is not Seldon's code",
    }
    data = {**ColdStartDataDoc.envelope(), "repetitions": [r.to_dict() for r in reps], "overcommit": list(runs)}
    # every text the server wrote (load errors, the overcommit's control errors) may echo a credential
    secrets = served.spec.secret_values()
    summary, data = redact_doc(summary, secrets), redact_doc(data, secrets)
    write_document(out_dir / DATA_FILE, ColdStartDataDoc.model_validate(data), indent=None)
    write_document(out_dir / SUMMARY_FILE, ColdStartSummaryDoc.model_validate(summary))
    write_html(summary, out_dir / REPORT_FILE, data)
    return summary


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


# -- targets ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def attach(target: Target, opts: ColdStartOptions) -> Iterator[_Served]:
    """A server given by URL: the models named, else every READY model of its repository index."""
    target.validate()
    resolve_protocol(target.url, target.protocol)  # a gRPC URL over REST (or the reverse) is refused
    client = repository_client(target, opts.call_timeout_s)
    models = opts.models or tuple(loaded_models(client.index()))
    if len(models) < 1:
        raise ModelNotFound(f"{target.url}: its repository index lists no READY model; name them with --model")
    yield _Served(target.url, tuple(models), client, target, {"kind": "remote"})


@contextlib.contextmanager
def embedded(opts: ColdStartOptions) -> Iterator[_Served]:
    """The embedded server with ``opts.demo_models`` demo models (MLServer, or Triton in explicit mode)."""
    if opts.server == "triton":
        from satpoint.servers.triton.repo import TritonRepoSettings, TritonRepoTarget

        with TritonRepoTarget(TritonRepoSettings(opts.demo_model, opts.demo_models, cpus=opts.server_cpus)) as tserver:
            headers = tuple(tserver.access_headers.items())
            if opts.protocol == "grpc":  # Triton wants a restricted protocol's header prefixed over gRPC
                headers = tuple((GRPC_HEADER_PREFIX + k, v) for k, v in headers)
            url = tserver.grpc_address if opts.protocol == "grpc" else tserver.rest_url
            spec = Target(url=url, model=tserver.model_names[0], protocol=opts.protocol, headers=headers)
            client = repository_client(spec, opts.call_timeout_s)
            yield _Served(url, tserver.model_names, client, spec, _server_info(tserver.info()))
        return
    from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget

    with MLServerTarget(
        MLServerSettings(demo_model=opts.demo_model, demo_models=opts.demo_models, cpus=opts.server_cpus)
    ) as server:
        url = server.grpc_address if opts.protocol == "grpc" else server.rest_url
        spec = Target(url=url, model=server.model_names[0], protocol=opts.protocol)
        client = repository_client(spec, opts.call_timeout_s)
        models = opts.models or server.model_names
        yield _Served(url, tuple(models), client, spec, _server_info(server.info()))


def _server_info(info: dict[str, Any]) -> dict[str, Any]:
    return {k: info[k] for k in ("kind", "versions", "python", "settings", "models", "cpus", "startup_s") if k in info}


def run_coldstart(
    target: Target | None,
    opts: ColdStartOptions,
    out: Path,
    *,
    on_event: OnEvent | None = None,
    stop: threading.Event | None = None,
) -> ColdStartResult:
    """``satpoint coldstart``: against ``target`` (a URL), or the embedded server when None."""
    opts = opts.validate()
    if target is None:
        check_extra(opts.server)  # the embedded server's extra installed, before it starts
    if target is not None:
        announce_target(target.validate(), on_event)  # --insecure's warning, before any request
    with attach(target, opts) if target is not None else embedded(opts) as served:
        if len(served.models) < 1:
            raise ModelNotFound("no model to measure")
        say(on_event, f"cold starts of {', '.join(served.models)} at {redact_url(served.url)}, {opts.repeats} rounds")
        return measure(served, opts, out, on_event=on_event, stop=stop)
