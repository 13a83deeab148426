"""The embedded default target: a real MLServer 1.7.1 serving a demo model (iris by default) or the
user's own model folder on loopback.

``MLServerTarget`` writes a model repository into a temporary directory (``settings.json`` with free
loopback ports, ``<model>/model-settings.json`` with declared inputs/outputs, ``<model>/model.joblib`` or
``<model>/model.onnx`` for satpoint's ONNX runtime; or, with ``model_dir``, the user's folder), starts
``mlserver start`` from *this* interpreter's environment as a :class:`ManagedProcess`, waits for
``GET /v2/health/ready`` == 200 and stops the whole process tree (parallel workers included) on exit.

MLServer facts this module relies on (verified with mlserver 1.7.1, mlserver-sklearn 1.7.1):

- ``python -m mlserver`` does not exist (no ``__main__``); ``-m mlserver.cli.main`` works but warns in
  every spawned worker, so we run ``python -c "from mlserver.cli.main import main; main()" start <dir>``.
- ``metrics_dir`` and ``environments_dir`` default to ``$CWD/.metrics`` and ``$CWD/.envs``: both are set
  inside the temporary directory, which is also the server's cwd, so nothing lands in the user's cwd.
- Inherited ``MLSERVER_*`` environment variables are removed from the server's environment so the
  written settings are the ones in force (they are named in :meth:`MLServerTarget.info`).
- Parallel workers ignore SIGINT/SIGTERM (the main process stops them); if the main process is killed
  hard they would linger, hence the group SIGKILL and descendant sweep of :class:`ManagedProcess`.
- The sklearn runtime accepts FP32, FP64 (and integer) tensors of shape ``[n, 4]``; 1-D ``[4]`` fails
  (HTTP 500, sklearn wants 2-D). REST needs ``Content-Type: application/json`` (else HTTP 422).
- Readiness = ``/v2/health/ready`` == 200 *and* ``/v2/models/<name>/ready`` == 200: after a failed model
  load, MLServer briefly answers 200 on the former (no models, all "ready"), then exits.
- A port taken between choosing and binding does not make MLServer exit: it hangs (uvicorn's
  ``sys.exit`` happens inside a task). We watch the log for bind errors, fail fast, retry on new ports.
- The server's cwd is its temporary folder, so relative ``PYTHONPATH`` entries are made absolute; with the
  ONNX runtime, the folder satpoint was imported from goes first on it (MLServer imports
  ``satpoint.servers.onnx_runtime``: it must be this satpoint) unless it is a site directory.
- Control-plane HTTP here bypasses any ``http_proxy`` from the environment (loopback only).
- A user's model folder (``model_dir``) is served as ``<repo>/<name>/``: a real folder holding a symlink
  to each of its entries (MLServer opens files and imports a custom runtime's module through them) and a
  rewritten ``model-settings.json`` (its own, with the name satpoint serves, relative ``parameters.uri``
  made absolute, and ``max_batch_size``/``max_batch_time`` replaced only when given to satpoint). The
  user's folder is never written to.

Why this module is long: it also holds the scrape of MLServer's Prometheus ``/metrics``; that part
moves to its own module when server-side observability is built on it.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any

from satpoint.endpoints.spec import Target
from satpoint.servers.demo_model import (
    DEMO_MODELS,
    MODEL_FILENAME,
    ONNX_FILENAME,
    RUNTIMES,
    demo_model,
    intra_op_threads,
    write_demo_artifact,
)
from satpoint.servers.process import ManagedProcess, TargetError, free_ports

__all__ = [
    "DEFAULT_METRIC_PREFIXES",
    "MLServerSettings",
    "MLServerTarget",
    "parse_prometheus_text",
    "scrape_metrics",
]

_HOST = "127.0.0.1"
_MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_INPUT_DATATYPES = ("FP32", "FP64")
_VERSIONED_PACKAGES = ("mlserver", "mlserver-sklearn", "scikit-learn", "uvloop", "numpy", "joblib")
_ONNX_PACKAGES = ("skl2onnx", "onnxruntime", "onnx")
_MODEL_SETTINGS_FILE = "model-settings.json"
_RUNTIME_IMPLEMENTATIONS = {
    "sklearn": "mlserver_sklearn.SKLearnModel",
    "onnx": "satpoint.servers.onnx_runtime.OnnxModel",
}
_DEFAULT_DEMO_MODEL = "iris"
_DEFAULT_RUNTIME = "sklearn"
_START_ATTEMPTS = 3  # a free port can be taken between choosing it and MLServer binding it
_BIND_FAILURES = ("address already in use", "failed to bind")  # uvicorn / grpc wording
_FAILED_START_GRACE_S = 2.0  # a start hung on a bind error ignores SIGTERM
_MLSERVER_MAIN = "import sys; from mlserver.cli.main import main; sys.argv[0] = 'mlserver'; main()"

DEFAULT_METRIC_PREFIXES: tuple[str, ...] = (
    "model_infer_request_duration",
    "model_infer_request_success",
    "model_infer_request_failure",
    "parallel_request_queue",
    "batch_request_queue",
)


@dataclass(frozen=True)
class MLServerSettings:
    """How the embedded MLServer is configured. ``debug`` defaults to False here (MLServer's own default
    is True, whose access log costs a lot of throughput).

    What it serves: the demo model ``demo_model`` (iris, digits-mlp, digits-forest) through ``runtime``
    (``sklearn``: ``mlserver_sklearn.SKLearnModel`` on ``model.joblib``; ``onnx``: the model converted with
    skl2onnx, served by :class:`satpoint.servers.onnx_runtime.OnnxModel`), or the user's MLServer model
    folder ``model_dir`` (its ``model-settings.json``; mutually exclusive with a non-default demo model or
    runtime). ``model_name`` is the name it is served under; None: the demo model's name, or the folder's
    ``name`` (else the folder's name). ``served_model_name`` is that name resolved. ``max_batch_size`` /
    ``max_batch_time_s`` None: the model's own (demo models: 1 and 0, no adaptive batching); given, they
    replace a model folder's values. ``input_name`` / ``input_datatype`` describe the demo model's input.

    Every field stays as given (``dataclasses.replace`` with another ``demo_model`` changes the served
    name too); a ``model_dir`` is read and checked here, so a bad folder fails before anything starts."""

    parallel_workers: int = 1
    debug: bool = False
    max_batch_size: int | None = None
    max_batch_time_s: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    model_name: str | None = None
    cpus: Sequence[int] | None = None
    input_name: str = "input-0"
    input_datatype: str = "FP32"
    demo_model: str = _DEFAULT_DEMO_MODEL
    runtime: str = _DEFAULT_RUNTIME
    model_dir: Path | None = None
    # the model folder's model-settings.json as read when these settings were made (not a parameter)
    _folder_settings: Mapping[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.parallel_workers < 0:
            raise ValueError(f"parallel_workers must be >= 0 (0 = in the main process), got {self.parallel_workers}")
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 (1 = no adaptive batching), got {self.max_batch_size}")
        if self.max_batch_time_s is not None and self.max_batch_time_s < 0:
            raise ValueError(f"max_batch_time_s must be >= 0, got {self.max_batch_time_s}")
        if self.model_name is not None and not _MODEL_NAME_RE.match(self.model_name):
            raise ValueError(f"model_name must match {_MODEL_NAME_RE.pattern}, got {self.model_name!r}")
        demo_model(self.demo_model)  # a ValueError listing the valid names
        if self.runtime not in RUNTIMES:
            raise ValueError(f"unknown runtime {self.runtime!r}: choose one of {', '.join(RUNTIMES)}")
        if self.model_dir is not None:
            chosen = [
                f"{name}={value!r}"
                for name, value, default in (
                    ("demo_model", self.demo_model, _DEFAULT_DEMO_MODEL),
                    ("runtime", self.runtime, _DEFAULT_RUNTIME),
                )
                if value != default
            ]
            if chosen:
                raise ValueError(
                    f"model_dir (your own model folder) and {' and '.join(chosen)} (a demo model) exclude each "
                    "other: give one or the other"
                )
            model_dir = Path(self.model_dir)
            object.__setattr__(self, "model_dir", model_dir)
            folder = read_model_folder(model_dir)
            object.__setattr__(self, "_folder_settings", folder)
            if self.model_name is None and not _MODEL_NAME_RE.match(self.served_model_name):
                raise ValueError(
                    f"the model name {self.served_model_name!r} (from {model_dir / _MODEL_SETTINGS_FILE}) cannot "
                    f"be served by satpoint: it must match {_MODEL_NAME_RE.pattern}; give another with model_name"
                )
        if not self.input_name:
            raise ValueError("input_name must not be empty")
        if self.input_datatype not in _INPUT_DATATYPES:
            raise ValueError(f"input_datatype must be one of {_INPUT_DATATYPES}, got {self.input_datatype!r}")
        env = {str(k): str(v) for k, v in self.env.items()}
        object.__setattr__(self, "env", env)
        if self.cpus is not None:
            cpus = tuple(int(c) for c in self.cpus)
            if not cpus or len(set(cpus)) != len(cpus) or min(cpus) < 0:
                raise ValueError(f"cpus must be distinct non-negative CPU ids, got {list(self.cpus)}")
            object.__setattr__(self, "cpus", cpus)

    @property
    def served_model_name(self) -> str:
        """The name the model is served under (``model_name``, else the demo model's or folder's name)."""
        if self.model_name is not None:
            return self.model_name
        if self.model_dir is not None:
            name = (self._folder_settings or {}).get("name")
            return name if isinstance(name, str) and name else self.model_dir.resolve().name
        return self.demo_model

    @property
    def effective_max_batch_size(self) -> int:
        """``max_batch_size`` in force: the given one, else the model folder's (MLServer default 0), else 1."""
        if self.max_batch_size is not None:
            return self.max_batch_size
        if self._folder_settings is not None:
            return int(self._folder_settings.get("max_batch_size", 0))
        return 1

    @property
    def effective_max_batch_time_s(self) -> float:
        """``max_batch_time`` in force: the given one, else the model folder's (MLServer default 0), else 0."""
        if self.max_batch_time_s is not None:
            return self.max_batch_time_s
        if self._folder_settings is not None:
            return float(self._folder_settings.get("max_batch_time", 0.0))
        return 0.0

    def folder_settings(self) -> dict[str, Any] | None:
        """A copy of the model folder's ``model-settings.json`` (None without ``model_dir``)."""
        return json.loads(json.dumps(self._folder_settings)) if self._folder_settings is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The settings for the results header: batching values as in force, the served name;
        ``demo_model``/``runtime`` are None when a model folder is served."""
        own = self.model_dir is not None
        return {
            "parallel_workers": self.parallel_workers,
            "debug": self.debug,
            "max_batch_size": self.effective_max_batch_size,
            "max_batch_time_s": self.effective_max_batch_time_s,
            "env": dict(self.env),
            "model_name": self.served_model_name,
            "cpus": list(self.cpus) if self.cpus is not None else None,
            "input_name": self.input_name,
            "input_datatype": self.input_datatype,
            "demo_model": None if own else self.demo_model,
            "runtime": None if own else self.runtime,
            "model_dir": str(self.model_dir) if self.model_dir is not None else None,
        }


def read_model_folder(model_dir: Path) -> dict[str, Any]:
    """The ``model-settings.json`` of an MLServer model folder, checked: a ValueError saying what is wrong
    (no such folder, no ``model-settings.json``, invalid JSON, not an object, no ``implementation``)."""
    folder = Path(model_dir)
    if not folder.exists():
        raise ValueError(f"model_dir {folder} does not exist")
    if not folder.is_dir():
        raise ValueError(f"model_dir {folder} is not a folder (give the folder holding {_MODEL_SETTINGS_FILE})")
    path = folder / _MODEL_SETTINGS_FILE
    if not path.is_file():
        raise ValueError(f"model_dir {folder} has no {_MODEL_SETTINGS_FILE} (an MLServer model folder needs one)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(doc).__name__}")
    impl = doc.get("implementation")
    if not isinstance(impl, str) or not impl:
        raise ValueError(f'{path} names no "implementation" (e.g. "mlserver_sklearn.SKLearnModel")')
    if "name" in doc and not isinstance(doc["name"], str):
        raise ValueError(f'{path}: "name" must be a string, got {doc["name"]!r}')
    for key in ("max_batch_size", "max_batch_time"):
        if key in doc and (isinstance(doc[key], bool) or not isinstance(doc[key], int | float)):
            raise ValueError(f"{path}: {key!r} must be a number, got {doc[key]!r}")
    params = doc.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise ValueError(f'{path}: "parameters" must be an object, got {params!r}')
    return doc


@dataclass(frozen=True)
class _Ports:
    http: int
    grpc: int
    metrics: int


class MLServerTarget:
    """A real MLServer serving a demo model or the user's model folder on loopback; use as a context
    manager."""

    def __init__(
        self,
        settings: MLServerSettings | None = None,
        *,
        ready_timeout_s: float = 90.0,
        stop_grace_s: float = 10.0,
        workdir: Path | None = None,
        log_path: Path | None = None,
        keep_workdir: bool = False,
        kill_with_parent: bool = True,
    ) -> None:
        self._settings = settings if settings is not None else MLServerSettings()
        self._ready_timeout_s = ready_timeout_s
        self._stop_grace_s = stop_grace_s
        self._given_workdir = workdir
        self._given_log_path = log_path
        self._keep_workdir = keep_workdir or workdir is not None
        self._kill_with_parent = kill_with_parent
        self._workdir: Path | None = None
        self._ports: _Ports | None = None
        self._process: ManagedProcess | None = None
        self._startup_s: float | None = None
        self._train_s: float | None = None
        self._removed_env: list[str] = []
        self._onnx_threads: tuple[int, str] | None = None
        self._seen_pids: frozenset[int] = frozenset()

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> MLServerTarget:
        if self._process is not None:
            raise TargetError("MLServer target already started")
        atexit.register(self.stop)  # removes the temporary model repository too
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        s = self._settings
        if self._given_workdir is not None:
            workdir = Path(self._given_workdir)
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(tempfile.mkdtemp(prefix="satpoint-mlserver-"))
        self._workdir = workdir
        env = self._server_env()
        model_dir = workdir / s.served_model_name
        if s.model_dir is not None:
            _link_entries(s.model_dir, model_dir)
        else:
            if s.runtime == "onnx":
                self._onnx_threads = _onnx_threads(env)  # a bad OMP_NUM_THREADS fails here, not in MLServer
            t0 = time.monotonic()
            write_demo_artifact(s.demo_model, s.runtime, model_dir)
            self._train_s = time.monotonic() - t0
        _write_json(model_dir / _MODEL_SETTINGS_FILE, self._model_settings())
        log_path = self._given_log_path if self._given_log_path is not None else workdir / "mlserver.log"

        for attempt in range(1, _START_ATTEMPTS + 1):
            http, grpc, metrics_port = free_ports(3, _HOST)
            self._ports = _Ports(http=http, grpc=grpc, metrics=metrics_port)
            _write_json(workdir / "settings.json", self._server_settings(workdir, self._ports))
            process = ManagedProcess(
                [sys.executable, "-c", _MLSERVER_MAIN, "start", str(workdir)],
                log_path=log_path,
                env=env,
                cwd=workdir,
                cpus=s.cpus,
                name="mlserver",
                kill_with_parent=self._kill_with_parent,
            )
            self._process = process
            t_start = time.monotonic()
            process.start()
            try:
                process.wait_ready(
                    self._is_ready,
                    self._ready_timeout_s,
                    f"MLServer model {s.served_model_name!r}",
                    fail_patterns=_BIND_FAILURES,
                )
            except TargetError:
                self._remember_pids()
                process.stop(min(self._stop_grace_s, _FAILED_START_GRACE_S))
                self._remember_pids()
                log = process.log_text().lower()
                if attempt < _START_ATTEMPTS and any(p in log for p in _BIND_FAILURES):
                    continue
                raise
            self._startup_s = time.monotonic() - t_start
            self._remember_pids()
            return

    def stop(self) -> None:
        """Stop MLServer and every process it started; verify all pids seen are gone. Idempotent."""
        process = self._process
        survivors: list[int] = []
        try:
            if process is not None:
                self._remember_pids()
                process.stop(self._stop_grace_s)
                survivors = process.alive_pids()
                if survivors:
                    raise TargetError(f"MLServer processes survived stop (pids {survivors}); see {process.log_path}")
        finally:
            if self._workdir is not None and not self._keep_workdir and not survivors:
                shutil.rmtree(self._workdir, ignore_errors=True)
            atexit.unregister(self.stop)

    def __enter__(self) -> MLServerTarget:
        if self._process is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- what callers need -----------------------------------------------------------------------------

    @property
    def settings(self) -> MLServerSettings:
        return self._settings

    @property
    def model_name(self) -> str:
        """The name the model is served under."""
        return self._settings.served_model_name

    @property
    def rest_url(self) -> str:
        return f"http://{_HOST}:{self._require_ports().http}"

    @property
    def grpc_address(self) -> str:
        return f"{_HOST}:{self._require_ports().grpc}"

    def target(self, protocol: str = "rest", **kwargs: Any) -> Target:
        """The running server as a load-test target (``protocol`` rest or grpc; other ``Target`` fields
        by keyword, e.g. ``headers``)."""
        url = self.grpc_address if protocol == "grpc" else self.rest_url
        return Target(url=url, model=self.model_name, protocol=protocol, **kwargs)

    @property
    def metrics_url(self) -> str:
        return f"http://{_HOST}:{self._require_ports().metrics}/metrics"

    @property
    def pid(self) -> int:
        return self._require_process().pid

    @property
    def log_path(self) -> Path:
        return self._require_process().log_path

    @property
    def startup_s(self) -> float | None:
        """Seconds from process start to ``/v2/health/ready`` == 200 (model training not included)."""
        return self._startup_s

    @property
    def seen_pids(self) -> frozenset[int]:
        """Every pid of the server tree observed so far (main process, workers, resource tracker)."""
        self._remember_pids()
        return self._seen_pids

    def pids(self) -> list[int]:
        """The server's live pids now: main process first, then its descendants."""
        process = self._require_process()
        if not process.running:
            return []
        pids = [process.pid, *process.descendants()]
        self._remember_pids()
        return pids

    def log_tail(self, lines: int = 40) -> str:
        return self._require_process().log_tail(lines)

    def ready(self) -> bool:
        return self._process is not None and self._process.running and self._is_ready()

    def info(self) -> dict[str, Any]:
        """Facts for the results file header: versions, settings, the model served, ports, pinning, log
        path, timings."""
        ports = self._ports
        s = self._settings
        packages = _VERSIONED_PACKAGES + (_ONNX_PACKAGES if s.model_dir is None and s.runtime == "onnx" else ())
        return {
            "kind": "mlserver",
            "versions": _package_versions(packages),
            "python": sys.version.split()[0],
            "settings": s.to_dict(),
            "model": self._model_info(),
            "host": _HOST,
            "ports": {"http": ports.http, "grpc": ports.grpc, "metrics": ports.metrics} if ports else None,
            "rest_url": self.rest_url if ports else None,
            "grpc_address": self.grpc_address if ports else None,
            "metrics_url": self.metrics_url if ports else None,
            "cpus": list(self._settings.cpus) if self._settings.cpus is not None else None,
            "pid": self._process.pid if self._process is not None else None,
            "log_path": str(self._process.log_path) if self._process is not None else None,
            "workdir": str(self._workdir) if self._workdir is not None else None,
            "workdir_kept": self._keep_workdir,
            "removed_env": list(self._removed_env),
            "train_s": self._train_s,
            "startup_s": self._startup_s,
        }

    # -- internals -------------------------------------------------------------------------------------

    def _model_info(self) -> dict[str, Any]:
        s = self._settings
        batching = {"max_batch_size": s.effective_max_batch_size, "max_batch_time_s": s.effective_max_batch_time_s}
        if s.model_dir is not None:
            folder = s.folder_settings() or {}
            overridden = {
                key: {"yours": folder.get(key), "used": value}
                for key, given, value in (
                    ("max_batch_size", s.max_batch_size, s.max_batch_size),
                    ("max_batch_time", s.max_batch_time_s, s.max_batch_time_s),
                )
                if given is not None and folder.get(key) != given
            }
            replaced = ", ".join(f"{k} ({v['yours']} -> {v['used']})" for k, v in overridden.items())
            return {
                "name": s.served_model_name,
                "source": "model_dir",
                "model_dir": str(s.model_dir.resolve()),
                "implementation": folder.get("implementation"),
                "parameters": folder.get("parameters"),
                "inputs": folder.get("inputs", []),
                "outputs": folder.get("outputs", []),
                **batching,
                "overridden": overridden,
                "note": "served from your model-settings.json; "
                + (f"satpoint replaced {replaced}" if replaced else "satpoint replaced nothing but the name"),
            }
        spec = demo_model(s.demo_model)
        info: dict[str, Any] = {
            "name": s.served_model_name,
            "source": "demo_model",
            "demo_model": spec.name,
            "estimator": spec.estimator,
            "dataset": spec.dataset,
            "n_features": spec.n_features,
            "runtime": s.runtime,
            "implementation": _RUNTIME_IMPLEMENTATIONS[s.runtime],
            "artifact": ONNX_FILENAME if s.runtime == "onnx" else MODEL_FILENAME,
            "inputs": self._declared_inputs(),
            "outputs": self._declared_outputs(),
            **batching,
        }
        if s.runtime == "onnx":
            threads, source = self._onnx_threads or _onnx_threads(self._server_env_preview())
            info["onnx"] = {
                "provider": "CPUExecutionProvider",
                "intra_op_num_threads": threads,
                "inter_op_num_threads": 1,
                "threads_from": source,
                "zipmap": False,
            }
        return info

    def _declared_inputs(self) -> list[dict[str, Any]]:
        s = self._settings
        n_features = DEMO_MODELS[s.demo_model].n_features
        return [{"name": s.input_name, "datatype": s.input_datatype, "shape": [-1, n_features]}]

    @staticmethod
    def _declared_outputs() -> list[dict[str, Any]]:
        return [{"name": "predict", "datatype": "INT64", "shape": [-1, 1]}]

    def _model_settings(self) -> dict[str, Any]:
        s = self._settings
        if s.model_dir is not None:
            return _folder_model_settings(s)
        artifact = ONNX_FILENAME if s.runtime == "onnx" else MODEL_FILENAME
        return {
            "name": s.served_model_name,
            "implementation": _RUNTIME_IMPLEMENTATIONS[s.runtime],
            "parameters": {"uri": f"./{artifact}"},
            "max_batch_size": s.effective_max_batch_size,
            "max_batch_time": s.effective_max_batch_time_s,
            "inputs": self._declared_inputs(),
            "outputs": self._declared_outputs(),
        }

    def _server_settings(self, workdir: Path, ports: _Ports) -> dict[str, Any]:
        s = self._settings
        return {
            "host": _HOST,
            "http_port": ports.http,
            "grpc_port": ports.grpc,
            "metrics_port": ports.metrics,
            "debug": s.debug,
            "parallel_workers": s.parallel_workers,
            "metrics_dir": str(workdir / ".metrics"),
            "environments_dir": str(workdir / ".envs"),
            "load_models_at_startup": True,
        }

    def _server_env(self) -> dict[str, str]:
        env = self._server_env_preview()
        self._removed_env = sorted(k for k in os.environ if k.upper().startswith("MLSERVER_"))
        return env

    def _server_env_preview(self) -> dict[str, str]:
        s = self._settings
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("MLSERVER_")}
        env["PYTHONUNBUFFERED"] = "1"
        if env.get("PYTHONPATH"):
            # the server runs in its temporary folder: relative entries would point elsewhere there
            env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
        if s.model_dir is None and s.runtime == "onnx":
            # MLServer imports satpoint's ONNX runtime: make it this satpoint, wherever it was imported from
            _prepend_pythonpath(env, _satpoint_root())
        env.update(s.env)
        return env

    def _is_ready(self) -> bool:
        # /v2/health/ready alone is not enough: when the model fails to load, MLServer 1.7.1 answers 200
        # there (no models, so "all" are ready) for a moment before it shuts itself down.
        return (
            _http_status(f"{self.rest_url}/v2/health/ready", timeout_s=2.0) == 200
            and _http_status(f"{self.rest_url}/v2/models/{self.model_name}/ready", timeout_s=2.0) == 200
        )

    def _remember_pids(self) -> None:
        if self._process is not None:
            self._process.descendants()
            self._seen_pids = self._seen_pids | self._process.seen_pids

    def _require_ports(self) -> _Ports:
        if self._ports is None:
            raise TargetError("MLServer target not started")
        return self._ports

    def _require_process(self) -> ManagedProcess:
        if self._process is None:
            raise TargetError("MLServer target not started")
        return self._process


# -- metrics ---------------------------------------------------------------------------------------------


def parse_prometheus_text(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples ``(name, labels, value)`` from Prometheus text exposition format (comments skipped,
    optional timestamps ignored, unparsable lines skipped)."""
    samples: list[tuple[str, dict[str, str], float]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        labels: dict[str, str] = {}
        brace = line.find("{")
        space = line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
            parsed = _parse_labels(line, brace + 1)
            if parsed is None:
                continue
            labels, end = parsed
            rest = line[end:].split()
        else:
            parts = line.split()
            name, rest = parts[0], parts[1:]
        if not rest:
            continue
        try:
            value = float(rest[0])
        except ValueError:
            continue
        samples.append((name, labels, value))
    return samples


def _parse_labels(line: str, pos: int) -> tuple[dict[str, str], int] | None:
    labels: dict[str, str] = {}
    n = len(line)
    while pos < n:
        while pos < n and line[pos] in " ,":
            pos += 1
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        eq = line.find("=", pos)
        if eq == -1 or eq + 1 >= n or line[eq + 1] != '"':
            return None
        key = line[pos:eq].strip()
        pos = eq + 2
        chars: list[str] = []
        while pos < n and line[pos] != '"':
            if line[pos] == "\\" and pos + 1 < n:
                nxt = line[pos + 1]
                chars.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, nxt))
                pos += 2
            else:
                chars.append(line[pos])
                pos += 1
        if pos >= n:
            return None
        labels[key] = "".join(chars)
        pos += 1
    return None


def scrape_metrics(
    metrics_url: str,
    *,
    prefixes: Sequence[str] = DEFAULT_METRIC_PREFIXES,
    model: str | None = None,
    timeout_s: float = 2.0,
) -> dict[str, float]:
    """Scrape MLServer's ``/metrics`` and return ``{metric_name: value}`` summed over label sets, for
    names starting with one of ``prefixes`` (histogram ``_bucket`` and ``_created`` series dropped).
    With ``model``, series carrying a ``model`` label are kept only for that model. Counters are
    cumulative since start: diff two scrapes to get a stage's server-side numbers, e.g. mean inference
    time = Δ``model_infer_request_duration_sum`` / Δ``model_infer_request_duration_count``."""
    body = _http_get(metrics_url, timeout_s=timeout_s)
    totals: dict[str, float] = {}
    for name, labels, value in parse_prometheus_text(body):
        if name.endswith(("_bucket", "_created")) or not name.startswith(tuple(prefixes)):
            continue
        if model is not None and "model" in labels and labels["model"] != model:
            continue
        totals[name] = totals.get(name, 0.0) + value
    return totals


# -- small helpers ---------------------------------------------------------------------------------------


def _opener() -> urllib.request.OpenerDirector:
    # No proxies: an http_proxy in the environment must not capture loopback control calls.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_status(url: str, timeout_s: float) -> int:
    try:
        with _opener().open(url, timeout=timeout_s) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


def _http_get(url: str, timeout_s: float) -> str:
    try:
        with _opener().open(url, timeout=timeout_s) as resp:
            data: bytes = resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise TargetError(f"GET {url} failed: {exc}") from exc
    return data.decode("utf-8", errors="replace")


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _onnx_threads(env: Mapping[str, str]) -> tuple[int, str]:
    """The intra-op thread count the ONNX runtime will use in a server with environment ``env`` (satpoint
    writes no ``parameters.extra.intra_op_num_threads`` for the demo models) and where it comes from."""
    threads = intra_op_threads(None, env)
    return threads, "OMP_NUM_THREADS" if env.get("OMP_NUM_THREADS", "").strip() else "default (1)"


def _satpoint_root() -> Path:
    import satpoint

    return Path(satpoint.__file__).resolve().parent.parent


def _prepend_pythonpath(env: dict[str, str], root: Path) -> None:
    """Put ``root`` first on the server's PYTHONPATH, unless it is a site directory (already on the path,
    and putting it before the standard library could shadow it)."""
    import site

    sites = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if root in sites:
        return
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if any(os.path.isabs(p) and Path(p).resolve() == root for p in parts):
        return
    env["PYTHONPATH"] = os.pathsep.join([str(root), *parts])


def _link_entries(source: Path, dest: Path) -> None:
    """``dest`` as a real folder holding a symlink to each entry of the user's ``source`` folder except its
    ``model-settings.json`` (satpoint writes its own there)."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(Path(source).resolve().iterdir()):
        if entry.name != _MODEL_SETTINGS_FILE:
            (dest / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())


def _folder_model_settings(s: MLServerSettings) -> dict[str, Any]:
    """The user's ``model-settings.json`` with what satpoint controls: the served name, batching when given,
    and a relative ``parameters.uri`` made absolute (resolved against the user's folder, as MLServer would)."""
    assert s.model_dir is not None
    doc = s.folder_settings() or {}
    doc["name"] = s.served_model_name
    if s.max_batch_size is not None:
        doc["max_batch_size"] = s.max_batch_size
    if s.max_batch_time_s is not None:
        doc["max_batch_time"] = s.max_batch_time_s
    params = doc.get("parameters")
    uri = params.get("uri") if isinstance(params, dict) else None
    if isinstance(params, dict) and isinstance(uri, str) and uri:
        scheme = urllib.parse.urlparse(uri).scheme
        if scheme in ("", "file"):
            path = urllib.parse.urlparse(uri).path if scheme == "file" else uri
            if not os.path.isabs(path):
                params["uri"] = os.path.normpath(s.model_dir.resolve() / path)
    return doc


def _package_versions(packages: Sequence[str] = _VERSIONED_PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions
