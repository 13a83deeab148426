"""The MLServer runtime of the streaming demo model ``textgen`` (:mod:`satpoint.servers.models.textgen`):
``"implementation": "satpoint.servers.models.textgen_runtime.TextGenRuntime"`` in a ``model-settings.json``.
Imported only inside MLServer's process, never by ``import satpoint``.

- ``load()``: the generator's arrays from ``parameters.uri`` (``model.npz``); the answer length from
  ``parameters.extra.max_tokens`` (default ``DEFAULT_MAX_TOKENS``).
- ``predict_stream()``: the answer one character per response (``infer_stream`` over REST as server-sent
  events, ``ModelStreamInfer`` over gRPC): output ``text`` (BYTES, ``[N]``: one character per batch row)
  per chunk; the last chunk also carries the parameters ``prompt_nll`` and ``tokens``. Only the stream's
  first request is read: MLServer's gRPC servicer selects the model from it, and a request per stream
  is how satpoint (and MLServer's own REST route) use it. Between characters the generator yields to the
  event loop (``asyncio.sleep(0)``), so the characters of concurrent streams interleave like in a server
  that batches token steps, and a newly arrived request gets its first character without waiting for
  whole answers.
- ``predict()``: the whole answer in one response (output ``text``, BYTES ``[N]``), so unary requests
  (``/infer``, ``ModelInfer``) work too.
- A request parameter ``max_tokens`` (a positive integer) overrides the model's answer length.

It needs MLServer's ``parallel_workers: 0`` (with workers, MLServer wraps every model in a ``ParallelModel``
that overrides only ``predict``: a custom ``predict_stream`` is silently bypassed and every stream gets a
single chunk) and ``gzip_enabled: false`` (MLServer's documented limit for REST streaming: a gzip
middleware that buffers would hold the events back until the answer ends; starlette 0.46 already skips
``text/event-stream``, an older build does not). The embedded server writes both for this model.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec, StringCodec
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse, Parameters, RequestInput
from mlserver.utils import get_model_uri

from satpoint.servers.models.textgen import DEFAULT_MAX_TOKENS, TEXTGEN_FILENAME, TextGen, prompt_ids

__all__ = ["OUTPUT", "TextGenRuntime", "max_tokens_of"]

OUTPUT = "text"
_log = logging.getLogger("mlserver")


def max_tokens_of(parameters: Any, default: int) -> int:
    """The answer length a request asks for (its ``max_tokens`` parameter), else ``default``; an
    ``InferenceError`` for a value that is not a positive integer."""
    extra = parameters.model_dump() if hasattr(parameters, "model_dump") else dict(parameters or {})
    value = extra.get("max_tokens")
    if value is None:
        return default
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise TypeError
        tokens = int(value)
    except (TypeError, ValueError):
        raise InferenceError(f"max_tokens must be a positive integer, got {value!r}") from None
    if tokens < 1:
        raise InferenceError(f"max_tokens must be a positive integer, got {value!r}")
    return tokens


def _rows(first: RequestInput) -> list[Any]:
    if first.datatype == "BYTES":
        return [[s] for s in StringCodec.decode_input(first)]
    values = np.asarray(NumpyCodec.decode_input(first))
    if values.ndim <= 1:
        values = values.reshape(1, -1)
    return [values[i] for i in range(values.shape[0])]


class TextGenRuntime(MLModel):  # type: ignore[misc]  # mlserver ships no type information
    """Serves the ``textgen`` demo model: streamed (one character per chunk) and unary."""

    async def load(self) -> bool:
        path = await get_model_uri(self._settings, wellknown_filenames=[TEXTGEN_FILENAME])
        params = self._settings.parameters
        extra: dict[str, Any] = (params.extra if params is not None else None) or {}
        self._model = TextGen.load(path)
        self._max_tokens = max_tokens_of(extra, DEFAULT_MAX_TOKENS)
        _log.info("satpoint textgen: model %s loaded from %s (max_tokens=%d)", self.name, path, self._max_tokens)
        return True

    def _prompts(self, payload: InferenceRequest) -> tuple[list[Any], int]:
        if not payload.inputs:
            raise InferenceError("the request has no inputs")
        prompts = [prompt_ids(row) for row in _rows(payload.inputs[0])]
        return prompts, max_tokens_of(payload.parameters, self._max_tokens)

    def _response(self, texts: list[str], parameters: dict[str, Any] | None = None) -> InferenceResponse:
        output = StringCodec.encode_output(OUTPUT, texts)
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            outputs=[output],
            parameters=Parameters(**parameters) if parameters else None,
        )

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        prompts, tokens = self._prompts(payload)
        nll = [self._model.prompt_nll(p) for p in prompts]
        texts = ["".join(self._model.generate(p, tokens)) for p in prompts]
        return self._response(texts, {"prompt_nll": float(np.mean(nll)), "tokens": tokens})

    async def predict_stream(self, payloads: AsyncIterator[InferenceRequest]) -> AsyncIterator[InferenceResponse]:
        payload = await payloads.__anext__()  # one request per stream (see the module's note)
        prompts, tokens = self._prompts(payload)
        nll = float(np.mean([self._model.prompt_nll(p) for p in prompts]))
        streams = [self._model.generate(p, tokens) for p in prompts]
        for step in range(tokens):
            texts = [next(s) for s in streams]
            last = step == tokens - 1
            yield self._response(texts, {"prompt_nll": nll, "tokens": tokens} if last else None)
            if not last:
                await asyncio.sleep(0)
