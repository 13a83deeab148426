"""The embedded Triton's own process: ``python -m satpoint.servers.triton.child SPEC.json``.

It trains the demo model, binds it to a Triton Inference Server through PyTriton (``nvidia-pytriton``,
the ``satpoint[triton]`` extra) as a Python function, and serves until SIGTERM/SIGINT, then stops Triton
and PyTriton's workspace.  It runs in a process of its own because PyTriton imports ``tritonclient.grpc``,
whose protobuf names (``inference.*``) clash with MLServer's in the default descriptor pool: this module
imports neither MLServer nor any satpoint module that does (only ``servers.models.demo`` and, for the
streaming ``textgen``, ``servers.models.textgen``).

``textgen`` is bound decoupled (``ModelConfig(decoupled=True)``): a generator yielding one character per
response (``textgen.DEFAULT_MAX_TOKENS`` of them), so Triton serves it over gRPC ``ModelStreamInfer`` (and
``generate_stream``) only; its ``/infer`` and unary ``ModelInfer`` refuse decoupled models.

The spec (written by :class:`satpoint.servers.triton.server.TritonTarget`) holds the model name, the demo model,
the loopback ports, the input's name and datatype, the batching knobs, the workspace folder, and the
access token and the endpoints it guards.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from satpoint.servers.models.demo import demo_model, fit_demo_model

_DTYPES = {"FP32": "float32", "FP64": "float64"}


def _infer_function(model: Any, output: str) -> Any:
    import numpy as np
    from pytriton.decorators import batch

    @batch  # type: ignore[untyped-decorator]
    def infer(**inputs: Any) -> dict[str, Any]:
        (features,) = inputs.values()
        return {output: np.asarray(model.predict(features), dtype=np.int64).reshape(-1, 1)}

    return infer


def _textgen_function(model: Any, max_tokens: int, output: str) -> Any:
    """The streaming demo model as a decoupled inference callable: a generator yielding, per step, one
    character per row of every request (PyTriton sends each yield as one response per request)."""
    import numpy as np

    from satpoint.servers.models.textgen import prompt_ids

    def infer(requests: list[Any]) -> Any:
        rows = [np.asarray(next(iter(r.data.values()))) for r in requests]
        streams = [
            [model.generate(prompt_ids(row), max_tokens) for row in batch.reshape(len(batch), -1)] for batch in rows
        ]
        for _ in range(max_tokens):
            yield [{output: np.array([[next(g).encode()] for g in gens], dtype=np.object_)} for gens in streams]

    return infer


def serve(spec: dict[str, Any]) -> None:
    import numpy as np
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    demo = demo_model(spec["demo_model"])
    if demo.streaming:  # textgen: served decoupled (one response per character; ModelStreamInfer only)
        from satpoint.servers.models.textgen import DEFAULT_INPUT_LEN, DEFAULT_MAX_TOKENS, train_textgen

        model: Any = train_textgen()
        width = DEFAULT_INPUT_LEN
    else:
        model = fit_demo_model(demo.name)
        width = demo.n_features
    knobs = spec["knobs"]
    preferred = knobs.get("preferred_batch_size")
    batcher = DynamicBatcher(
        max_queue_delay_microseconds=int(knobs["max_queue_delay_us"]),
        preferred_batch_size=[int(preferred)] if preferred else None,
    )
    config = TritonConfig(
        http_address=spec["host"],
        http_port=spec["ports"]["http"],
        grpc_address=spec["host"],
        grpc_port=spec["ports"]["grpc"],
        metrics_port=spec["ports"]["metrics"],
        metrics_address=spec["host"],
        allow_gpu_metrics=False,
        log_file=Path(spec["triton_log"]),
        exit_on_error=True,
    )
    inputs = [Tensor(name=spec["input_name"], dtype=np.dtype(_DTYPES[spec["input_datatype"]]), shape=(width,))]
    outputs = [Tensor(name="predict", dtype=np.int64, shape=(1,))]
    functions = [_infer_function(model, "predict") for _ in range(int(knobs["instances"]))]
    if demo.streaming:
        outputs = [Tensor(name="text", dtype=bytes, shape=(1,))]
        functions = [_textgen_function(model, DEFAULT_MAX_TOKENS, "text") for _ in range(int(knobs["instances"]))]
    stop_requested = False

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stop_requested
        stop_requested = True
        raise KeyboardInterrupt  # Triton.serve() stops Triton and its workspace on KeyboardInterrupt

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    # the repository API (it loads Python-backend code), shared memory, trace and logging need satpoint's
    # token, as PyTriton restricts them by default; statistics stay open (read-only) for the per-stage scrapes
    security = TritonSecurityConfig(
        access_token=spec["access_token"], restricted_endpoints=list(spec["restricted_endpoints"])
    )
    with Triton(config=config, workspace=spec["workspace"], security_config=security) as triton:
        triton.bind(
            model_name=spec["model_name"],
            infer_func=functions,
            inputs=inputs,
            outputs=outputs,
            config=ModelConfig(max_batch_size=int(knobs["max_batch_size"]), batcher=batcher, decoupled=demo.streaming),
            strict=True,
        )
        print(f"satpoint: triton serving {spec['model_name']!r}", flush=True)
        if not stop_requested:
            triton.serve()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m satpoint.servers.triton.child SPEC.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    with contextlib.suppress(KeyboardInterrupt):
        serve(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
