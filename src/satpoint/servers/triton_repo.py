"""The embedded Triton in explicit model-control mode over a model repository on disk, for cold starts.

The embedded Triton of ``servers.triton`` runs through PyTriton, whose models live in PyTriton's own
process and are loaded with configuration overrides: an outside unload of one cannot be followed by a
load (PyTriton's proxy handshake happens once; the reload fails "Model initialize error ... EOFError").
This target runs the ``tritonserver`` PyTriton ships (``nvidia-pytriton``, the ``satpoint[triton]``
extra) directly, with ``--model-control-mode=explicit --load-model=*`` over a repository satpoint writes:
N copies of a demo model (``iris-000`` …, each trained on its own bootstrap sample:
``servers.many_models``), each a Python-backend model (``model.py`` loading its ``model.joblib`` with
scikit-learn).  So the repository API's load and unload work as on any Triton in explicit mode.

Facts this module relies on (nvidia-pytriton 0.7.0, Triton 2.51):

- the Python backend runs ``backends/python/triton_python_backend_stub``: PyTriton keeps one per Python
  version under ``tritonserver/python_backend_stubs/X.Y``; the backend folder is assembled in the
  server's temporary folder (links to PyTriton's files, the stub of this interpreter's version);
- the stub embeds this interpreter's ``libpython`` (its ``LIBDIR`` goes first on ``LD_LIBRARY_PATH``,
  as in ``servers.triton``) and finds scikit-learn through ``PYTHONPATH`` (this environment's
  site-packages); ``tritonserver`` needs PyTriton's bundled libraries (``nvidia_pytriton.libs``);
- the repository API is restricted to an access token of this start (``access_headers``), as PyTriton
  restricts it: a load accepts ``file:`` overrides that the Python backend would run.

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
from dataclasses import dataclass
from importlib import util
from pathlib import Path
from typing import Any, ClassVar

from satpoint.servers.demo_model import demo_model
from satpoint.servers.embedded_base import HOST, EmbeddedServer, Ports, http_status, package_versions
from satpoint.servers.many_models import copy_names, write_demo_copies
from satpoint.servers.process import ManagedProcess, TargetError, free_ports
from satpoint.servers.triton import ACCESS_HEADER, TRITON_EXTRA_HINT, triton_env

_START_ATTEMPTS = 3
_BIND_FAILURES = ("address already in use", "failed to bind", "socket '")

_MODEL_PY = '''"""A demo model served by Triton's Python backend (written by satpoint.servers.triton_repo)."""

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
instance_group [{{ count: 1, kind: KIND_CPU }}]
dynamic_batching {{ }}
"""


def pytriton_root() -> Path | None:
    """PyTriton's package folder, found without importing it (None: not installed)."""
    spec = util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass(frozen=True)
class TritonRepoSettings:
    """N copies of a demo model in a repository, served by Triton in explicit model-control mode."""

    demo_model: str = "iris"
    models: int = 3
    input_name: str = "input-0"
    input_datatype: str = "FP32"
    max_batch_size: int = 32
    cpus: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        spec = demo_model(self.demo_model)
        if getattr(spec, "streaming", False):
            raise ValueError(f"the repository Triton serves classifiers; {self.demo_model} is a text generator")
        if self.models < 1:
            raise ValueError(f"models must be >= 1, got {self.models}")
        if self.input_datatype not in ("FP32", "FP64"):
            raise ValueError(f"input_datatype must be FP32 or FP64, got {self.input_datatype!r}")

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(copy_names(self.demo_model, self.models))


class TritonRepoTarget(EmbeddedServer):
    """Triton (PyTriton's binary) in explicit mode over a repository of demo-model copies; use as a context
    manager."""

    NAME: ClassVar[str] = "Triton"

    def __init__(
        self,
        settings: TritonRepoSettings | None = None,
        *,
        ready_timeout_s: float = 180.0,
        stop_grace_s: float = 15.0,
        kill_with_parent: bool = True,
    ) -> None:
        super().__init__(ready_timeout_s=ready_timeout_s, stop_grace_s=stop_grace_s, kill_with_parent=kill_with_parent)
        self._settings = settings if settings is not None else TritonRepoSettings()
        self._token = secrets.token_urlsafe(32)

    def _check_startable(self) -> None:
        if pytriton_root() is None:
            raise TargetError(TRITON_EXTRA_HINT)

    def _write_repository(self, workdir: Path) -> Path:
        s = self._settings
        spec = demo_model(s.demo_model)
        repo = workdir / "models"
        staging = workdir / "staging"
        write_demo_copies(s.demo_model, "sklearn", s.model_names, staging)
        model_py = _MODEL_PY.replace("{input}", s.input_name)
        for name in s.model_names:
            version = repo / name / "1"
            version.mkdir(parents=True)
            shutil.move(str(staging / name / "model.joblib"), version / "model.joblib")
            (version / "model.py").write_text(model_py, encoding="utf-8")
            config = _CONFIG.format(
                name=name,
                max_batch_size=s.max_batch_size,
                input=s.input_name,
                dtype=s.input_datatype,
                features=spec.n_features,
            )
            (repo / name / "config.pbtxt").write_text(config, encoding="utf-8")
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
        site = sysconfig.get_paths()["purelib"]
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        return env

    def _start(self) -> None:
        root = pytriton_root()
        assert root is not None
        workdir = Path(tempfile.mkdtemp(prefix="satpoint-triton-repo-"))
        self._workdir = workdir
        repo = self._write_repository(workdir)
        backends = self._backends(workdir, root)
        env = self._env(root)
        restrict = f"model-repository:{ACCESS_HEADER}={self._token}"
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
    def access_headers(self) -> dict[str, str]:
        """The header that opens this server's repository API (a secret, never recorded)."""
        return {ACCESS_HEADER: self._token}

    def info(self) -> dict[str, Any]:
        s = self._settings
        return {
            "kind": "triton",
            "mode": "explicit model control over a model repository (Python backend)",
            "versions": package_versions(("nvidia-pytriton", "scikit-learn", "numpy")),
            "python": sys.version.split()[0],
            "settings": {"demo_model": s.demo_model, "models": s.models, "max_batch_size": s.max_batch_size},
            "models": {"count": s.models, "names": list(s.model_names), "source": "demo_models"},
            "cpus": list(s.cpus) if s.cpus is not None else None,
            "startup_s": self._startup_s,
        }
