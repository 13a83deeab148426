"""The embedded Triton in explicit model-control mode over a model repository on disk: for cold starts
(``coldstart --server triton``) and for many models (``find``/``sweep --server triton --demo-models N``).

The embedded Triton of ``servers.triton.server`` runs through PyTriton, whose models live in PyTriton's own
process and are loaded with configuration overrides: an outside unload of one cannot be followed by a
load (PyTriton's proxy handshake happens once; the reload fails "Model initialize error ... EOFError").
This target runs the ``tritonserver`` PyTriton ships (``nvidia-pytriton``, the ``satpoint[triton]``
extra) directly, with ``--model-control-mode=explicit --load-model=*`` over a repository satpoint writes:
N copies of a demo model (``iris-000`` …, each trained on its own bootstrap sample:
``servers.models.many``), each a Python-backend model (``model.py`` loading its ``model.joblib`` with
scikit-learn).  So the repository API's load and unload work as on any Triton in explicit mode.

Facts this module relies on (nvidia-pytriton 0.7.0, Triton 2.51):

- the Python backend runs ``backends/python/triton_python_backend_stub``: PyTriton keeps one per Python
  version under ``tritonserver/python_backend_stubs/X.Y``; the backend folder is assembled in the
  server's temporary folder (links to PyTriton's files, the stub of this interpreter's version);
- the stub embeds this interpreter's ``libpython`` (its ``LIBDIR`` goes first on ``LD_LIBRARY_PATH``,
  as in ``servers.triton.server``) and finds scikit-learn through ``PYTHONPATH`` (this environment's
  site-packages); ``tritonserver`` needs PyTriton's bundled libraries (``nvidia_pytriton.libs``);
- the endpoints PyTriton restricts (``RESTRICTED_ENDPOINTS``: shared memory, the repository API, trace and
  logging) are restricted to an access token of this start (``access_headers``), as on PyTriton's server:
  a load accepts ``file:`` overrides that the Python backend would run, a system shared-memory region maps
  a file of the caller's choosing into the server, and trace and log settings name files it writes.

Neither PyTriton nor tritonclient is imported here (their protobuf names clash with MLServer's).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, replace
from importlib import util
from pathlib import Path
from typing import Any, ClassVar

from satpoint.endpoints.spec import Target
from satpoint.errors import ConfigError
from satpoint.servers.embedded_base import HOST, EmbeddedServer, Ports, http_status, package_versions
from satpoint.servers.models.demo import demo_model
from satpoint.servers.models.many import (
    MAX_MODELS,
    copies_info,
    copy_digests,
    copy_names,
    tree_memory,
    write_demo_copies,
)
from satpoint.servers.models.many import ready_timeout_s as ready_timeout
from satpoint.servers.process import ManagedProcess, TargetError, free_ports
from satpoint.servers.triton.server import (
    ACCESS_HEADER,
    KNOB_NAMES,
    RESTRICTED_ENDPOINTS,
    TRITON_EXTRA_HINT,
    TritonSettings,
    check_model_config,
    model_info,
    python_backend_env,
    pytriton_available,
    triton_env,
)

_START_ATTEMPTS = 3
_BIND_FAILURES = ("address already in use", "failed to bind", "socket '")

_MODEL_PY = '''"""A demo model served by Triton's Python backend (written by satpoint.servers.triton.repo)."""

import os

import joblib
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        folder = os.path.join(args["model_repository"], args["model_version"])
        self.model = joblib.load(os.path.join(folder, "model.joblib"))

    def execute(self, requests):
        responses = []
        for request in requests:
            features = pb_utils.get_input_tensor_by_name(request, "{input}").as_numpy()
            label = np.asarray(self.model.predict(features), dtype=np.int64).reshape(-1, 1)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("predict", label)]))
        return responses
'''

_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [{{ name: "{input}", data_type: TYPE_{dtype}, dims: [ {features} ] }}]
output [{{ name: "predict", data_type: TYPE_INT64, dims: [ 1 ] }}]
instance_group [{{ count: {instances}, kind: KIND_CPU }}]
dynamic_batching {{ {batching}}}
"""


def pytriton_root() -> Path | None:
    """PyTriton's package folder, found without importing it (None: not installed)."""
    spec = util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def restriction(token: str) -> str:
    """The value of ``--http-restricted-api`` and ``--grpc-restricted-protocol``: ``RESTRICTED_ENDPOINTS``
    (the endpoints PyTriton's server restricts) kept to ``token`` in the ``ACCESS_HEADER`` header."""
    return f"{','.join(RESTRICTED_ENDPOINTS)}:{ACCESS_HEADER}={token}"


@dataclass(frozen=True)
class TritonRepoSettings:
    """N copies of a demo model in a repository, served by Triton in explicit model-control mode, each with
    the model configuration's knobs of ``TritonSettings`` (``KNOB_NAMES``)."""

    demo_model: str = "iris"
    models: int = 3
    input_name: str = "input-0"
    input_datatype: str = "FP32"
    max_batch_size: int = 32
    cpus: tuple[int, ...] | None = None
    max_queue_delay_us: int = 0
    instances: int = 1
    preferred_batch_size: int | None = None  # None: Triton's default (the largest batch it can form)

    def __post_init__(self) -> None:
        spec = demo_model(self.demo_model)
        if getattr(spec, "streaming", False):
            raise ValueError(f"demo_models copies a classifier; {self.demo_model} is a text generator")
        if isinstance(self.models, bool) or not 1 <= int(self.models) <= MAX_MODELS:
            raise ValueError(f"models must be between 1 and {MAX_MODELS}, got {self.models!r}")
        check_model_config(self)

    @classmethod
    def from_settings(cls, settings: TritonSettings, models: int) -> TritonRepoSettings:
        """``models`` copies of the demo model ``settings`` (the embedded Triton's) names, with its knobs."""
        knobs = {k: getattr(settings, k) for k in ("input_name", "input_datatype", "cpus", *KNOB_NAMES)}
        return cls(settings.demo_model, int(models), **knobs)

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(copy_names(self.demo_model, self.models))

    def knobs(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in KNOB_NAMES}

    def config(self, name: str) -> str:
        """The ``config.pbtxt`` of the copy ``name``."""
        batching = f"max_queue_delay_microseconds: {self.max_queue_delay_us} " if self.max_queue_delay_us else ""
        if self.preferred_batch_size is not None:
            batching += f"preferred_batch_size: [ {self.preferred_batch_size} ] "
        return _CONFIG.format(
            name=name,
            max_batch_size=self.max_batch_size,
            input=self.input_name,
            dtype=self.input_datatype,
            features=demo_model(self.demo_model).n_features,
            instances=self.instances,
            batching=batching,
        )


class TritonRepoTarget(EmbeddedServer):
    """Triton (PyTriton's binary) in explicit mode over a repository of demo-model copies; use as a context
    manager."""

    NAME: ClassVar[str] = "Triton"

    def __init__(
        self,
        settings: TritonRepoSettings | None = None,
        *,
        ready_timeout_s: float | None = None,
        stop_grace_s: float = 15.0,
        kill_with_parent: bool = True,
    ) -> None:
        s = settings if settings is not None else TritonRepoSettings()
        if ready_timeout_s is None:  # 180 s, more for many models (a Python-backend stub per instance)
            ready_timeout_s = max(180.0, ready_timeout(s.models, s.instances))
        super().__init__(ready_timeout_s=ready_timeout_s, stop_grace_s=stop_grace_s, kill_with_parent=kill_with_parent)
        self._settings = s
        self._token = secrets.token_urlsafe(32)
        self._digests: list[str] = []
        self._memory_at_ready: dict[str, Any] | None = None

    def _check_startable(self) -> None:
        if pytriton_root() is None or not pytriton_available():
            raise TargetError(TRITON_EXTRA_HINT)

    def _write_repository(self, workdir: Path) -> Path:
        s = self._settings
        repo = workdir / "models"
        staging = workdir / "staging"
        self._digests = copy_digests(write_demo_copies(s.demo_model, "sklearn", s.model_names, staging))
        model_py = _MODEL_PY.replace("{input}", s.input_name)
        for name in s.model_names:
            version = repo / name / "1"
            version.mkdir(parents=True)
            shutil.move(str(staging / name / "model.joblib"), version / "model.joblib")
            (version / "model.py").write_text(model_py, encoding="utf-8")
            (repo / name / "config.pbtxt").write_text(s.config(name), encoding="utf-8")
        shutil.rmtree(staging, ignore_errors=True)
        return repo

    def _backends(self, workdir: Path, root: Path) -> Path:
        dist = root / "tritonserver"
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
        if not stub.exists():
            raise TargetError(f"PyTriton has no Python-backend stub for Python {version} ({stub})")
        backends = workdir / "backends"
        python = backends / "python"
        python.mkdir(parents=True)
        for entry in (dist / "backends" / "python").iterdir():
            if entry.name != "__pycache__":
                (python / entry.name).symlink_to(entry)
        (python / "triton_python_backend_stub").symlink_to(stub)
        return backends

    def _env(self, root: Path) -> dict[str, str]:
        env = triton_env(dict(os.environ), sysconfig.get_config_var("LIBDIR"))
        libs = root.parent / "nvidia_pytriton.libs"
        if not libs.is_dir():
            libs = root / "tritonserver" / "external_libs"
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (env.get("LD_LIBRARY_PATH", ""), str(libs)) if p)
        return python_backend_env(env)

    def _start(self) -> None:
        root = pytriton_root()
        assert root is not None
        workdir = Path(tempfile.mkdtemp(prefix="satpoint-triton-repo-"))
        self._workdir = workdir
        repo = self._write_repository(workdir)
        backends = self._backends(workdir, root)
        env = self._env(root)
        restrict = restriction(self._token)
        for attempt in range(1, _START_ATTEMPTS + 1):
            http, grpc, metrics_port = free_ports(3, HOST)
            self._ports = Ports(http=http, grpc=grpc, metrics=metrics_port)
            argv = [
                str(root / "tritonserver" / "bin" / "tritonserver"),
                f"--model-repository={repo}",
                "--model-control-mode=explicit",
                "--load-model=*",
                f"--backend-directory={backends}",
                f"--http-address={HOST}",
                f"--http-port={http}",
                f"--grpc-address={HOST}",
                f"--grpc-port={grpc}",
                f"--metrics-address={HOST}",
                f"--metrics-port={metrics_port}",
                "--allow-gpu-metrics=false",
                f"--http-restricted-api={restrict}",
                f"--grpc-restricted-protocol={restrict}",
            ]
            process = ManagedProcess(
                argv,
                log_path=workdir / f"triton-{attempt}.log",
                env=env,
                cwd=workdir,
                cpus=self._settings.cpus,
                name="triton",
                kill_with_parent=self._kill_with_parent,
            )
            self._process = process
            t0 = time.monotonic()
            process.start()
            try:
                process.wait_ready(self._is_ready, self._ready_timeout_s, "Triton's repository models")
            except TargetError as e:
                self._remember_pids()
                process.stop(5.0)
                log = process.log_text().lower()
                if attempt < _START_ATTEMPTS and any(p in log for p in _BIND_FAILURES):
                    continue
                raise TargetError(f"{e}\n--- Triton's log, last lines:\n{process.log_tail(15)}") from None
            self._startup_s = time.monotonic() - t0
            self._remember_pids()
            self._memory_at_ready = tree_memory(self.pids())
            return

    def _is_ready(self) -> bool:
        base = self.rest_url
        if http_status(f"{base}/v2/health/ready") != 200:
            return False
        return all(http_status(f"{base}/v2/models/{m}/ready") == 200 for m in self.model_names)

    def _keep_workdir_after_stop(self) -> bool:
        return self._process is not None and self._startup_s is None

    @property
    def model_name(self) -> str:
        return self._settings.model_names[0]

    @property
    def model_names(self) -> tuple[str, ...]:
        return self._settings.model_names

    @property
    def settings(self) -> TritonRepoSettings:
        return self._settings

    @property
    def access_headers(self) -> dict[str, str]:
        """The header that opens this server's restricted endpoints (``RESTRICTED_ENDPOINTS``: the repository
        API among them; a secret, never recorded)."""
        return {ACCESS_HEADER: self._token}

    @property
    def stats_url(self) -> str:
        """Triton's statistics of every model it serves (``GET``: cumulative counts and times per model)."""
        return f"{self.rest_url}/v2/models/stats"

    @property
    def memory_at_ready(self) -> dict[str, Any] | None:
        """The process tree's memory (``tritonserver`` and its stubs) when every copy had just become ready."""
        return self._memory_at_ready

    def target(self, protocol: str = "rest", **kwargs: Any) -> Target:
        """The running server as a load-test target: a uniform mix over every copy unless ``mix`` is given.
        A mix over the server's models (``--models-from-server``) is the copies it serves: its repository
        index, like its load and unload, is kept to its own token."""
        mix = kwargs.get("mix")
        if mix is not None and mix.resident is not None:
            raise ConfigError(
                "--resident loads and unloads models through the repository API, which the embedded Triton "
                "keeps to its own token: run it against a Triton you started (--url)"
            )
        if mix is not None and mix.from_server:
            kwargs["mix"] = replace(mix, models=self.model_names, from_server=False)
        return super().target(protocol, **kwargs)

    def info(self) -> dict[str, Any]:
        s = self._settings
        load = {"startup_s": self._startup_s, "instances": s.instances}
        return {
            "kind": "triton",
            "mode": "explicit model control over a model repository (Python backend)",
            "versions": package_versions(("nvidia-pytriton", "scikit-learn", "numpy")),
            "python": sys.version.split()[0],
            "settings": {"demo_model": s.demo_model, "models": s.models, **s.knobs()},
            "model": {**model_info(s, s.model_names[0], "python (model repository)"), "source": "demo_models"},
            "models": copies_info(s.demo_model, s.model_names, self._digests, load),
            "memory_at_ready": self._memory_at_ready,
            **self.where(s.cpus),
            "stats_url": self.stats_url if self._ports else None,
        }
