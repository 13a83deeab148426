"""Many models on one embedded MLServer: N independent copies of a demo model (``--demo-models N``), or
every model folder of a repository (``--model-repo DIR``); the time they take to load and the memory the
server's process tree holds once they are ready.

Copies are independent on purpose, so that nothing is shared by accident: copy ``i`` is named
``<prefix>-<i:03d>`` (``iris-000``, ``iris-001``…), trained on its own stratified bootstrap sample of the
demo model's training split (numpy generator seeded with ``i``; estimators that take a ``random_state``
get ``i`` too), and written to its own folder in the server's temporary folder, where MLServer loads it
from its own file into its own model instance (and each parallel worker into its own). Copies therefore
hold different coefficients and different artefact bytes (``copy_digests`` says so), like N models a
team would deploy, not N names for one object.

MLServer loads every model of its repository concurrently at start (``load_models_at_startup``), each
parallel worker its own copy of every model; the readiness wait grows with the count (``ready_timeout_s``).
"""

from __future__ import annotations

import hashlib
import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from satpoint.servers.models.demo import (
    artifact_filename,
    build_onnx_bytes,
    demo_model,
    demo_split,
    parse_runtime,
)

__all__ = [
    "MAX_MODELS",
    "RepoModel",
    "copies_info",
    "copy_digests",
    "copy_names",
    "fit_demo_copy",
    "load_span",
    "ready_timeout_s",
    "repo_models",
    "tree_memory",
    "write_demo_copies",
]

#: the most demo copies one server is given (each is a trained model, a folder and a loaded instance)
MAX_MODELS = 5000
#: the readiness wait: a fixed part (MLServer's start) plus this much per model and worker
BASE_READY_TIMEOUT_S = 90.0
PER_MODEL_READY_S = 0.5
_LOG_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3})")
_LOADED = "Loaded model '"


def copy_names(prefix: str, n: int) -> list[str]:
    """The names of ``n`` copies: ``prefix-000`` … (at least three digits, more past 1000)."""
    if n < 1:
        raise ValueError(f"demo_models must be >= 1, got {n}")
    width = max(3, len(str(n - 1)))
    return [f"{prefix}-{i:0{width}d}" for i in range(n)]


def fit_demo_copy(name: str, seed: int) -> Any:
    """The demo model ``name`` trained on a stratified bootstrap sample of its training split drawn with
    ``seed`` (each class resampled with replacement to its own size, so every class stays present); an
    estimator with a ``random_state`` gets ``seed``.  Different seeds give different coefficients."""
    import numpy as np

    spec = demo_model(name)
    if getattr(spec, "streaming", False):
        raise ValueError(f"demo_models copies classifiers; the demo model {name} is a text generator")
    features, _, labels, _ = demo_split(spec.name)
    rng = np.random.default_rng(seed)
    classes = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    rows = np.concatenate([rng.choice(members, size=members.size) for members in classes])
    x, y = features[rows], labels[rows]
    if spec.name == "iris":
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(max_iter=1000).fit(x, y)
    if spec.mlp:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPClassifier

        estimator: Any = MLPClassifier(hidden_layer_sizes=(256, 256), max_iter=40, random_state=seed)
        if spec.name == "digits-mlp-pca16":
            from sklearn.decomposition import PCA
            from sklearn.pipeline import Pipeline

            estimator = Pipeline([("pca", PCA(n_components=16, random_state=seed)), ("mlp", estimator)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return estimator.fit(x, y)
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=200, random_state=seed, n_jobs=1).fit(x, y)


def write_demo_copies(name: str, runtime: str, names: Sequence[str], root: Path) -> list[Path]:
    """Train one copy per name (copy ``i`` with seed ``i``) and write its artefact to ``root/<name>/``
    (``model.joblib`` or, for the ONNX runtimes, ``model.onnx``); returns the artefact paths."""
    import joblib

    onnx = parse_runtime(runtime)[0] != "sklearn"
    paths = []
    for i, copy_name in enumerate(names):
        fitted = fit_demo_copy(name, i)
        folder = Path(root) / copy_name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / artifact_filename(runtime)
        if onnx:
            path.write_bytes(build_onnx_bytes(name, runtime, model=fitted))
        else:
            joblib.dump(fitted, path)
        paths.append(path)
    return paths


def copy_digests(paths: Sequence[Path]) -> list[str]:
    """The sha256 of each artefact (distinct copies: as many distinct digests as paths)."""
    return [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths]


@dataclass(frozen=True)
class RepoModel:
    """One model folder of a ``--model-repo``: the name it is served under, its folder, its settings."""

    name: str
    folder: Path
    settings: dict[str, Any]


def repo_models(repo: Path, read_folder: Any, name_re: re.Pattern[str]) -> list[RepoModel]:
    """Every model folder directly under ``repo`` (a folder holding ``model-settings.json``, read and checked
    by ``read_folder``), sorted by name; a ValueError when there is none, a name is invalid or served twice."""
    root = Path(repo)
    if not root.is_dir():
        raise ValueError(f"model_repo {root} is not a folder")
    found: list[RepoModel] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if not (folder / "model-settings.json").is_file():
            continue
        doc = read_folder(folder)
        name = doc.get("name") or folder.name
        if not name_re.match(name):
            raise ValueError(f"{folder / 'model-settings.json'}: the model name {name!r} must match {name_re.pattern}")
        found.append(RepoModel(name, folder, doc))
    if not found:
        raise ValueError(f"model_repo {root} holds no model folder (a subfolder with model-settings.json)")
    names = [m.name for m in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"model_repo {root}: {', '.join(twice)} served by more than one folder")
    return sorted(found, key=lambda m: m.name)


def models_info(settings: Any, names: Sequence[str], digests: Sequence[str], load: dict[str, Any]) -> dict[str, Any]:
    """The results header's ``models`` block of an embedded MLServer (``settings``: its ``MLServerSettings``):
    how many models it holds, their names, and (with many) how they were made and loaded (``load``)."""
    s = settings
    if s.demo_models is not None:
        return copies_info(s.demo_model, names, digests, load)
    out: dict[str, Any] = {"count": len(names), "names": list(names)}
    if s.model_repo is not None:
        out["source"] = "model_repo"
        out["model_repo"] = str(s.model_repo.resolve())
    else:
        out["source"] = "model_dir" if s.model_dir is not None else "demo_model"
    if len(names) > 1:
        out["load"] = load
    return out


def copies_info(demo_model: str, names: Sequence[str], digests: Sequence[str], load: dict[str, Any]) -> dict[str, Any]:
    """The results header's ``models`` block of a server holding copies of ``demo_model`` (``--demo-models``,
    the embedded MLServer's or Triton's): their names, how they were made, how distinct their artefacts are
    and how they were loaded (``load``)."""
    return {
        "count": len(names),
        "names": list(names),
        "source": "demo_models",
        "distinct_artifacts": len(set(digests)) if digests else None,
        "how": (
            f"copy i of the demo model {demo_model} trained on its own stratified bootstrap sample of the "
            "training split (seed i), written to its own folder and loaded by its own model instance"
        ),
        "load": load,
    }


def ready_timeout_s(models: int, workers: int) -> float:
    """How long to wait for a server holding ``models`` models in ``workers`` processes to be ready."""
    return BASE_READY_TIMEOUT_S + PER_MODEL_READY_S * models * max(1, workers)


def load_span(log_text: str, started_unix: float) -> dict[str, Any]:
    """What MLServer's log says of loading its models: how many ``Loaded model`` lines, and the seconds
    from the process start (``started_unix``) to the first and the last of them (None when not logged)."""
    times = []
    for line in log_text.splitlines():
        if _LOADED not in line:
            continue
        m = _LOG_TIME.match(line)
        if m:
            times.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return {
        "loaded_lines": len(times),
        "first_loaded_s": round(min(times) - started_unix, 3) if times else None,
        "last_loaded_s": round(max(times) - started_unix, 3) if times else None,
    }


def tree_memory(pids: Sequence[int]) -> dict[str, Any] | None:
    """The memory of a process tree now (``pids``: the main process first): RSS summed over the tree, and
    PSS (shared pages split between the processes sharing them) and USS (pages no other process maps)
    where the kernel gives them; per process too.  None when no process could be read."""
    import psutil

    procs: list[dict[str, Any]] = []
    for i, pid in enumerate(pids):
        try:
            p = psutil.Process(pid)
            try:
                full = p.memory_full_info()
                rss, pss, uss = full.rss, getattr(full, "pss", None), getattr(full, "uss", None)
            except psutil.AccessDenied:
                rss, pss, uss = p.memory_info().rss, None, None
        except psutil.Error:
            continue
        role = "main" if i == 0 else "child"
        procs.append({"pid": pid, "role": role, "rss_mb": _mb(rss), "pss_mb": _mb(pss), "uss_mb": _mb(uss)})
    if not procs:
        return None

    def total(key: str) -> float | None:
        values = [p[key] for p in procs]
        return None if any(v is None for v in values) else round(sum(float(v) for v in values), 2)

    return {
        "unix_s": round(time.time(), 3),
        "rss_mb": total("rss_mb"),
        "pss_mb": total("pss_mb"),
        "uss_mb": total("uss_mb"),
        "processes": procs,
    }


def _mb(n: int | None) -> float | None:
    return None if n is None else round(n / 2**20, 2)
