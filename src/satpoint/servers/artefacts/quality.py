"""What an artefact variant costs in quality: each demo model artefact (``runtime`` sklearn, onnx,
onnx-int8, pruned:F; the reduced-input ``digits-mlp-pca16``) run offline, once, on the held-out split its
model never saw in training (``demo_model.demo_split``: 25 % of the data, stratified, fixed seed), and
compared with the reference artefact: the demo model's (or, for a reduced-input variant, the full
model's) scikit-learn estimator.

Per artefact:

- ``accuracy``: share of held-out rows whose predicted label is the true one;
- ``agreement``: share of held-out rows where the artefact predicts the reference's label;
- ``max_abs_proba_diff``: the largest absolute difference between the artefact's and the reference's
  class probabilities over all rows and classes;
- ``accuracy_loss_pp``: the reference's accuracy minus the artefact's, in percentage points (negative:
  the artefact did better on this split).

``quality_figures`` is the arithmetic (pure); ``artefact_quality`` trains each demo model once (a few
seconds), builds every asked artefact from that one fit (the artefact the server will load is the same:
training is deterministic) and runs it with scikit-learn or an onnxruntime session (one thread).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from satpoint.servers.models.demo import (
    HELD_OUT_FRACTION,
    ONNX_INPUT_NAME,
    ONNX_LABEL_OUTPUT,
    ONNX_PROBA_OUTPUT,
    build_onnx_bytes,
    check_runtime,
    demo_model,
    demo_split,
    fit_demo_model,
    parse_runtime,
)

__all__ = ["REFERENCE_RUNTIME", "artefact_quality", "predict_offline", "quality_figures", "reference_of"]

REFERENCE_RUNTIME = "sklearn"


def quality_figures(truth: Any, reference_labels: Any, reference_proba: Any, labels: Any, proba: Any) -> dict[str, Any]:
    """Accuracy, the reference's accuracy, the loss in percentage points, label agreement with the
    reference and the largest absolute probability difference, for one artefact's predictions on
    ``len(truth)`` rows."""
    truth = np.asarray(truth).ravel()
    ref_labels = np.asarray(reference_labels).ravel()
    got = np.asarray(labels).ravel()
    if not (truth.size == ref_labels.size == got.size) or truth.size == 0:
        raise ValueError(
            f"quality needs the same non-zero number of rows, got {truth.size}, {ref_labels.size}, {got.size}"
        )
    ref_p, got_p = np.asarray(reference_proba, dtype=float), np.asarray(proba, dtype=float)
    if ref_p.shape != got_p.shape:
        raise ValueError(f"probabilities of shape {got_p.shape} do not match the reference's {ref_p.shape}")
    accuracy = float(np.mean(got == truth))
    reference_accuracy = float(np.mean(ref_labels == truth))
    return {
        "rows": int(truth.size),
        "accuracy": round(accuracy, 6),
        "reference_accuracy": round(reference_accuracy, 6),
        "accuracy_loss_pp": round(100.0 * (reference_accuracy - accuracy), 4),
        "agreement": round(float(np.mean(got == ref_labels)), 6),
        "max_abs_proba_diff": round(float(np.max(np.abs(got_p - ref_p))), 6),
    }


def reference_of(name: str) -> str:
    """The demo model whose sklearn artefact ``name``'s artefacts are compared with."""
    return demo_model(name).reference or name


def predict_offline(name: str, runtime: str, model: Any, rows: Any) -> tuple[Any, Any]:
    """``(labels, probabilities)`` of the artefact ``runtime`` of the demo model ``name`` (built from the
    fitted ``model``) on ``rows``: scikit-learn's ``predict``/``predict_proba``, or the ONNX artefact in
    an onnxruntime session on the float32 rows the server would decode."""
    kind = parse_runtime(check_runtime(runtime, name))[0]
    if kind == "sklearn":
        return model.predict(rows), model.predict_proba(rows)
    if kind == "openvino":
        return _predict_openvino(build_onnx_bytes(name, runtime, model), rows)
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        build_onnx_bytes(name, runtime, model), sess_options=options, providers=["CPUExecutionProvider"]
    )
    labels, proba = session.run(
        [ONNX_LABEL_OUTPUT, ONNX_PROBA_OUTPUT], {ONNX_INPUT_NAME: np.asarray(rows, dtype=np.float32)}
    )
    return labels, proba


def _predict_openvino(data: bytes, rows: Any) -> tuple[Any, Any]:
    """The OpenVINO artefact run the way satpoint's OpenVINO runtime runs it (one thread, f32)."""
    import tempfile
    from pathlib import Path

    from satpoint.servers.artefacts.openvino_runtime import compile_openvino, openvino_predict

    with tempfile.TemporaryDirectory(prefix="satpoint-openvino-") as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(data)
        compiled = compile_openvino(str(path), 1)
    return openvino_predict(compiled.create_infer_request(), np.asarray(rows, dtype=np.float32))


def artefact_quality(artefacts: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Quality figures for every ``(demo_model, runtime)`` asked (each computed once), keyed the same way.

    Each entry also says what it was measured on (``held_out``) and against what (``reference``)."""
    wanted = list(dict.fromkeys((str(n), str(r)) for n, r in artefacts))
    for name, runtime in wanted:
        check_runtime(runtime, name)
    fitted: dict[str, Any] = {}

    def model(name: str) -> Any:
        if name not in fitted:
            fitted[name] = fit_demo_model(name)
        return fitted[name]

    out: dict[tuple[str, str], dict[str, Any]] = {}
    references: dict[str, tuple[Any, Any]] = {}
    for name, runtime in wanted:
        ref = reference_of(name)
        _, rows, _, truth = demo_split(name)
        if ref not in references:
            _, ref_rows, _, _ = demo_split(ref)
            if not np.array_equal(ref_rows, rows):
                raise ValueError(f"{name} and its reference {ref} do not share a held-out split")
            references[ref] = predict_offline(ref, REFERENCE_RUNTIME, model(ref), rows)
        labels, proba = predict_offline(name, runtime, model(name), rows)
        figures = quality_figures(truth, *references[ref], labels, proba)
        out[(name, runtime)] = {
            "demo_model": name,
            "runtime": runtime,
            "reference": f"{ref} {REFERENCE_RUNTIME}",
            "held_out": f"{HELD_OUT_FRACTION:.0%} of {demo_model(name).dataset} (stratified, seed 0), not trained on",
            **figures,
        }
    return out
