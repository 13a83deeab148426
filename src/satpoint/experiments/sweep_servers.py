"""The server of one sweep point: started fresh with the point's knobs, or reconfigured by a command.

``point_server`` is a context manager yielding a :class:`PointServer`: the target to measure, the
server facts for the results header, how many cores the server had, and what was done to get there
(the reconfigure command and its output).  Whatever it starts it stops, also on errors and Ctrl-C.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from satpoint.analysis.sweep.space import ENV_PREFIX, NO_LIMIT, TRITON_KNOBS, ServerKind, placeholders
from satpoint.endpoints import triton
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.errors import SatpointError, TargetUnreachable
from satpoint.experiments.reconfigure import run_reconfigure
from satpoint.payloads.mix import ModelMix
from satpoint.procedures.progress import OnEvent, say
from satpoint.redact import REDACTED, is_secret_name, redact_text, redact_url, secret_values
from satpoint.servers.limits.cgroups import parse_cpu_limit, parse_memory

TRITON_KNOB_NAMES = frozenset(k.name for k in TRITON_KNOBS)


@dataclass(frozen=True)
class BaseServer:
    """The settings every point starts from (a point's knobs override them)."""

    kind: ServerKind = "mlserver"
    # the embedded MLServer
    workers: int = 1
    max_batch_size: int | None = None  # None: the model's own (1 and 0 for the demo models)
    max_batch_time: float | None = None
    demo_model: str | None = None
    runtime: str | None = None
    model_dir: str | None = None
    #: many models: copies of the demo model (the ``models`` knob overrides it) or a repository of folders
    demo_models: int | None = None
    model_repo: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    # the embedded Triton (max_batch_size above is its max_batch_size; None: 32)
    max_queue_delay_us: int | None = None
    instances: int | None = None
    preferred_batch_size: int | None = None
    # the synthetic server
    service_ms: float = 10.0
    # a remote server
    url: str | None = None
    grpc_url: str | None = None
    model: str | None = None
    reconfigure: str | None = None
    ready_timeout_s: float = 300.0
    server_cores: int | None = None
    server_pids: tuple[int, ...] = ()  # a local server's pids to sample (their process trees)
    metrics_urls: tuple[str, ...] = ()  # Prometheus endpoints to scrape
    # the client side
    protocol: str = "rest"
    batch: int = 1
    headers: tuple[tuple[str, str], ...] = ()
    payload_file: str | None = None
    #: a model mix (``payloads.mix``): the models named (``--model`` repeated), or every READY model of the
    #: server's index, with ``mix``'s weights (uniform, zipf:S, a file); none of them: one model (the
    #: embedded MLServer with many models mixes them uniformly)
    mix_models: tuple[str, ...] = ()
    mix_from_server: bool = False
    mix: str | None = None
    # CPUs of the host the server may use (mlserver, sim); None: all but the generator's
    server_cpus: tuple[int, ...] | None = None
    # TLS to a remote server's https:// and grpcs:// URLs (paths; as find's --ca-cert/--insecure/--client-*)
    ca_cert: str | None = None
    insecure: bool = False
    client_cert: str | None = None
    client_key: str | None = None
    #: stream every answer (``--stream``: REST infer_stream, gRPC ModelStreamInfer)
    stream: bool = False

    @property
    def has_tls_options(self) -> bool:
        return self.insecure or any(p is not None for p in (self.ca_cert, self.client_cert, self.client_key))

    def tls_fields(self, url: str) -> dict[str, Any]:
        """The TLS options as ``Target`` keyword arguments for ``url`` (none for a plaintext URL)."""
        if not Target(url, "").uses_tls:
            return {}
        return {
            "ca_cert": Path(self.ca_cert) if self.ca_cert else None,
            "insecure": self.insecure,
            "client_cert": Path(self.client_cert) if self.client_cert else None,
            "client_key": Path(self.client_key) if self.client_key else None,
        }

    def to_dict(self) -> dict[str, Any]:
        """What ``sweep.json`` records: every credential redacted (URLs, metrics URLs, the values of secret
        environment variables and header values, secrets in the ``--reconfigure`` command)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        secrets = self.secret_values()
        out["url"] = redact_url(self.url) if self.url else self.url
        out["grpc_url"] = redact_url(self.grpc_url) if self.grpc_url else self.grpc_url
        out["metrics_urls"] = [redact_url(u) for u in self.metrics_urls]
        out["env"] = redact_env(self.env)
        out["reconfigure"] = redact_text(self.reconfigure, secrets) if self.reconfigure else self.reconfigure
        out["headers"] = [name for name, _ in self.headers]  # names only: values may be secrets
        out["server_cpus"] = list(self.server_cpus) if self.server_cpus is not None else None
        return out

    def secret_values(self) -> tuple[str, ...]:
        """The literal secrets of these settings (URL passwords and tokens, secret header and environment
        values), hidden in whatever is written or printed about this server."""
        found = list(secret_values(self.url, self.headers))
        for url in (self.grpc_url, *self.metrics_urls):
            found += secret_values(url)
        found += [v for k, v in self.env if is_secret_name(k)]
        return tuple(dict.fromkeys(v for v in found if v))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], headers: Sequence[tuple[str, str]] = ()) -> BaseServer:
        known = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in known}
        kw["env"] = tuple(sorted((d.get("env") or {}).items()))
        kw["headers"] = tuple(headers)
        kw["server_cpus"] = tuple(d["server_cpus"]) if d.get("server_cpus") is not None else None
        kw["server_pids"] = tuple(d.get("server_pids") or ())
        kw["metrics_urls"] = tuple(d.get("metrics_urls") or ())
        kw["mix_models"] = tuple(d.get("mix_models") or ())
        return cls(**kw)

    def model_mix(self) -> ModelMix | None:
        """The model mix asked for (None: one model)."""
        if not (self.mix_models or self.mix_from_server or self.mix is not None):
            return None
        from_server = self.mix_from_server or not self.mix_models
        return ModelMix(() if from_server else self.mix_models, from_server, self.mix or "uniform")

    def resumed(
        self,
        *,
        url: str | None = None,
        grpc_url: str | None = None,
        metrics_urls: Sequence[str] = (),
        env: Sequence[tuple[str, str]] = (),
        reconfigure: str | None = None,
    ) -> BaseServer:
        """These settings as read back from ``sweep.json`` with what was not written given again: URLs,
        metrics URLs and environment values that lost a secret, and the ``--reconfigure`` command (never
        run from the file: whoever wrote the folder wrote it). Each must match what was recorded; a
        ``ValueError`` says what is missing or different."""
        given: dict[str, Any] = {}
        for key, opt, value in (("url", "--url", url), ("grpc_url", "--grpc-url", grpc_url)):
            stored = getattr(self, key)
            if value is not None:
                if redact_url(value) != stored:
                    raise ValueError(f"--resume: {opt} {redact_url(value)} is not the sweep's ({stored})")
                given[key] = value
            elif stored is not None and REDACTED in stored:
                raise ValueError(f"--resume: the sweep's {opt} was recorded with credentials hidden: give {opt} again")
        if metrics_urls:
            shown = [redact_url(u) for u in metrics_urls]
            if shown != list(self.metrics_urls):
                raise ValueError(f"--resume: --metrics-url {', '.join(shown)} are not the sweep's")
            given["metrics_urls"] = tuple(metrics_urls)
        elif any(REDACTED in u for u in self.metrics_urls):
            raise ValueError("--resume: the sweep's --metrics-url were recorded with credentials hidden: give them")
        new_env = dict(self.env)
        for k, v in env:
            if k not in new_env:
                raise ValueError(f"--resume: the sweep's server had no --env {k}")
            new_env[k] = v
        lost = [k for k, v in new_env.items() if REDACTED in v and k not in dict(env)]
        if lost:
            raise ValueError(f"--resume: the value of --env {', '.join(lost)} was not recorded: give it again")
        given["env"] = tuple(sorted(new_env.items()))
        if self.reconfigure is not None:
            if reconfigure is None:
                raise ValueError(
                    f"--resume: the sweep reconfigures its server with this command (as recorded): "
                    f"{self.reconfigure}\nsatpoint does not run a command read from a file: give it again "
                    "with --reconfigure"
                )
            if redact_text(reconfigure, replace(self, **given).secret_values()) != self.reconfigure:
                raise ValueError(f"--resume: --reconfigure is not the sweep's command (recorded: {self.reconfigure})")
            given["reconfigure"] = reconfigure
        elif reconfigure is not None:
            raise ValueError("--resume: the sweep ran no --reconfigure command")
        return replace(self, **given)


def redact_env(env: Sequence[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
    """Environment variables as written: a secret name's value hidden, credentials in any value hidden."""
    pairs = env.items() if isinstance(env, Mapping) else env
    return {k: REDACTED if is_secret_name(k) else redact_text(v) for k, v in pairs}


@dataclass
class PointServer:
    target: Target
    info: dict[str, Any] | None
    cores: int | None
    actions: dict[str, Any] = field(default_factory=dict)
    #: what satpoint can watch of this server: its process tree's root pids, its Prometheus endpoints
    pids: tuple[int, ...] = ()
    metrics_urls: tuple[str, ...] = ()
    #: the cgroup of an embedded server run with a CPU or memory limit (``servers.limits.cgroups.ChildCgroup``)
    cgroup: Any = None


def cores_for(base: BaseServer, knobs: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The host CPUs a started server gets: the first ``server_cpus`` of the allowed set."""
    allowed = base.server_cpus
    n = knobs.get("server_cpus")
    if n is None:
        return allowed
    pool = sorted(os.sched_getaffinity(0))
    if int(n) > len(pool):
        raise ValueError(f"server_cpus={n}: this machine lets satpoint use {len(pool)} CPUs")
    return tuple(pool[: int(n)])


def point_limits(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """A point's ``server_cpu_limit``/``server_memory_limit`` knobs as ``MLServerSettings`` fields."""
    out: dict[str, Any] = {}
    cpu, mem = knobs.get("server_cpu_limit"), knobs.get("server_memory_limit")
    if cpu is not None and str(cpu) != NO_LIMIT:
        out["cpu_limit"] = parse_cpu_limit(str(cpu))
    if mem is not None and str(mem) != NO_LIMIT:
        out["memory_limit"] = parse_memory(str(mem))
    return out


def _many_models(base: BaseServer, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """A point's ``models`` knob (else the base's ``demo_models``) and the base's ``model_repo`` as
    ``MLServerSettings`` fields (Triton: the ``demo_models`` count)."""
    out: dict[str, Any] = {}
    count = knobs.get("models", base.demo_models)
    if count is not None:
        out["demo_models"] = int(count)
    if base.model_repo is not None:
        out["model_repo"] = Path(base.model_repo)
    return out


def _client(base: BaseServer, knobs: Mapping[str, Any]) -> tuple[str, int]:
    return str(knobs.get("protocol", base.protocol)), int(knobs.get("batch", base.batch))


@contextmanager
def point_server(
    base: BaseServer,
    knobs: Mapping[str, Any],
    *,
    stop: threading.Event,
    on_event: OnEvent | None = None,
    log_dir: Path | None = None,
) -> Iterator[PointServer]:
    """The server for a point, ready to measure; stopped (when satpoint started it) on exit."""
    protocol, batch = _client(base, knobs)
    fields: dict[str, Any] = {"batch_size": batch, "headers": base.headers, "stream": base.stream}
    if base.model_mix() is not None:
        fields["mix"] = base.model_mix()
    if base.payload_file is not None:
        fields["payload_file"] = Path(base.payload_file)
    with ExitStack() as stack:
        if base.kind == "mlserver":
            from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget

            cpus = cores_for(base, knobs)
            _warn_shared(cpus, on_event)
            env = dict(base.env)
            env.update({k[len(ENV_PREFIX) :]: str(v) for k, v in knobs.items() if k.startswith(ENV_PREFIX)})
            kw: dict[str, Any] = {
                "parallel_workers": int(knobs.get("workers", base.workers)),
                "env": env,
                "cpus": cpus,
            }
            for name, key in (("max_batch_size", "max_batch_size"), ("max_batch_time", "max_batch_time_s")):
                value = knobs.get(name, getattr(base, name))
                if value is not None:
                    kw[key] = value
            for name in ("demo_model", "runtime", "model_dir"):
                value = knobs.get(name, getattr(base, name))
                if value is not None:
                    kw[name] = Path(value) if name == "model_dir" else value
            kw.update({k: int(knobs[k]) for k in ("max_tokens", "input_len") if k in knobs})  # textgen's
            kw.update(_many_models(base, knobs))
            kw.update(point_limits(knobs))
            settings = MLServerSettings(**kw)
            say(on_event, f"starting the embedded MLServer ({_describe(kw)})")
            server = stack.enter_context(MLServerTarget(settings))
            target = server.target(protocol, **fields)
            held = f", {server.models} models" if server.models > 1 or "demo_models" in kw else ""
            say(
                on_event,
                f"MLServer ready at {target.url} (pid {server.pid}, {server.startup_s or 0:.1f} s to start{held})",
            )
            cores = len(cpus) if cpus else os.cpu_count()
            yield PointServer(
                target,
                server.info(),
                cores,
                pids=(server.pid,),
                metrics_urls=(server.metrics_url,),
                cgroup=server.cgroup,
            )
            return
        if base.kind == "triton":
            yield stack.enter_context(_triton_point(base, knobs, protocol, fields, on_event))
            return
        if base.kind == "sim":
            from satpoint.servers.sim.process import SimServer

            cpus = cores_for(base, knobs)
            sim = SimServer(
                slots=int(knobs.get("workers", base.workers)),
                service_ms=float(knobs.get("service_ms", base.service_ms)),
                protocol=protocol,
                cpus=cpus,
                log_dir=log_dir,
                extra_args=("--models", ",".join(base.mix_models)) if base.mix_models else (),
            )
            stack.enter_context(sim)
            slots, svc = sim_slots(knobs, base), sim_service(knobs, base)
            info: dict[str, Any] = {"kind": "sim", "slots": slots, "service_ms": svc}
            info["capacity_rps"] = slots / svc * 1000.0
            info["cpus"] = list(cpus) if cpus else None
            yield PointServer(sim.target(**fields), info, len(cpus) if cpus else os.cpu_count(), pids=(sim.pid,))
            return
        # a remote server: run the reconfigure command (if any), then wait until it answers an inference
        url = base.grpc_url if protocol == "grpc" else base.url
        if url is None or base.model is None:
            raise ValueError(f"a remote sweep over {protocol} needs {'--grpc-url' if protocol == 'grpc' else '--url'}")
        fields.update(base.tls_fields(url))
        target = Target(url=url, model=base.model, protocol=protocol, **fields)
        actions: dict[str, Any] = {}
        if base.reconfigure is not None:
            actions["reconfigure"] = run_reconfigure(
                base.reconfigure, knobs, stop=stop, on_event=on_event, secrets=base.secret_values()
            )
            actions["ready_s"] = wait_ready(target, base.ready_timeout_s, stop=stop, on_event=on_event)
        taken = set(placeholders(base.reconfigure)) if base.reconfigure is not None else set()
        wanted = {k: v for k, v in knobs.items() if k in TRITON_KNOB_NAMES and k not in taken}
        if wanted:
            if base.url is None:
                raise ValueError("Triton knobs on a remote server are applied over REST: give --url")
            say(on_event, "reloading the model on Triton with " + ", ".join(f"{k}={v}" for k, v in wanted.items()))
            rest = Target(url=base.url, model=base.model, headers=base.headers, **base.tls_fields(base.url))
            original: dict[str, Any] = {}  # filled by apply_knobs: what the point's end loads back
            stack.callback(_restore_triton, rest, original, on_event)
            actions["triton_config"] = triton.apply_knobs(
                base.url, base.model, wanted, rest.wire_headers, tls=rest.tls_options(), original=original
            )
            actions["ready_s"] = wait_ready(target, base.ready_timeout_s, stop=stop, on_event=on_event)
        cores = knobs.get("server_cpus", base.server_cores)
        yield PointServer(
            target,
            None,
            int(cores) if cores is not None else None,
            actions,
            pids=base.server_pids,
            metrics_urls=(*base.metrics_urls, *_triton_stats_urls(base)),
        )


def _restore_triton(rest: Target, original: dict[str, Any], on_event: OnEvent | None) -> None:
    """At a point's end, load the remote Triton's model back with the configuration it had (a shared
    Triton is left as it was found, also after an error or Ctrl-C); a failure is a warning."""
    if not original:
        return
    say(on_event, f"loading {rest.model} back on Triton with the configuration it had")
    try:
        triton.restore_config(rest.url, rest.model, original, rest.wire_headers, tls=rest.tls_options())
    except (SatpointError, OSError) as e:
        say(on_event, f"WARNING: {rest.model} was not loaded back with its original configuration: {e}", "warning")


@contextmanager
def _triton_point(
    base: BaseServer, knobs: Mapping[str, Any], protocol: str, fields: dict[str, Any], on_event: OnEvent | None
) -> Iterator[PointServer]:
    """The embedded Triton started with a point's knobs (over the base's); with a ``models`` knob (else the
    base's ``demo_models``), that many copies of the demo model in a model repository."""
    from satpoint.servers.triton.repo import TritonRepoSettings, TritonRepoTarget
    from satpoint.servers.triton.server import TritonSettings, TritonTarget

    cpus = cores_for(base, knobs)
    _warn_shared(cpus, on_event)
    kw: dict[str, Any] = {"cpus": cpus}
    for name in ("max_batch_size", "max_queue_delay_us", "instances", "preferred_batch_size", "demo_model"):
        value = knobs.get(name, getattr(base, name))
        if value is not None:
            kw[name] = value
    settings = TritonSettings(**kw)
    copies = _many_models(base, knobs).get("demo_models")
    say(on_event, f"starting the embedded Triton ({_describe(kw if copies is None else {**kw, 'models': copies})})")
    server = (
        TritonTarget(settings)
        if copies is None
        else TritonRepoTarget(TritonRepoSettings.from_settings(settings, copies))
    )
    with server:
        target = server.target(protocol, **fields)
        held = f", {server.models} models" if copies is not None else ""
        say(on_event, f"Triton ready at {target.url} (pid {server.pid}, {server.startup_s or 0:.1f} s to start{held})")
        cores = len(cpus) if cpus else os.cpu_count()
        urls = (server.metrics_url, server.stats_url)
        yield PointServer(target, server.info(), cores, pids=(server.pid,), metrics_urls=urls)


def _triton_stats_urls(base: BaseServer) -> tuple[str, ...]:
    """A remote Triton's statistics endpoint (over REST), read before and after each stage."""
    if base.url is None or base.model is None:
        return ()
    rest = Target(url=base.url, model=base.model, headers=base.headers, **base.tls_fields(base.url))
    found = triton.probe(base.url, base.model, rest.wire_headers, tls=rest.tls_options())
    if found is None or not found.server.has_statistics:
        return ()
    url = triton.stats_url(base.url, base.model)
    return () if url in base.metrics_urls else (url,)


def _warn_shared(cpus: Sequence[int] | None, on_event: OnEvent | None) -> None:
    """Say so when the server's CPUs include the generator's (the last one): they then compete."""
    pool = sorted(os.sched_getaffinity(0))
    if cpus is not None and len(pool) > 1 and pool[-1] in cpus:
        say(on_event, f"note: the server's CPUs include CPU {pool[-1]}, the generator's: they share it", "warning")


def sim_slots(knobs: Mapping[str, Any], base: BaseServer) -> int:
    return int(knobs.get("workers", base.workers))


def sim_service(knobs: Mapping[str, Any], base: BaseServer) -> float:
    return float(knobs.get("service_ms", base.service_ms))


def _describe(kw: Mapping[str, Any]) -> str:
    parts = []
    for k, v in kw.items():
        if k == "env" and not v:
            continue
        if k == "env":
            v = redact_env(v)
        if k == "cpus":
            parts.append(f"CPUs {','.join(map(str, v)) if v else 'any'}")
        else:
            parts.append(f"{k}={v}")
    return ", ".join(parts)


def wait_ready(target: Target, timeout_s: float, *, stop: threading.Event, on_event: OnEvent | None = None) -> float:
    """Wait until the target answers a test inference (``prepare`` succeeds); seconds waited."""
    t0 = time.monotonic()
    last = ""
    while not stop.is_set():
        try:
            prepare(target, 8)
            waited = time.monotonic() - t0
            say(on_event, f"ready after {waited:.1f} s")
            return round(waited, 3)
        except SatpointError as e:
            last = str(e)
        if time.monotonic() - t0 > timeout_s:
            raise TargetUnreachable(f"not ready {timeout_s:g} s after reconfiguring (--ready-timeout): {last}")
        stop.wait(1.0)
    raise SatpointError("interrupted while waiting for the server to be ready")
