"""The embedded demo models: small scikit-learn estimators trained at start on data scikit-learn ships
(no download, ever), deterministic (fixed ``random_state``), saved with joblib for
``mlserver_sklearn.SKLearnModel`` or converted with ``skl2onnx`` to ``model.onnx`` for satpoint's own
onnxruntime runtime (:mod:`satpoint.servers.onnx_runtime`).

- ``iris``: multinomial logistic regression on iris, 4 features; inference is almost free, so MLServer's
  own overhead sets the pace.
- ``digits-mlp``: a multi-layer perceptron (256, 256) on the 8x8 digits, 64 features; still light (one
  row 0.3 ms, 32 rows 0.46 ms in scikit-learn: per-call overhead dominates), a 16x larger payload than
  iris, and a clear sklearn-vs-ONNX difference. Wider layers were measured and left out: (1024, 1024)
  trains in 4.9 s for 0.47 ms a row, (2048, 2048) in 13 s for 1.2 ms, a start-up cost every sweep point
  would pay.
- ``digits-forest``: a random forest of 200 trees on the digits, 64 features; expensive single-row
  inference in scikit-learn (~15 ms here: one Python-level pass per tree), the model where
  ``parallel_workers`` matters most. Its ONNX form answers a row in ~0.03 ms.

Measured here (2 shared cores, scikit-learn 1.9.1, onnxruntime 1.32.0, one thread), training / one-row
``predict`` in scikit-learn / conversion / one-row ONNX ``run``: iris 0.14 s / 0.19 ms / 0.01 s / 0.012 ms;
digits-mlp 1.3 s / 0.30 ms / 0.04 s / 0.027 ms; digits-forest 0.7 s / 15.6 ms / 1.6 s / 0.029 ms.

skl2onnx and onnxruntime are imported only by the ONNX functions, so the sklearn path never loads them.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEMO_MODELS",
    "IRIS_EXAMPLE_ROW",
    "IRIS_N_FEATURES",
    "MODEL_FILENAME",
    "ONNX_FILENAME",
    "ONNX_INPUT_NAME",
    "ONNX_LABEL_OUTPUT",
    "ONNX_PROBA_OUTPUT",
    "RUNTIMES",
    "DemoModel",
    "demo_dataset",
    "demo_model",
    "fit_demo_model",
    "intra_op_threads",
    "to_onnx_bytes",
    "train_demo_model",
    "train_iris_model",
    "write_demo_artifact",
]

MODEL_FILENAME = "model.joblib"
ONNX_FILENAME = "model.onnx"
ONNX_INPUT_NAME = "input"
ONNX_LABEL_OUTPUT = "label"  # int64 [N] with zipmap disabled
ONNX_PROBA_OUTPUT = "probabilities"  # float [N, n_classes] with zipmap disabled
RUNTIMES = ("sklearn", "onnx")
IRIS_N_FEATURES = 4
# First iris sample (setosa): sepal length/width, petal length/width in cm; the model predicts class 0.
IRIS_EXAMPLE_ROW: tuple[float, float, float, float] = (5.1, 3.5, 1.4, 0.2)
_SEED = 0


@dataclass(frozen=True)
class DemoModel:
    """One demo model: its name, how many features a row has, what it is (for the results header)."""

    name: str
    n_features: int
    estimator: str
    dataset: str


DEMO_MODELS: dict[str, DemoModel] = {
    m.name: m
    for m in (
        DemoModel("iris", IRIS_N_FEATURES, "sklearn.linear_model.LogisticRegression", "sklearn.datasets.load_iris"),
        DemoModel(
            "digits-mlp",
            64,
            "sklearn.neural_network.MLPClassifier(hidden_layer_sizes=(256, 256))",
            "sklearn.datasets.load_digits",
        ),
        DemoModel(
            "digits-forest",
            64,
            "sklearn.ensemble.RandomForestClassifier(n_estimators=200)",
            "sklearn.datasets.load_digits",
        ),
    )
}


def demo_model(name: str) -> DemoModel:
    """The demo model called ``name``; a ValueError listing the valid names otherwise."""
    try:
        return DEMO_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown demo model {name!r}: choose one of {', '.join(DEMO_MODELS)}") from None


def demo_dataset(name: str) -> tuple[Any, Any]:
    """``(features, labels)`` the demo model ``name`` is trained on (float64 arrays)."""
    if demo_model(name).dataset.endswith("load_iris"):
        from sklearn.datasets import load_iris

        features, labels = load_iris(return_X_y=True)
    else:
        from sklearn.datasets import load_digits

        features, labels = load_digits(return_X_y=True)
    return features, labels


def fit_demo_model(name: str) -> Any:
    """Train the demo model ``name`` in memory (deterministic: same data, fixed seeds)."""
    features, labels = demo_dataset(name)
    if name == "iris":
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(max_iter=1000).fit(features, labels)
    if name == "digits-mlp":
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPClassifier

        mlp = MLPClassifier(hidden_layer_sizes=(256, 256), max_iter=40, random_state=_SEED)
        with warnings.catch_warnings():  # 40 epochs fit the training data; full convergence is not the point
            warnings.simplefilter("ignore", ConvergenceWarning)
            return mlp.fit(features, labels)
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=200, random_state=_SEED, n_jobs=1).fit(features, labels)


def train_demo_model(name: str, dest_dir: Path) -> Path:
    """Train the demo model ``name`` (a few seconds at most) and save it as ``dest_dir/model.joblib``;
    returns that path."""
    import joblib

    model = fit_demo_model(demo_model(name).name)
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / MODEL_FILENAME
    joblib.dump(model, path)
    return path


def train_iris_model(dest_dir: Path) -> Path:
    """Train the iris logistic regression and save it as ``dest_dir/model.joblib``; returns that path."""
    return train_demo_model("iris", dest_dir)


def write_demo_artifact(name: str, runtime: str, dest_dir: Path) -> Path:
    """Train the demo model ``name`` and write the artefact ``runtime`` serves into ``dest_dir``:
    ``model.joblib`` (sklearn) or ``model.onnx`` (onnx); returns its path."""
    spec = demo_model(name)
    if runtime == "sklearn":
        return train_demo_model(name, dest_dir)
    if runtime != "onnx":
        raise ValueError(f"unknown runtime {runtime!r}: choose one of {', '.join(RUNTIMES)}")
    data = to_onnx_bytes(fit_demo_model(spec.name), spec.n_features)
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / ONNX_FILENAME
    path.write_bytes(data)
    return path


def to_onnx_bytes(model: Any, n_features: int) -> bytes:
    """A fitted scikit-learn classifier as a serialized ONNX model: one float32 input ``input`` of shape
    ``[None, n_features]``, outputs ``label`` (int64 [N]) and ``probabilities`` (float [N, classes]).
    The ZipMap skl2onnx appends by default (probabilities as a list of dicts) is disabled."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    onx = convert_sklearn(
        model,
        initial_types=[(ONNX_INPUT_NAME, FloatTensorType([None, n_features]))],
        options={id(model): {"zipmap": False}},
    )
    data: bytes = onx.SerializeToString()
    return data


def intra_op_threads(extra: Mapping[str, Any] | None, environ: Mapping[str, str]) -> int:
    """The onnxruntime intra-op thread count the ONNX runtime uses: ``parameters.extra.intra_op_num_threads``
    if present, else ``OMP_NUM_THREADS`` from the server's environment, else 1 (never onnxruntime's
    default of one thread per core, which oversubscribes the CPU as soon as there are several workers)."""
    if extra and extra.get("intra_op_num_threads") is not None:
        value: Any = extra["intra_op_num_threads"]
        where = "parameters.extra.intra_op_num_threads"
    elif environ.get("OMP_NUM_THREADS", "").strip():
        value = environ["OMP_NUM_THREADS"].strip()
        where = "OMP_NUM_THREADS"
    else:
        return 1
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise TypeError
        threads = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be a positive integer, got {value!r}") from None
    if threads < 1:
        raise ValueError(f"{where} must be a positive integer, got {value!r}")
    return threads
