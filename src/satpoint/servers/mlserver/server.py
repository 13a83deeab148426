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
  ``satpoint.servers.artefacts.onnx_runtime``: it must be this satpoint) unless it is a site directory.
- Control-plane HTTP here bypasses any ``http_proxy`` from the environment (loopback only).
- A user's model folder is served as described in ``servers.mlserver.settings``.

Its Prometheus ``/metrics`` endpoint (``metrics_url``) is read by ``satpoint.observe``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from satpoint.servers.embedded_base import (
    HOST,
    EmbeddedServer,
    Ports,
    check_embedded_extra,
    package_versions,
    prepend_pythonpath,
    satpoint_root,
)
from satpoint.servers.limits.cgroups import ChildCgroup, check_available
from satpoint.servers.mlserver.folder_onnx import find_folder_onnx, write_folder_onnx
from satpoint.servers.mlserver.settings import (
    DEFAULT_RUNTIME,
    MODEL_SETTINGS_FILE,
    MLServerSettings,
    folder_model_settings,
    link_folder_entries,
    onnx_threads,
    repo_model_settings,
)
from satpoint.servers.models.demo import (
    DEMO_MODELS,
    artifact_filename,
    demo_model,
    serves_onnx,
    write_demo_artifact,
)
from satpoint.servers.models.many import copy_digests, load_span, models_info, tree_memory, write_demo_copies
from satpoint.servers.models.many import ready_timeout_s as many_ready_timeout_s
from satpoint.servers.models.textgen import TEXTGEN_SERVER_SETTINGS
from satpoint.servers.process import ManagedProcess, TargetError, free_ports

__all__ = [
    "MLServerSettings",
    "MLServerTarget",
]

_VERSIONED_PACKAGES = ("mlserver", "mlserver-sklearn", "scikit-learn", "uvloop", "numpy", "joblib")
_ONNX_PACKAGES = ("skl2onnx", "onnxruntime", "onnx")
_SKLEARN_IMPLEMENTATION = "mlserver_sklearn.SKLearnModel"
_ONNX_IMPLEMENTATION = "satpoint.servers.artefacts.onnx_runtime.OnnxModel"  # onnx, onnx-int8, pruned:F
_OPENVINO_IMPLEMENTATION = "satpoint.servers.artefacts.openvino_runtime.OpenVinoModel"


def _implementation(runtime: str) -> str:
    if runtime == "openvino":
        return _OPENVINO_IMPLEMENTATION
    return _ONNX_IMPLEMENTATION if serves_onnx(runtime) else _SKLEARN_IMPLEMENTATION


_START_ATTEMPTS = 3  # a free port can be taken between choosing it and MLServer binding it
_BIND_FAILURES = ("address already in use", "failed to bind")  # uvicorn / grpc wording
_FAILED_START_GRACE_S = 2.0  # a start hung on a bind error ignores SIGTERM
_MLSERVER_MAIN = "import sys; from mlserver.cli.main import main; sys.argv[0] = 'mlserver'; main()"


class MLServerTarget(EmbeddedServer):
    """A real MLServer serving a demo model or the user's model folder on loopback; use as a context
    manager."""

    NAME: ClassVar[str] = "MLServer"

    def __init__(
        self,
        settings: MLServerSettings | None = None,
        *,
        ready_timeout_s: float | None = None,
        stop_grace_s: float = 10.0,
        workdir: Path | None = None,
        log_path: Path | None = None,
        keep_workdir: bool = False,
        kill_with_parent: bool = True,
    ) -> None:
        self._settings = settings if settings is not None else MLServerSettings()
        if ready_timeout_s is None:  # MLServer loads every model in every worker before it is ready
            ready_timeout_s = many_ready_timeout_s(self.models, self._settings.parallel_workers)
        super().__init__(ready_timeout_s=ready_timeout_s, stop_grace_s=stop_grace_s, kill_with_parent=kill_with_parent)
        self._given_workdir = workdir
        self._given_log_path = log_path
        self._keep_workdir = keep_workdir or workdir is not None
        self._train_s: float | None = None
        self._removed_env: list[str] = []
        self._onnx_threads: tuple[int, str] | None = None
        self._cgroup: ChildCgroup | None = None
        self._digests: list[str] = []
        self._memory_at_ready: dict[str, Any] | None = None
        self._load_span: dict[str, Any] | None = None

    # -- lifecycle

    def _check_startable(self) -> None:
        check_embedded_extra()  # MLServer and scikit-learn are the `embedded` extra
        # a CPU or memory limit that cannot be applied here is refused before anything starts
        check_available(self._settings.limits)

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
        if s.demo_models is not None:
            t0 = time.monotonic()
            names = s.served_model_names
            self._digests = copy_digests(write_demo_copies(s.demo_model, s.runtime, names, workdir))
            self._train_s = time.monotonic() - t0
            for name in names:
                _write_json(workdir / name / MODEL_SETTINGS_FILE, self._model_settings(name))
        elif s.model_repo is not None:
            for m in s.repo_models:
                link_folder_entries(m.folder, workdir / m.name)
                _write_json(workdir / m.name / MODEL_SETTINGS_FILE, repo_model_settings(s, m))
        elif s.model_dir is not None and s.runtime != DEFAULT_RUNTIME:
            # the user's ONNX model (quantized for onnx-int8) written here, in the server's own folder
            self._onnx_threads = onnx_threads(env)
            write_folder_onnx(find_folder_onnx(s.model_dir, s.runtime), s.runtime, model_dir)
        elif s.model_dir is not None:
            link_folder_entries(s.model_dir, model_dir)
        else:
            if serves_onnx(s.runtime):
                self._onnx_threads = onnx_threads(env)  # a bad OMP_NUM_THREADS fails here, not in MLServer
            t0 = time.monotonic()
            write_demo_artifact(s.demo_model, s.runtime, model_dir)
            self._train_s = time.monotonic() - t0
        if s.demo_models is None and s.model_repo is None:
            _write_json(model_dir / MODEL_SETTINGS_FILE, self._model_settings())
        log_path = self._given_log_path if self._given_log_path is not None else workdir / "mlserver.log"

        for attempt in range(1, _START_ATTEMPTS + 1):
            http, grpc, metrics_port = free_ports(3, HOST)
            self._ports = Ports(http=http, grpc=grpc, metrics=metrics_port)
            _write_json(workdir / "settings.json", self._server_settings(workdir, self._ports))
            argv = [sys.executable, "-c", _MLSERVER_MAIN, "start", str(workdir)]
            if s.limits.any:
                self._remove_cgroup()  # a failed attempt's, emptied by its stop
                self._cgroup = ChildCgroup.create(s.limits)
                argv = self._cgroup.wrap(argv)  # in the cgroup from its first instruction
            process = ManagedProcess(
                argv,
                log_path=log_path,
                env=env,
                cwd=workdir,
                cpus=s.cpus,
                name="mlserver",
                kill_with_parent=self._kill_with_parent,
            )
            self._process = process
            t_start, started_unix = time.monotonic(), time.time()
            process.start()
            try:
                process.wait_ready(
                    self._is_ready,
                    self._ready_timeout_s,
                    f"MLServer model {s.served_model_name!r}",
                    fail_patterns=_BIND_FAILURES,
                    abort=self._cgroup.oom_message if self._cgroup is not None else None,
                )
            except TargetError as e:
                self._remember_pids()
                process.stop(min(self._stop_grace_s, _FAILED_START_GRACE_S))
                self._remember_pids()
                oom = self._cgroup.oom_message() if self._cgroup is not None else None
                if oom is not None and oom not in str(e):
                    raise TargetError(f"MLServer was {oom} while starting (log: {process.log_path})") from e
                log = process.log_text().lower()
                if attempt < _START_ATTEMPTS and any(p in log for p in _BIND_FAILURES):
                    continue
                raise
            self._startup_s = time.monotonic() - t_start
            self._remember_pids()
            self._memory_at_ready = tree_memory(self.pids())
            if self.models > 1 or s.demo_models is not None:  # the log says when each model loaded
                self._load_span = load_span(process.log_text(), started_unix)
            return

    def _keep_workdir_after_stop(self) -> bool:
        return self._keep_workdir

    def stop(self) -> None:
        """Stop the server (see ``EmbeddedServer.stop``), then remove its cgroup, on every path."""
        try:
            super().stop()
        finally:
            self._remove_cgroup()

    def _remove_cgroup(self) -> None:
        if self._cgroup is not None and not self._cgroup.removed:
            self._cgroup.remove()

    @property
    def cgroup(self) -> ChildCgroup | None:
        """The cgroup holding the server when it runs with a CPU or memory limit (its counters stay readable
        after the stop: ``stats()``, ``oom_message()``)."""
        return self._cgroup

    # -- what callers need -----------------------------------------------------------------------------

    @property
    def settings(self) -> MLServerSettings:
        return self._settings

    @property
    def model_name(self) -> str:
        """The name the model is served under."""
        return self._settings.served_model_name

    @property
    def model_names(self) -> tuple[str, ...]:
        """Every model the server serves (one unless ``demo_models`` or ``model_repo``)."""
        return self._settings.served_model_names

    @property
    def memory_at_ready(self) -> dict[str, Any] | None:
        """The process tree's memory when the server had just become ready (``many_models.tree_memory``)."""
        return self._memory_at_ready

    @property
    def log_path(self) -> Path:
        return self._require_process().log_path

    def log_tail(self, lines: int = 40) -> str:
        return self._require_process().log_tail(lines)

    def ready(self) -> bool:
        return self._process is not None and self._process.running and self._is_ready()

    def info(self) -> dict[str, Any]:
        """Facts for the results file header: versions, settings, the model served, ports, pinning, log
        path, timings."""
        ports = self._ports
        s = self._settings
        packages = _VERSIONED_PACKAGES + (_ONNX_PACKAGES if s.model_dir is None and serves_onnx(s.runtime) else ())
        packages += ("openvino",) if s.model_dir is None and s.runtime == "openvino" else ()
        return {
            "kind": "mlserver",
            "versions": package_versions(packages),
            "python": sys.version.split()[0],
            "settings": s.to_dict(),
            "model": self._model_info(),
            "host": HOST,
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
            "limits": self._cgroup.info() if self._cgroup is not None else None,
            "models": self._models_info(),
            "memory_at_ready": self._memory_at_ready,
        }

    def _models_info(self) -> dict[str, Any]:
        """How many models the server holds, their names, and (with many) how they were made and loaded."""
        load = {"startup_s": self._startup_s, "workers": self._settings.parallel_workers, **(self._load_span or {})}
        return models_info(self._settings, self.model_names, self._digests, load)

    # -- internals -------------------------------------------------------------------------------------

    def _model_info(self) -> dict[str, Any]:
        s = self._settings
        batching = {"max_batch_size": s.effective_max_batch_size, "max_batch_time_s": s.effective_max_batch_time_s}
        if s.model_repo is not None:
            return {
                "name": s.served_model_name,
                "source": "model_repo",
                "model_repo": str(s.model_repo.resolve()),
                "folders": [
                    {"name": m.name, "folder": str(m.folder), "implementation": m.settings.get("implementation")}
                    for m in s.repo_models
                ],
                **batching,
                "note": "every model folder served from its own model-settings.json under its own name",
            }
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
            if s.runtime != DEFAULT_RUNTIME:
                served = folder_model_settings(s)
                return {
                    "name": s.served_model_name,
                    "source": "model_dir",
                    "model_dir": str(s.model_dir.resolve()),
                    "runtime": s.runtime,
                    "onnx_file": str(find_folder_onnx(s.model_dir, s.runtime).resolve()),
                    "implementation": served["implementation"],
                    "artifact": "model.onnx",
                    **batching,
                    "overridden": overridden,
                    "note": f"your ONNX model served through satpoint's runtime ({s.runtime}"
                    + (", quantized with onnxruntime's quantize_dynamic" if s.runtime == "onnx-int8" else "")
                    + ") from a copy in the server's folder",
                }
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
            "implementation": _implementation(s.runtime),
            "artifact": artifact_filename(s.runtime),
            "inputs": self._declared_inputs(),
            "outputs": self._declared_outputs(),
            **batching,
        }
        if spec.streaming:  # the textgen model: its own runtime, artefact, input and output
            served = s.textgen_model_settings(s.served_model_name)
            info.update(implementation=served["implementation"], artifact="model.npz", inputs=served["inputs"])
            info.update(outputs=served["outputs"], max_tokens=served["parameters"]["extra"]["max_tokens"])
        if s.runtime == "openvino":
            threads, source = self._onnx_threads or onnx_threads(self._server_env_preview())
            info["openvino"] = {
                "device": "CPU",
                "inference_num_threads": threads,
                "num_streams": 1,
                "inference_precision": "f32",
                "threads_from": source,
                "served_output": "probabilities (label = argmax)",
            }
        elif serves_onnx(s.runtime):
            threads, source = self._onnx_threads or onnx_threads(self._server_env_preview())
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

    def _model_settings(self, name: str | None = None) -> dict[str, Any]:
        s = self._settings
        if s.model_dir is not None:
            return folder_model_settings(s)
        if demo_model(s.demo_model).streaming:
            return s.textgen_model_settings(name or s.served_model_name)
        artifact = artifact_filename(s.runtime)
        return {
            "name": name or s.served_model_name,
            "implementation": _implementation(s.runtime),
            "parameters": {"uri": f"./{artifact}"},
            "max_batch_size": s.effective_max_batch_size,
            "max_batch_time": s.effective_max_batch_time_s,
            "inputs": self._declared_inputs(),
            "outputs": self._declared_outputs(),
        }

    def _server_settings(self, workdir: Path, ports: Ports) -> dict[str, Any]:
        s = self._settings
        return {
            "host": HOST,
            "http_port": ports.http,
            "grpc_port": ports.grpc,
            "metrics_port": ports.metrics,
            "debug": s.debug,
            "parallel_workers": s.parallel_workers,
            "metrics_dir": str(workdir / ".metrics"),
            "environments_dir": str(workdir / ".envs"),
            "load_models_at_startup": True,
            **(TEXTGEN_SERVER_SETTINGS if demo_model(s.demo_model).streaming else {}),
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
        if s.model_dir is None and (serves_onnx(s.runtime) or demo_model(s.demo_model).streaming):
            # MLServer imports satpoint's ONNX or textgen runtime: make it this satpoint, wherever it was imported from
            prepend_pythonpath(env, satpoint_root())
        env.update(s.env)
        return env


# -- small helpers ---------------------------------------------------------------------------------------


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
