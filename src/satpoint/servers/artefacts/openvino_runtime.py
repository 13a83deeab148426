"""A small MLServer runtime for OpenVINO, satpoint's own: ``"implementation":
"satpoint.servers.artefacts.openvino_runtime.OpenVinoModel"`` (the demo models' ``runtime=openvino``).

It serves ``model.onnx`` cut to its probabilities output (``demo_model.probabilities_only``: OpenVINO
converts no ``ai.onnx.ml`` operator, so a scikit-learn classifier's label branch cannot load) and answers
``predict`` = the argmax of the probabilities, shape ``[N, 1]``, like the sklearn and ONNX runtimes (the
demo models' classes are 0..n-1). Needs the ``openvino`` package (``pip install 'satpoint[openvino]'``);
imported only inside MLServer's processes.

- ``load()``: ``openvino.Core().read_model`` on the file, compiled for ``CPU`` with
  ``INFERENCE_NUM_THREADS`` = the thread count the ONNX runtime would use (``parameters.extra.
  intra_op_num_threads``, else ``OMP_NUM_THREADS``, else 1: never one per host core, which
  oversubscribes the CPU with several workers), ``NUM_STREAMS`` 1, ``PERFORMANCE_HINT`` ``LATENCY`` and
  ``INFERENCE_PRECISION_HINT`` ``f32`` (no silent bf16 on CPUs that have it: the quality figures are of
  float32 inference).
- ``predict()``: the first input decoded with ``NumpyCodec`` as float32 rows, one synchronous inference.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri

from satpoint.servers.artefacts.onnx_runtime import input_rows
from satpoint.servers.models.demo import ONNX_FILENAME, intra_op_threads

__all__ = ["PREDICT_OUTPUT", "compile_openvino", "openvino_predict"]

PREDICT_OUTPUT = "predict"
_log = logging.getLogger("mlserver")


def compile_openvino(path: str, threads: int) -> Any:
    """The compiled OpenVINO model of the ONNX file ``path`` on the CPU with ``threads`` threads."""
    import openvino as ov  # type: ignore[import-untyped,import-not-found,unused-ignore]

    core = ov.Core()
    config = {
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32",
    }
    return core.compile_model(core.read_model(path), "CPU", config)


def openvino_predict(request: Any, rows: Any) -> tuple[Any, Any]:
    """``(labels, probabilities)`` of float32 ``rows`` through an infer request of a compiled model."""
    proba = np.asarray(request.infer({0: rows})[0])
    return proba.argmax(axis=1).astype(np.int64), proba


class OpenVinoModel(MLModel):  # type: ignore[misc]  # mlserver ships no type information
    """Serves ``model.onnx`` (probabilities only) with OpenVINO on the CPU; answers ``predict``."""

    async def load(self) -> bool:
        path = await get_model_uri(self._settings, wellknown_filenames=[ONNX_FILENAME])
        params = self._settings.parameters
        extra: dict[str, Any] | None = params.extra if params is not None else None
        threads = intra_op_threads(extra, os.environ)
        compiled = compile_openvino(path, threads)
        shape = compiled.input(0).get_partial_shape()
        self._n_features: int | None = (
            shape[1].get_length() if shape.rank.get_length() == 2 and shape[1].is_static else None
        )
        self._request = compiled.create_infer_request()
        _log.info(
            "satpoint OpenVINO runtime: model %s loaded from %s (INFERENCE_NUM_THREADS=%d)", self.name, path, threads
        )
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        rows = input_rows(payload, self._n_features)
        labels, _ = openvino_predict(self._request, rows)
        output = NumpyCodec.encode_output(PREDICT_OUTPUT, labels.reshape(-1, 1))
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=[output])
