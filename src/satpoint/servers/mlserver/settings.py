"""How the embedded MLServer is configured: ``MLServerSettings`` (demo model or the user's model folder,
runtime, workers, batching, environment, CPUs) and the ``model-settings.json`` of a user's folder as
satpoint serves it.  Checked when made, so a bad setting fails before any process starts.

A user's model folder (``model_dir``) is served as ``<repo>/<name>/``: a real folder holding a symlink to
each of its entries (MLServer opens files and imports a custom runtime's module through them) and a
rewritten ``model-settings.json`` (its own, with the name satpoint serves, relative ``parameters.uri``
made absolute, and ``max_batch_size``/``max_batch_time`` replaced only when given to satpoint). The
user's folder is never written to."""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from satpoint.redact import REDACTED, is_secret_name, redact_text
from satpoint.servers.limits.cgroups import ResourceLimits
from satpoint.servers.mlserver.folder_onnx import (
    check_folder_onnx,
    find_folder_onnx,
    folder_implementation,
    folder_onnx_inputs,
)
from satpoint.servers.models.demo import ONNX_FILENAME, check_runtime, demo_model, intra_op_threads
from satpoint.servers.models.many import MAX_MODELS, RepoModel, copy_names, repo_models

__all__ = [
    "MLServerSettings",
    "folder_model_settings",
    "link_folder_entries",
    "onnx_threads",
    "read_model_folder",
    "repo_model_settings",
]

MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
INPUT_DATATYPES = ("FP32", "FP64")
MODEL_SETTINGS_FILE = "model-settings.json"
DEFAULT_DEMO_MODEL = "iris"
DEFAULT_RUNTIME = "sklearn"


@dataclass(frozen=True)
class MLServerSettings:
    """How the embedded MLServer is configured. ``debug`` defaults to False here (MLServer's own default
    is True, whose access log costs a lot of throughput).

    What it serves: the demo model ``demo_model`` (iris, digits-mlp, digits-forest) through ``runtime``
    (``sklearn``: ``mlserver_sklearn.SKLearnModel`` on ``model.joblib``; ``onnx``: the model converted with
    skl2onnx, served by :class:`satpoint.servers.artefacts.onnx_runtime.OnnxModel`), or the user's MLServer model
    folder ``model_dir`` (its ``model-settings.json``; mutually exclusive with a non-default demo model; with
    ``runtime`` onnx, onnx-int8 or openvino, the folder's one ``*.onnx`` model served through satpoint's
    runtime, see :mod:`satpoint.servers.mlserver.folder_onnx`, its ``model-settings.json`` then optional).
    ``model_name`` is the name it is served under; None: the demo model's name, or the folder's
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
    demo_model: str = DEFAULT_DEMO_MODEL
    runtime: str = DEFAULT_RUNTIME
    model_dir: Path | None = None
    #: a CPU limit as Kubernetes sets it (a CFS quota, cores per 100 ms period) and a memory limit (bytes):
    #: the server runs in a child cgroup of satpoint's own (``servers.limits.cgroups``); None: no limit
    cpu_limit: float | None = None
    memory_limit: int | None = None
    #: many models on one server (``servers.models.many``): N independent copies of the demo model, named
    #: ``<model_name or demo_model>-000``…, or every model folder under ``model_repo``; None: one model
    demo_models: int | None = None
    model_repo: Path | None = None
    #: the streaming demo model ``textgen`` only: characters per answer, the prompt's length (None: 64, 32)
    max_tokens: int | None = None
    input_len: int | None = None
    # the model folder's model-settings.json as read when these settings were made (not a parameter)
    _folder_settings: Mapping[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    # the model folders of model_repo as read when these settings were made (not a parameter)
    _repo_models: tuple[RepoModel, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.parallel_workers < 0:
            raise ValueError(f"parallel_workers must be >= 0 (0 = in the main process), got {self.parallel_workers}")
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 (1 = no adaptive batching), got {self.max_batch_size}")
        if self.max_batch_time_s is not None and self.max_batch_time_s < 0:
            raise ValueError(f"max_batch_time_s must be >= 0, got {self.max_batch_time_s}")
        if self.model_name is not None and not MODEL_NAME_RE.match(self.model_name):
            raise ValueError(f"model_name must match {MODEL_NAME_RE.pattern}, got {self.model_name!r}")
        self._check_textgen(demo_model(self.demo_model).streaming)  # demo_model: a ValueError naming valid ones
        if self.model_dir is None or self.runtime == DEFAULT_RUNTIME:
            check_runtime(self.runtime, self.demo_model)  # a ValueError naming the valid runtimes, or why not
        if self.model_dir is not None:
            if self.demo_model != DEFAULT_DEMO_MODEL:
                raise ValueError(
                    f"model_dir (your own model folder) and demo_model={self.demo_model!r} (a demo model) exclude "
                    "each other: give one or the other"
                )
            model_dir = Path(self.model_dir)
            object.__setattr__(self, "model_dir", model_dir)
            if self.runtime != DEFAULT_RUNTIME:
                # a user's ONNX model served through satpoint's runtimes: its model-settings.json is optional
                check_folder_onnx(find_folder_onnx(model_dir, self.runtime), self.runtime)
                folder = read_model_folder(model_dir) if (model_dir / MODEL_SETTINGS_FILE).is_file() else {}
            else:
                folder = read_model_folder(model_dir)
            object.__setattr__(self, "_folder_settings", folder)
            if self.model_name is None and not MODEL_NAME_RE.match(self.served_model_name):
                raise ValueError(
                    f"the model name {self.served_model_name!r} (from {model_dir / MODEL_SETTINGS_FILE}) cannot "
                    f"be served by satpoint: it must match {MODEL_NAME_RE.pattern}; give another with model_name"
                )
        self._check_many_models()
        if not self.input_name:
            raise ValueError("input_name must not be empty")
        if self.input_datatype not in INPUT_DATATYPES:
            raise ValueError(f"input_datatype must be one of {INPUT_DATATYPES}, got {self.input_datatype!r}")
        env = {str(k): str(v) for k, v in self.env.items()}
        object.__setattr__(self, "env", env)
        ResourceLimits(
            cpu_cores=self.cpu_limit, memory_bytes=self.memory_limit
        )  # a ValueError for a CPU limit under 1 ms per period or a memory limit under 1 MiB
        if self.cpus is not None:
            cpus = tuple(int(c) for c in self.cpus)
            if not cpus or len(set(cpus)) != len(cpus) or min(cpus) < 0:
                raise ValueError(f"cpus must be distinct non-negative CPU ids, got {list(self.cpus)}")
            object.__setattr__(self, "cpus", cpus)

    def _check_many_models(self) -> None:
        if self.demo_models is not None:
            if isinstance(self.demo_models, bool) or not 1 <= int(self.demo_models) <= MAX_MODELS:
                raise ValueError(f"demo_models must be between 1 and {MAX_MODELS}, got {self.demo_models!r}")
            if self.model_dir is not None or self.model_repo is not None:
                raise ValueError("demo_models (copies of a demo model) excludes model_dir and model_repo")
            if getattr(demo_model(self.demo_model), "streaming", False):
                raise ValueError(f"demo_models copies a classifier; {self.demo_model} is a text generator")
        if self.model_repo is not None:
            if self.model_dir is not None or self.demo_model != DEFAULT_DEMO_MODEL or self.runtime != DEFAULT_RUNTIME:
                raise ValueError(
                    "model_repo (your repository of model folders, served as they are) excludes model_dir, "
                    "demo_model and runtime"
                )
            repo = Path(self.model_repo)
            object.__setattr__(self, "model_repo", repo)
            object.__setattr__(self, "_repo_models", tuple(repo_models(repo, read_model_folder, MODEL_NAME_RE)))
            if self.model_name is not None:
                raise ValueError("model_name names one model: the folders of model_repo are served under their own")

    @property
    def served_model_names(self) -> tuple[str, ...]:
        """Every model the server serves, in order (one name unless ``demo_models`` or ``model_repo``)."""
        if self.demo_models is not None:
            return tuple(copy_names(self.model_name or self.demo_model, int(self.demo_models)))
        if self.model_repo is not None:
            return tuple(m.name for m in self._repo_models)
        return (self.served_model_name,)

    @property
    def repo_models(self) -> tuple[RepoModel, ...]:
        """The model folders of ``model_repo`` (empty without it)."""
        return self._repo_models

    def _check_textgen(self, streaming: bool) -> None:
        """``max_tokens``/``input_len`` are the textgen model's; it streams only with ``parallel_workers`` 0
        (MLServer's parallel workers bypass ``predict_stream``): the default 1 becomes 0, more is refused."""
        for name in ("max_tokens", "input_len"):
            value = getattr(self, name)
            if value is not None and not streaming:
                raise ValueError(f"{name} is a knob of the streaming demo model textgen, not of {self.demo_model}")
            if value is not None and (isinstance(value, bool) or int(value) < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if streaming:
            if self.parallel_workers > 1:
                raise ValueError(
                    "the demo model textgen streams only with parallel_workers 0 (MLServer's parallel workers "
                    f"bypass predict_stream); got {self.parallel_workers}"
                )
            object.__setattr__(self, "parallel_workers", 0)

    @property
    def served_model_name(self) -> str:
        """The name the model is served under (``model_name``, else the demo model's or folder's name); with
        many models, the first of them."""
        if self.demo_models is not None or self.model_repo is not None:
            return self.served_model_names[0]
        if self.model_name is not None:
            return self.model_name
        if self.model_dir is not None:
            name = (self._folder_settings or {}).get("name")
            return name if isinstance(name, str) and name else self.model_dir.resolve().name
        return self.demo_model

    @property
    def limits(self) -> ResourceLimits:
        """The CPU and memory limits as a cgroup sets them (``limits.any`` False: none)."""
        return ResourceLimits(cpu_cores=self.cpu_limit, memory_bytes=self.memory_limit)

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

    def textgen_model_settings(self, name: str) -> dict[str, Any]:
        """``model-settings.json`` of the streaming demo model ``textgen`` served as ``name``."""
        from satpoint.servers.models.textgen import textgen_model_settings

        return textgen_model_settings(
            name,
            input_name=self.input_name,
            input_datatype=self.input_datatype,
            max_tokens=self.max_tokens,
            input_len=self.input_len,
            max_batch_size=self.effective_max_batch_size,
            max_batch_time_s=self.effective_max_batch_time_s,
        )

    def folder_settings(self) -> dict[str, Any] | None:
        """A copy of the model folder's ``model-settings.json`` (None without ``model_dir``)."""
        return json.loads(json.dumps(self._folder_settings)) if self._folder_settings is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The settings for the results header: batching values as in force, the served name;
        ``demo_model``/``runtime`` are None when a model folder is served; the environment with the
        values of secret names (``HF_TOKEN``, ``…_PASSWORD``) and credentials in values hidden."""
        own = self.model_dir is not None
        folder_runtime = own and self.runtime != DEFAULT_RUNTIME
        return {
            "parallel_workers": self.parallel_workers,
            "debug": self.debug,
            "max_batch_size": self.effective_max_batch_size,
            "max_batch_time_s": self.effective_max_batch_time_s,
            "env": {k: REDACTED if is_secret_name(k) else redact_text(v) for k, v in self.env.items()},
            "model_name": self.served_model_name,
            "cpus": list(self.cpus) if self.cpus is not None else None,
            "input_name": self.input_name,
            "input_datatype": self.input_datatype,
            "demo_model": None if own else self.demo_model,
            "runtime": self.runtime if folder_runtime or not own else None,
            "model_dir": str(self.model_dir) if self.model_dir is not None else None,
            "cpu_limit_cores": self.cpu_limit,
            "memory_limit_bytes": self.memory_limit,
            "max_tokens": self.max_tokens,
            "input_len": self.input_len,
            "demo_models": self.demo_models,
            "model_repo": str(self.model_repo) if self.model_repo is not None else None,
            "models": len(self.served_model_names),
        }


def read_model_folder(model_dir: Path) -> dict[str, Any]:
    """The ``model-settings.json`` of an MLServer model folder, checked: a ValueError saying what is wrong
    (no such folder, no ``model-settings.json``, invalid JSON, not an object, no ``implementation``)."""
    folder = Path(model_dir)
    if not folder.exists():
        raise ValueError(f"model_dir {folder} does not exist")
    if not folder.is_dir():
        raise ValueError(f"model_dir {folder} is not a folder (give the folder holding {MODEL_SETTINGS_FILE})")
    path = folder / MODEL_SETTINGS_FILE
    if not path.is_file():
        raise ValueError(f"model_dir {folder} has no {MODEL_SETTINGS_FILE} (an MLServer model folder needs one)")
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


def folder_model_settings(s: MLServerSettings) -> dict[str, Any]:
    """The user's ``model-settings.json`` with what satpoint controls: the served name, batching when given,
    and a relative ``parameters.uri`` made absolute (resolved against the user's folder, as MLServer would)."""
    assert s.model_dir is not None
    doc = s.folder_settings() or {}
    if s.runtime != DEFAULT_RUNTIME:
        # the derived folder (folder_onnx.write_folder_onnx): satpoint's runtime on its own model.onnx; the
        # user's batching values kept, their runtime's parameters not (they are for another runtime)
        declared = doc.get("inputs")
        doc = {k: doc[k] for k in ("max_batch_size", "max_batch_time") if k in doc}
        doc["implementation"] = folder_implementation(s.runtime)
        doc["parameters"] = {"uri": f"./{ONNX_FILENAME}"}
        # the inputs the user declared, else the ONNX graph's (satpoint builds its requests from them)
        doc["inputs"] = declared or folder_onnx_inputs(find_folder_onnx(s.model_dir, s.runtime))
    doc["name"] = s.served_model_name
    if s.max_batch_size is not None:
        doc["max_batch_size"] = s.max_batch_size
    if s.max_batch_time_s is not None:
        doc["max_batch_time"] = s.max_batch_time_s
    if s.runtime != DEFAULT_RUNTIME:
        return doc  # its uri is the derived model.onnx beside it, not a file of the user's folder
    return _absolute_uri(doc, s.model_dir)


def repo_model_settings(s: MLServerSettings, model: RepoModel) -> dict[str, Any]:
    """One folder of ``model_repo`` as served: its own ``model-settings.json`` with its served name, batching
    replaced only when given to satpoint, and a relative ``parameters.uri`` made absolute (as for
    ``model_dir``)."""
    doc: dict[str, Any] = json.loads(json.dumps(model.settings))
    doc["name"] = model.name
    if s.max_batch_size is not None:
        doc["max_batch_size"] = s.max_batch_size
    if s.max_batch_time_s is not None:
        doc["max_batch_time"] = s.max_batch_time_s
    return _absolute_uri(doc, model.folder)


def _absolute_uri(doc: dict[str, Any], folder: Path) -> dict[str, Any]:
    params = doc.get("parameters")
    uri = params.get("uri") if isinstance(params, dict) else None
    if isinstance(params, dict) and isinstance(uri, str) and uri:
        scheme = urllib.parse.urlparse(uri).scheme
        if scheme in ("", "file"):
            path = urllib.parse.urlparse(uri).path if scheme == "file" else uri
            if not os.path.isabs(path):
                params["uri"] = os.path.normpath(folder.resolve() / path)
    return doc


def link_folder_entries(source: Path, dest: Path) -> None:
    """``dest`` as a real folder holding a symlink to each entry of the user's ``source`` folder except its
    ``model-settings.json`` (satpoint writes its own there)."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(Path(source).resolve().iterdir()):
        if entry.name != MODEL_SETTINGS_FILE:
            (dest / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())


def onnx_threads(env: Mapping[str, str]) -> tuple[int, str]:
    """The intra-op thread count the ONNX runtime will use in a server with environment ``env`` (satpoint
    writes no ``parameters.extra.intra_op_num_threads`` for the demo models) and where it comes from."""
    threads = intra_op_threads(None, env)
    return threads, "OMP_NUM_THREADS" if env.get("OMP_NUM_THREADS", "").strip() else "default (1)"
