"""The embedded Triton: a Triton Inference Server serving a demo model on loopback, started through
PyTriton (``nvidia-pytriton``, the ``satpoint[triton]`` extra) in a process of its own.

``TritonTarget`` writes a spec into a temporary folder, starts ``python -m satpoint.servers.triton.child``
(:mod:`satpoint.servers.triton.child`: trains the demo model and binds it as a Python function) as a
:class:`ManagedProcess`, waits for ``/v2/health/ready`` and ``/v2/models/M/ready``, and stops the whole
tree (``tritonserver``, its Python-backend stubs, PyTriton's proxy) on exit, errors and Ctrl-C.

Facts this module relies on (verified with nvidia-pytriton 0.7.0, which bundles Triton 2.51):

- PyTriton imports ``tritonclient.grpc``, whose ``inference.*`` protobuf names clash with MLServer's in
  the default descriptor pool ("duplicate symbol"), hence the separate process; this module imports
  neither PyTriton nor MLServer.
- The Python-backend stub links the system ``libpython3.X``; when the interpreter is another build of the
  same version (pyenv, conda) the stub fails with ``'_thread.RLock' object has no attribute
  '_recursion_count'``.  The interpreter's own ``LIBDIR`` goes first on the child's ``LD_LIBRARY_PATH``.
- PyTriton always runs Triton in ``--model-control-mode explicit`` (it loads its models through the
  repository API), so the repository API's load with a config override works on the embedded Triton too.
- PyTriton restricts the repository, shared-memory, statistics, trace and logging endpoints to an access
  token (header ``triton-access-token``) by default.  Loopback is no boundary (any local user can reach
  the port), and the repository API's load accepts ``file:`` overrides that the Python backend runs, so
  the embedded server keeps that restriction with a token of its own per start (``access_headers``), and
  opens only the read-only statistics, which satpoint scrapes like on any Triton.  The model's
  configuration (``/v2/models/M/config``) is not restricted by PyTriton.
- The dynamic batcher is always on (PyTriton's default): ``max_queue_delay_us`` = 0 means batches are
  formed from what is queued, with no waiting.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import sysconfig
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from satpoint.servers.embedded_base import (
    HOST,
    EmbeddedServer,
    Ports,
    missing_modules,
    package_versions,
    prepend_pythonpath,
    satpoint_root,
)
from satpoint.servers.models.demo import DEMO_MODELS, demo_model
from satpoint.servers.process import ManagedProcess, TargetError, free_ports

__all__ = [
    "ACCESS_HEADER",
    "KNOB_NAMES",
    "RESTRICTED_ENDPOINTS",
    "TRITON_EXTRA_HINT",
    "TritonSettings",
    "TritonTarget",
    "check_model_config",
    "model_info",
    "python_backend_env",
    "pytriton_available",
    "triton_env",
]

_CHILD = "satpoint.servers.triton.child"
_VERSIONED_PACKAGES = ("nvidia-pytriton", "scikit-learn", "numpy")
_TRITON_LOG = "triton.log"
_START_ATTEMPTS = 3
_BIND_FAILURES = ("address already in use", "failed to bind", "socket '")
_FAILED_START_GRACE_S = 5.0

#: the endpoints that need an embedded Triton's access token (PyTriton's defaults but the statistics), on
#: PyTriton's server and on the repository Triton (``servers.triton.repo``) alike
RESTRICTED_ENDPOINTS = ("shared-memory", "model-repository", "trace", "logging")
#: the header that carries the access token over REST
ACCESS_HEADER = "triton-access-token"

#: what the ``triton`` extra brings, by import name: PyTriton (with tritonserver) and scikit-learn (the demo models)
TRITON_MODULES = ("pytriton", "sklearn")
TRITON_EXTRA_HINT = (
    "the embedded Triton needs the 'triton' extra (PyTriton, scikit-learn): pip install 'satpoint[triton]'"
)


#: the model configuration's knobs both embedded Tritons take (``TritonSettings``, ``TritonRepoSettings``)
KNOB_NAMES = ("max_batch_size", "max_queue_delay_us", "instances", "preferred_batch_size")


def check_model_config(s: Any) -> None:
    """A ``ValueError`` for a model configuration Triton would not load: ``s`` holds ``input_datatype`` and
    the ``KNOB_NAMES`` (the settings of either embedded Triton)."""
    if s.input_datatype not in ("FP32", "FP64"):
        raise ValueError(f"input_datatype must be FP32 or FP64, got {s.input_datatype!r}")
    for name, low in (("max_batch_size", 1), ("max_queue_delay_us", 0), ("instances", 1)):
        if int(getattr(s, name)) < low:
            raise ValueError(f"{name} must be >= {low}, got {getattr(s, name)}")
    pref = s.preferred_batch_size
    if pref is not None and not 1 <= pref <= s.max_batch_size:
        raise ValueError(f"preferred_batch_size must be within 1..max_batch_size ({s.max_batch_size}), got {pref}")


def pytriton_available() -> bool:
    """Whether the ``triton`` extra (PyTriton, scikit-learn) can be imported here, without importing it
    (PyTriton would load tritonclient.grpc)."""
    return not missing_modules(TRITON_MODULES)


@dataclass(frozen=True)
class TritonSettings:
    """What the embedded Triton serves and how: the demo model, the dynamic batcher, instances, CPUs."""

    demo_model: str = "iris"
    model_name: str | None = None  # served name; default: the demo model's name
    input_name: str = "input-0"
    input_datatype: str = "FP32"
    max_batch_size: int = 32
    max_queue_delay_us: int = 0
    instances: int = 1
    preferred_batch_size: int | None = None  # None: PyTriton's default (max_batch_size)
    cpus: tuple[int, ...] | None = None
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        demo_model(self.demo_model)  # a ValueError naming the valid ones
        check_model_config(self)

    @classmethod
    def from_options(
        cls, served: Mapping[str, Any], cpus: tuple[int, ...] | None = None, **knobs: int | None
    ) -> TritonSettings:
        """Settings from command-line style options: ``served`` (demo_model/runtime/model_dir, only those
        given) and the knobs given (None: the default).  A ``ValueError`` for what Triton cannot do."""
        unsupported = ["--" + k.replace("_", "-") for k in ("runtime", "model_dir") if served.get(k) is not None]
        if unsupported:
            raise ValueError(f"{', '.join(unsupported)}: the embedded Triton serves the demo models only")
        given: dict[str, Any] = {k: v for k, v in knobs.items() if v is not None}
        return cls(demo_model=str(served.get("demo_model") or "iris"), cpus=cpus, **given)

    @property
    def served_model_name(self) -> str:
        return self.model_name or self.demo_model

    def knobs(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in KNOB_NAMES}

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cpus"] = list(self.cpus) if self.cpus is not None else None
        out["env"] = sorted(self.env)  # names only
        return out


def triton_env(base: dict[str, str], libdir: str | None) -> dict[str, str]:
    """The child's environment: the interpreter's own ``LIBDIR`` first on ``LD_LIBRARY_PATH`` (so the
    Python-backend stub loads this interpreter's libpython, not the system's), unbuffered output."""
    env = dict(base)
    if libdir:
        parts = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != libdir]
        env["LD_LIBRARY_PATH"] = os.pathsep.join([libdir, *parts])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def python_backend_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a ``tritonserver`` whose Python-backend stub must see this environment's packages.

    The stub embeds ``libpython`` and takes its ``sys.prefix`` from the first ``python`` on ``PATH``: from a
    virtual environment that is not activated it would import the base interpreter's packages (another
    numpy, no scikit-learn).  This interpreter's directory goes first on ``PATH`` and its site-packages first
    on ``PYTHONPATH``."""
    out = dict(env)
    site = sysconfig.get_paths()["purelib"]
    out["PYTHONPATH"] = os.pathsep.join(p for p in (site, out.get("PYTHONPATH", "")) if p)
    out["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), out.get("PATH", "")])
    return out


class TritonTarget(EmbeddedServer):
    """An embedded Triton serving a demo model on loopback; use as a context manager."""

    NAME: ClassVar[str] = "Triton"

    def __init__(
        self,
        settings: TritonSettings | None = None,
        *,
        ready_timeout_s: float = 120.0,
        stop_grace_s: float = 15.0,
        kill_with_parent: bool = True,
    ) -> None:
        super().__init__(ready_timeout_s=ready_timeout_s, stop_grace_s=stop_grace_s, kill_with_parent=kill_with_parent)
        self._settings = settings if settings is not None else TritonSettings()
        self._token = secrets.token_urlsafe(32)  # new for each target; never written to results

    # -- lifecycle -------------------------------------------------------------------------------------

    def _check_startable(self) -> None:
        if not pytriton_available():
            raise TargetError(TRITON_EXTRA_HINT)

    def _start(self) -> None:
        s = self._settings
        workdir = Path(tempfile.mkdtemp(prefix="satpoint-triton-"))
        self._workdir = workdir
        env = triton_env({**os.environ, **s.env}, sysconfig.get_config_var("LIBDIR"))
        prepend_pythonpath(env, satpoint_root())  # the child must import this satpoint
        for attempt in range(1, _START_ATTEMPTS + 1):
            http, grpc, metrics_port = free_ports(3, HOST)
            self._ports = Ports(http=http, grpc=grpc, metrics=metrics_port)
            spec = {
                "host": HOST,
                "ports": asdict(self._ports),
                "model_name": s.served_model_name,
                "demo_model": s.demo_model,
                "input_name": s.input_name,
                "input_datatype": s.input_datatype,
                "knobs": s.knobs(),
                "workspace": str(workdir / f"workspace-{attempt}"),
                "triton_log": str(workdir / _TRITON_LOG),
                "access_token": self._token,
                "restricted_endpoints": list(RESTRICTED_ENDPOINTS),
            }
            spec_path = workdir / "spec.json"  # readable by this user only: it holds the token
            spec_path.touch(mode=0o600)
            spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
            process = ManagedProcess(
                [sys.executable, "-m", _CHILD, str(spec_path)],
                log_path=workdir / "child.log",
                env=env,
                cwd=workdir,
                cpus=s.cpus,
                name="triton",
                kill_with_parent=self._kill_with_parent,
            )
            self._process = process
            t0 = time.monotonic()
            process.start()
            try:
                process.wait_ready(self._is_ready, self._ready_timeout_s, f"Triton model {s.served_model_name!r}")
            except TargetError as e:
                self._remember_pids()
                process.stop(_FAILED_START_GRACE_S)
                log = self.triton_log_tail(200).lower()
                if attempt < _START_ATTEMPTS and any(p in log for p in _BIND_FAILURES):
                    continue
                raise TargetError(f"{e}\n--- Triton's log ({workdir / _TRITON_LOG}), last lines:\n"
                                  f"{self.triton_log_tail(15)}") from None  # fmt: skip
            self._startup_s = time.monotonic() - t0
            self._remember_pids()
            return

    def _keep_workdir_after_stop(self) -> bool:
        # a server that failed to start keeps its folder: the error names the logs in it
        return self._process is not None and self._startup_s is None

    # -- what callers need -----------------------------------------------------------------------------

    @property
    def settings(self) -> TritonSettings:
        return self._settings

    @property
    def model_name(self) -> str:
        return self._settings.served_model_name

    @property
    def access_headers(self) -> dict[str, str]:
        """The header that opens the restricted endpoints (``RESTRICTED_ENDPOINTS``: the repository API
        among them) of this server; a secret, never recorded."""
        return {ACCESS_HEADER: self._token}

    @property
    def stats_url(self) -> str:
        """Triton's statistics of the served model (``GET``: cumulative counts and times)."""
        return f"{self.rest_url}/v2/models/{self.model_name}/stats"

    def triton_log_tail(self, lines: int = 40) -> str:
        if self._workdir is None:
            return ""
        path = self._workdir / _TRITON_LOG
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        child = self._process.log_tail(lines) if self._process is not None else ""
        return "\n".join([*text.strip().splitlines()[-lines:], *child.strip().splitlines()[-lines:]])

    def info(self) -> dict[str, Any]:
        """Facts for the results header: versions, settings, the model served, ports, timings."""
        s = self._settings
        return {
            "kind": "triton",
            "versions": package_versions(_VERSIONED_PACKAGES),
            "python": sys.version.split()[0],
            "settings": s.to_dict(),
            "model": model_info(s, s.served_model_name, "python (PyTriton)"),
            **self.where(s.cpus),
            "stats_url": self.stats_url if self._ports else None,
        }


def model_info(s: Any, name: str, backend: str) -> dict[str, Any]:
    """The results header's ``model`` block of a demo model an embedded Triton serves as ``name`` (``s``: the
    settings of either embedded Triton)."""
    spec = DEMO_MODELS[s.demo_model]
    return {
        "name": name,
        "source": "demo_model",
        "demo_model": spec.name,
        "estimator": spec.estimator,
        "dataset": spec.dataset,
        "n_features": spec.n_features,
        "backend": backend,
        "inputs": [{"name": s.input_name, "datatype": s.input_datatype, "shape": [-1, spec.n_features]}],
        "outputs": [
            {"name": "text", "datatype": "BYTES", "shape": [-1, 1]}
            if spec.streaming
            else {"name": "predict", "datatype": "INT64", "shape": [-1, 1]}
        ],
        # textgen is served decoupled: one response per character, over gRPC ModelStreamInfer only
        "decoupled": spec.streaming,
        **{k: getattr(s, k) for k in KNOB_NAMES},
    }
