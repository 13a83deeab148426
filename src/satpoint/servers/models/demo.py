"""The embedded demo models: small scikit-learn estimators trained at start on data scikit-learn ships
(no download, ever), deterministic (fixed ``random_state``), saved with joblib for
``mlserver_sklearn.SKLearnModel`` or converted with ``skl2onnx`` to ``model.onnx`` for satpoint's own
onnxruntime runtime (:mod:`satpoint.servers.artefacts.onnx_runtime`).

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
- ``digits-mlp-pca16``: the guide's "dimensionality reduction of inputs": a PCA to 16 of the 64 digits
  features, then the same MLP, both inside one served pipeline (scikit-learn ``Pipeline``; in ONNX a
  MatMul before the MLP), so requests still carry 64 features. Its quality reference is ``digits-mlp``.
- ``textgen``: the streaming demo model, a character-level text generator trained on scikit-learn's own
  dataset descriptions (:mod:`satpoint.servers.models.textgen`), served by satpoint's MLServer runtime
  (:mod:`satpoint.servers.models.textgen_runtime`) with ``predict_stream`` (one character per chunk) and
  ``predict``; its input is a prompt of ``input_len`` values (default 32), its answer ``max_tokens``
  characters (default 64). Not a classifier: no held-out quality, no ONNX artefact, runtime ``sklearn``
  only (the name of the default; the artefact is ``model.npz``).

Every model is trained on the same 75 % of its data (``demo_split``: stratified, fixed seed); the other
25 % is the held-out split :mod:`satpoint.servers.artefacts.quality` judges artefacts on.

The artefact ``runtime`` (the ``runtime`` sweep knob; ``parse_runtime``/``check_runtime``):

- ``sklearn``: the estimator saved with joblib for ``mlserver_sklearn.SKLearnModel``.
- ``onnx``: converted with skl2onnx to ``model.onnx``, served by satpoint's onnxruntime runtime.
- ``onnx-int8``: that ONNX model through ``onnxruntime.quantization.quantize_dynamic`` (int8 weights,
  activations quantized at run time: each MatMul with constant weights becomes ``DynamicQuantizeLinear``
  + ``MatMulInteger``). Only for the MLP models: skl2onnx turns a random forest into one
  ``ai.onnx.ml.TreeEnsembleClassifier`` and the iris logistic regression into ``ai.onnx.ml.LinearClassifier``,
  which no onnxruntime quantizer handles; ``quantize_dynamic`` even refuses those graphs ("Failed to find
  proper ai.onnx domain": they hold no standard-domain operator). So ``onnx-int8`` is refused for
  ``iris`` and ``digits-forest`` before anything starts.
- ``openvino``: the ONNX model cut to its probabilities output (``onnx.utils.Extractor``), served by
  satpoint's OpenVINO runtime (:mod:`satpoint.servers.artefacts.openvino_runtime`; ``pip install
  'satpoint[openvino]'``), which takes the label as the argmax. The cut is needed because OpenVINO's ONNX
  front end converts no ``ai.onnx.ml`` operator but ``Normalizer``: the MLP's label branch
  (``ArrayFeatureExtractor``) fails to load ("No conversion rule found"), and a forest
  (``TreeEnsembleClassifier``) or the iris ``LinearClassifier`` cannot run at all, so ``openvino`` is
  for the MLP models only.
- ``pruned:F`` (``0 < F < 1``, e.g. ``pruned:0.5``): the MLP with the smallest-magnitude share F of its
  weights (all layers together; biases kept) set to zero, then converted to ONNX. Unstructured pruning
  leaves the matrices dense and their size unchanged, so dense kernels (scikit-learn, onnxruntime
  MatMul) multiply the zeros all the same: expect its cost in quality, not a speed gain.

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
    "RUNTIME_CHOICES_TEXT",
    "DemoModel",
    "artifact_filename",
    "build_onnx_bytes",
    "check_runtime",
    "demo_dataset",
    "demo_model",
    "demo_split",
    "fit_demo_model",
    "intra_op_threads",
    "parse_runtime",
    "probabilities_only",
    "prune_mlp",
    "quantize_onnx_bytes",
    "serves_onnx",
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
RUNTIMES = ("sklearn", "onnx", "onnx-int8", "openvino")  # and pruned:F
PRUNED_PREFIX = "pruned:"
RUNTIME_CHOICES_TEXT = "sklearn, onnx, onnx-int8, openvino, pruned:F (0 < F < 1, e.g. pruned:0.5)"
IRIS_N_FEATURES = 4
# First iris sample (setosa): sepal length/width, petal length/width in cm; the model predicts class 0.
IRIS_EXAMPLE_ROW: tuple[float, float, float, float] = (5.1, 3.5, 1.4, 0.2)
_SEED = 0
HELD_OUT_FRACTION = 0.25


@dataclass(frozen=True)
class DemoModel:
    """One demo model: its name, how many features a row has, what it is (for the results header)."""

    name: str
    n_features: int
    estimator: str
    dataset: str
    #: an MLP inside: onnx-int8 and pruned:F apply
    mlp: bool = False
    #: the demo model whose sklearn artefact the quality figures compare with (None: this one)
    reference: str | None = None
    #: a generator that streams its answer (``textgen``): not a classifier
    streaming: bool = False


DEMO_MODELS: dict[str, DemoModel] = {
    m.name: m
    for m in (
        DemoModel("iris", IRIS_N_FEATURES, "sklearn.linear_model.LogisticRegression", "sklearn.datasets.load_iris"),
        DemoModel(
            "digits-mlp",
            64,
            "sklearn.neural_network.MLPClassifier(hidden_layer_sizes=(256, 256))",
            "sklearn.datasets.load_digits",
            mlp=True,
        ),
        DemoModel(
            "digits-forest",
            64,
            "sklearn.ensemble.RandomForestClassifier(n_estimators=200)",
            "sklearn.datasets.load_digits",
        ),
        DemoModel(
            "digits-mlp-pca16",
            64,
            "sklearn.pipeline.Pipeline(PCA(n_components=16), MLPClassifier(hidden_layer_sizes=(256, 256)))",
            "sklearn.datasets.load_digits",
            mlp=True,
            reference="digits-mlp",
        ),
        DemoModel(
            "textgen",
            32,  # textgen.DEFAULT_INPUT_LEN: the prompt's length (the input_len knob)
            "satpoint.servers.models.textgen.TextGen (character-level MLP, scikit-learn MLPClassifier)",
            "scikit-learn's dataset descriptions (sklearn/datasets/descr/*.rst)",
            streaming=True,
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


def demo_split(name: str) -> tuple[Any, Any, Any, Any]:
    """``(train_features, held_out_features, train_labels, held_out_labels)``: the demo model ``name``
    is trained on the first pair; the held-out 25 % (stratified, fixed seed) it never saw is where its
    artefacts' quality is measured."""
    from sklearn.model_selection import train_test_split

    features, labels = demo_dataset(name)
    parts: list[Any] = train_test_split(
        features, labels, test_size=HELD_OUT_FRACTION, random_state=_SEED, stratify=labels
    )
    return parts[0], parts[1], parts[2], parts[3]


def _mlp() -> Any:
    from sklearn.neural_network import MLPClassifier

    return MLPClassifier(hidden_layer_sizes=(256, 256), max_iter=40, random_state=_SEED)


def fit_demo_model(name: str) -> Any:
    """Train the demo model ``name`` in memory on its training split (deterministic: same data, fixed
    seeds)."""
    if demo_model(name).streaming:
        raise ValueError(f"the demo model {name} is a text generator, not a classifier (servers.textgen)")
    features, _, labels, _ = demo_split(name)
    if name == "iris":
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(max_iter=1000).fit(features, labels)
    if name in ("digits-mlp", "digits-mlp-pca16"):
        from sklearn.exceptions import ConvergenceWarning

        estimator = _mlp()
        if name == "digits-mlp-pca16":
            from sklearn.decomposition import PCA
            from sklearn.pipeline import Pipeline

            estimator = Pipeline([("pca", PCA(n_components=16, random_state=_SEED)), ("mlp", estimator)])
        with warnings.catch_warnings():  # 40 epochs fit the training data; full convergence is not the point
            warnings.simplefilter("ignore", ConvergenceWarning)
            return estimator.fit(features, labels)
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


def parse_runtime(runtime: str) -> tuple[str, float | None]:
    """``runtime`` as (kind, pruned share): ``("onnx", None)``, ``("pruned", 0.5)``; a ValueError naming
    the valid values for anything else."""
    text = str(runtime).strip()
    if text in RUNTIMES:
        return text, None
    if text.startswith(PRUNED_PREFIX):
        raw = text[len(PRUNED_PREFIX) :]
        try:
            share = float(raw)
        except ValueError:
            raise ValueError(f"runtime {text!r}: pruned:F takes a share F of the weights, 0 < F < 1") from None
        if not 0.0 < share < 1.0:  # also refuses nan and inf
            raise ValueError(f"runtime {text!r}: the pruned share must be > 0 and < 1, got {raw}")
        return "pruned", share
    raise ValueError(f"unknown runtime {text!r}: choose one of {RUNTIME_CHOICES_TEXT}")


def check_runtime(runtime: str, name: str) -> str:
    """``runtime`` checked for the demo model ``name`` (a ValueError saying why it does not apply);
    returns it."""
    kind, _ = parse_runtime(runtime)
    spec = demo_model(name)
    if spec.streaming and kind != "sklearn":
        raise ValueError(
            f"runtime {runtime} does not apply to the demo model {name}: it is served by satpoint's textgen "
            "runtime from model.npz (leave runtime at its default)"
        )
    if kind == "onnx-int8" and not spec.mlp:
        raise ValueError(
            f"runtime onnx-int8 does not apply to the demo model {name}: onnxruntime's dynamic quantization "
            "rewrites MatMul weights, and its ONNX form has none (a tree ensemble or linear classifier from "
            "the ai.onnx.ml domain); use it with digits-mlp or digits-mlp-pca16"
        )
    if kind == "openvino" and not spec.mlp:
        raise ValueError(
            f"runtime openvino does not apply to the demo model {name}: OpenVINO converts no ai.onnx.ml "
            "operator (tree ensembles, linear classifiers); use it with digits-mlp or digits-mlp-pca16"
        )
    if kind == "openvino":
        import importlib.util

        if importlib.util.find_spec("openvino") is None:
            raise ValueError("runtime openvino needs the openvino package: pip install 'satpoint[openvino]'")
    if kind == "pruned" and not spec.mlp:
        raise ValueError(
            f"runtime {runtime} does not apply to the demo model {name}: pruning zeroes an MLP's weights; "
            "use it with digits-mlp or digits-mlp-pca16"
        )
    return runtime


def serves_onnx(runtime: str) -> bool:
    """Whether the artefact of ``runtime`` is ``model.onnx`` (served by satpoint's onnxruntime runtime)."""
    return parse_runtime(runtime)[0] != "sklearn"


def artifact_filename(runtime: str) -> str:
    return ONNX_FILENAME if serves_onnx(runtime) else MODEL_FILENAME


def prune_mlp(model: Any, share: float) -> Any:
    """A copy of ``model`` (an ``MLPClassifier``, or a pipeline ending in one) with the smallest-magnitude
    ``share`` of the MLP's weights (every layer's ``coefs_`` ranked together; ``intercepts_`` kept) set to
    zero: ``round(share * n_weights)`` of them exactly (ties broken by position)."""
    import copy

    import numpy as np

    pruned = copy.deepcopy(model)
    mlp = pruned.steps[-1][1] if hasattr(pruned, "steps") else pruned
    coefs = [np.asarray(c) for c in mlp.coefs_]
    magnitudes = np.concatenate([np.abs(c).ravel() for c in coefs])
    k = round(share * magnitudes.size)
    keep = np.ones(magnitudes.size, dtype=bool)
    keep[np.argsort(magnitudes, kind="stable")[:k]] = False
    offset = 0
    for i, c in enumerate(coefs):
        mlp.coefs_[i] = np.where(keep[offset : offset + c.size].reshape(c.shape), c, 0.0)
        offset += c.size
    return pruned


def quantize_onnx_bytes(data: bytes) -> bytes:
    """An ONNX model with ``onnxruntime.quantization.quantize_dynamic`` applied: int8 weights (QInt8)
    for every MatMul with a constant weight matrix, activations quantized per call."""
    import logging
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="satpoint-int8-") as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(data)
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # its advice to run the pre-processing first goes to the root logger
        try:
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        finally:
            root.setLevel(level)
        return dst.read_bytes()


def build_onnx_bytes(name: str, runtime: str, model: Any | None = None) -> bytes:
    """The ONNX artefact of ``runtime`` (onnx, onnx-int8, pruned:F) for the demo model ``name``, from
    ``model`` (the fitted demo model; None: trained here)."""
    kind, share = parse_runtime(check_runtime(runtime, name))
    if kind == "sklearn":
        raise ValueError("runtime sklearn is not an ONNX artefact")
    spec = demo_model(name)
    fitted = model if model is not None else fit_demo_model(spec.name)
    if kind == "pruned":
        assert share is not None
        fitted = prune_mlp(fitted, share)
    data = to_onnx_bytes(fitted, spec.n_features)
    if kind == "openvino":
        return probabilities_only(data)
    return quantize_onnx_bytes(data) if kind == "onnx-int8" else data


def probabilities_only(data: bytes) -> bytes:
    """An ONNX classifier cut to input → ``probabilities`` (the label branch, which needs ``ai.onnx.ml``
    operators OpenVINO cannot convert, dropped); the label is the argmax of the probabilities, which is
    the class index for the demo models (classes 0..n-1)."""
    import onnx
    from onnx.utils import Extractor

    model = onnx.load_from_string(data)
    cut = Extractor(model).extract_model([ONNX_INPUT_NAME], [ONNX_PROBA_OUTPUT])
    out: bytes = cut.SerializeToString()
    return out


def write_demo_artifact(name: str, runtime: str, dest_dir: Path) -> Path:
    """Train the demo model ``name`` and write the artefact ``runtime`` serves into ``dest_dir``:
    ``model.joblib`` (sklearn) or ``model.onnx`` (onnx, onnx-int8, pruned:F); returns its path."""
    if demo_model(name).streaming:
        from satpoint.servers.models.textgen import TEXTGEN_FILENAME, train_textgen

        check_runtime(runtime, name)
        return train_textgen().save(Path(dest_dir) / TEXTGEN_FILENAME)
    if parse_runtime(check_runtime(runtime, name))[0] == "sklearn":
        return train_demo_model(name, dest_dir)
    data = build_onnx_bytes(name, runtime)
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

    classifier = model.steps[-1][1] if hasattr(model, "steps") else model  # a pipeline's last step
    onx = convert_sklearn(
        model,
        initial_types=[(ONNX_INPUT_NAME, FloatTensorType([None, n_features]))],
        options={id(classifier): {"zipmap": False}},
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
