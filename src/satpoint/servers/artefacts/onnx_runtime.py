"""A small MLServer runtime for ONNX models, satpoint's own: ``"implementation":
"satpoint.servers.artefacts.onnx_runtime.OnnxModel"`` in a ``model-settings.json``.

MLServer 1.7.1 ships no ONNX runtime (``mlserver-onnx`` does not exist), so the embedded server serves
the ONNX form of a demo model through this class. It is imported only inside MLServer's processes (the
main one and every parallel worker), never by ``import satpoint``.

- ``load()``: one ``onnxruntime.InferenceSession`` per worker on the ``CPUExecutionProvider``, with the
  thread counts set explicitly: ``intra_op_num_threads`` from ``parameters.extra.intra_op_num_threads``,
  else the ``OMP_NUM_THREADS`` environment variable, else 1; ``inter_op_num_threads`` 1. The model file
  is ``parameters.uri`` (a file, or a folder holding ``model.onnx``).
- ``predict()``: the first input decoded with MLServer's ``NumpyCodec`` (any numeric datatype, cast to
  float32; one row may come as a 1-D tensor), run, and the label output (``label``, int64 for a classifier
  converted with ``zipmap`` off; else the first output) returned as ``predict`` of shape ``[N, 1]``: the
  answer ``mlserver_sklearn.SKLearnModel`` gives. Like that runtime, a request naming the output
  ``predict_proba`` gets the class probabilities (``probabilities``, ``[N, classes]``) under that name;
  other requested names are ignored.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri

from satpoint.servers.models.demo import ONNX_FILENAME, ONNX_LABEL_OUTPUT, ONNX_PROBA_OUTPUT, intra_op_threads

__all__ = ["PREDICT_OUTPUT", "PREDICT_PROBA_OUTPUT", "OnnxModel"]

PREDICT_OUTPUT = "predict"
PREDICT_PROBA_OUTPUT = "predict_proba"
_log = logging.getLogger("mlserver")


class OnnxModel(MLModel):  # type: ignore[misc]  # mlserver ships no type information
    """Serves ``model.onnx`` with onnxruntime on the CPU; answers ``predict`` like the sklearn runtime."""

    async def load(self) -> bool:
        import onnxruntime as ort

        path = await get_model_uri(self._settings, wellknown_filenames=[ONNX_FILENAME])
        params = self._settings.parameters
        extra: dict[str, Any] | None = params.extra if params is not None else None
        threads = intra_op_threads(extra, os.environ)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        inputs = session.get_inputs()
        outputs = [o.name for o in session.get_outputs()]
        if len(inputs) != 1:
            raise InferenceError(f"{path}: the ONNX runtime serves models with one input, this one has {len(inputs)}")
        self._session = session
        self._input_name: str = inputs[0].name
        width = inputs[0].shape[-1] if len(inputs[0].shape) == 2 else None
        self._n_features: int | None = width if isinstance(width, int) else None
        self._output_name: str = ONNX_LABEL_OUTPUT if ONNX_LABEL_OUTPUT in outputs else outputs[0]
        self._proba_name: str | None = ONNX_PROBA_OUTPUT if ONNX_PROBA_OUTPUT in outputs else None
        _log.info(
            "satpoint ONNX runtime: model %s loaded from %s (onnxruntime %s, intra_op_num_threads=%d, "
            "inter_op_num_threads=1, output %r)",
            self.name,
            path,
            ort.__version__,
            threads,
            self._output_name,
        )
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        rows = input_rows(payload, self._n_features)
        asked = [o.name for o in payload.outputs or [] if o.name in (PREDICT_OUTPUT, PREDICT_PROBA_OUTPUT)]
        if not asked:
            (label,) = self._session.run([self._output_name], {self._input_name: rows})
            output = NumpyCodec.encode_output(PREDICT_OUTPUT, np.asarray(label))
            return InferenceResponse(model_name=self.name, model_version=self.version, outputs=[output])
        if PREDICT_PROBA_OUTPUT in asked and self._proba_name is None:
            raise InferenceError(
                f"this ONNX model has no {ONNX_PROBA_OUTPUT!r} output to answer {PREDICT_PROBA_OUTPUT!r}"
            )
        names = {PREDICT_OUTPUT: self._output_name, PREDICT_PROBA_OUTPUT: self._proba_name or ""}
        results = self._session.run([names[a] for a in asked], {self._input_name: rows})
        encoded = [NumpyCodec.encode_output(a, np.asarray(r)) for a, r in zip(asked, results, strict=True)]
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=encoded)


def input_rows(payload: InferenceRequest, n_features: int | None) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The request's first input as float32 rows [N, n_features] (one row when it is flat), or the
    ``InferenceError`` MLServer answers for an input that does not fit the model."""
    if not payload.inputs:
        raise InferenceError("the request has no inputs")
    rows = np.asarray(NumpyCodec.decode_input(payload.inputs[0]), dtype=np.float32)
    if rows.ndim == 1:
        rows = rows.reshape(1, -1)
    if rows.ndim != 2 or (n_features is not None and rows.shape[1] != n_features):
        raise InferenceError(
            f"input shape {list(payload.inputs[0].shape)} does not fit the model: it takes [N, {n_features}]"
        )
    return rows
