"""The streaming demo model ``textgen``: its text handling, generator, settings and MLServer runtime (tiny
models trained on a few sentences, so every test is fast)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from satpoint.servers.embedded_base import Ports
from satpoint.servers.mlserver.server import MLServerTarget
from satpoint.servers.mlserver.settings import MLServerSettings
from satpoint.servers.models.textgen import (
    TEXTGEN_FILENAME,
    TEXTGEN_IMPLEMENTATION,
    VOCAB,
    TextGen,
    encode_text,
    prompt_ids,
    train_textgen,
)

_TEXT = (
    "The iris dataset holds fifty samples of each of three species of iris. "
    "The digits dataset holds images of hand-written digits: ten classes, 8x8 pixels each. "
) * 4


@pytest.fixture(scope="module")
def tiny() -> TextGen:
    return train_textgen(encode_text(_TEXT), hidden=16, epochs=3)


def test_text_is_lower_cased_with_unknown_characters_as_one_space() -> None:
    ids = encode_text("Ab  c\t\n×d")
    assert "".join(VOCAB[i] for i in ids) == "ab c d"


def test_numbers_map_to_characters_and_bytes_read_as_text() -> None:
    n = len(VOCAB)
    assert list(prompt_ids([0.0, 1.0 / n + 1e-9, 0.999999])) == [0, 1, n - 1]
    assert "".join(VOCAB[i] for i in prompt_ids([b"Hello"])) == "hello"


def test_an_answer_has_exactly_max_tokens_characters_and_depends_only_on_the_prompt(tiny: TextGen) -> None:
    prompt = encode_text("the iris data")
    first = list(tiny.generate(prompt, 40))
    assert len(first) == 40 and all(len(c) == 1 and c in VOCAB for c in first)
    assert list(tiny.generate(prompt, 40)) == first
    others = {"".join(tiny.generate(encode_text(p), 40)) for p in ("digits", "samples of", "three species")}
    assert len(others | {"".join(first)}) > 1


def test_a_saved_model_answers_the_same(tiny: TextGen, tmp_path: Path) -> None:
    loaded = TextGen.load(tiny.save(tmp_path / TEXTGEN_FILENAME))
    prompt = encode_text("hand-written")
    assert list(loaded.generate(prompt, 20)) == list(tiny.generate(prompt, 20))
    assert loaded.prompt_nll(prompt) == pytest.approx(tiny.prompt_nll(prompt), rel=1e-6)


def test_the_prompt_score_is_lower_for_text_like_the_training_text(tiny: TextGen) -> None:
    seen = encode_text("the digits dataset holds images of hand-written digits")
    noise = prompt_ids(np.random.default_rng(0).random(len(seen)))
    assert 0 < tiny.prompt_nll(seen) < tiny.prompt_nll(noise)


def test_textgen_settings_stream_in_the_main_process_without_gzip() -> None:
    s = MLServerSettings(demo_model="textgen", max_tokens=16, input_len=8)
    assert s.parallel_workers == 0  # the default 1 becomes 0: workers bypass predict_stream
    target = MLServerTarget(s)
    doc = target._model_settings()
    assert doc["implementation"] == TEXTGEN_IMPLEMENTATION
    assert doc["parameters"]["extra"] == {"max_tokens": 16}
    assert doc["inputs"][0]["shape"] == [-1, 8]
    assert doc["outputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    server = target._server_settings(Path("/tmp/x"), _ports())
    assert server["parallel_workers"] == 0 and server["gzip_enabled"] is False
    with pytest.raises(ValueError, match="parallel_workers 0"):
        MLServerSettings(demo_model="textgen", parallel_workers=2)
    with pytest.raises(ValueError, match="knob of the streaming demo model"):
        MLServerSettings(demo_model="iris", max_tokens=16)
    with pytest.raises(ValueError, match="does not apply"):
        MLServerSettings(demo_model="textgen", runtime="onnx")


def _s(x: object) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _ports() -> Ports:
    return Ports(http=1, grpc=2, metrics=3)


@pytest.mark.mlserver_in_process
@pytest.mark.slow
def test_the_runtime_streams_the_answer_it_gives_in_one_piece(tiny: TextGen, tmp_path: Path) -> None:
    from mlserver.settings import ModelParameters, ModelSettings
    from mlserver.types import InferenceRequest, RequestInput

    from satpoint.servers.models.textgen_runtime import TextGenRuntime

    path = tiny.save(tmp_path / TEXTGEN_FILENAME)
    settings = ModelSettings(
        name="textgen",
        implementation=TextGenRuntime,
        parameters=ModelParameters(uri=str(path), extra={"max_tokens": 12}),
    )
    model = TextGenRuntime(settings)
    rows = np.random.default_rng(3).random((2, 10)).astype(np.float32)
    request = InferenceRequest(
        inputs=[RequestInput(name="input-0", datatype="FP32", shape=[2, 10], data=rows.ravel().tolist())]
    )

    async def one() -> AsyncIterator[InferenceRequest]:
        yield request

    async def run() -> tuple[list[list[str]], list[str], list[str]]:
        await model.load()
        chunks = [[_s(x) for x in r.outputs[0].data] async for r in model.predict_stream(one())]
        whole = await model.predict(request)
        short = await model.predict(request.model_copy(update={"parameters": {"max_tokens": 3}}))
        return chunks, [_s(x) for x in whole.outputs[0].data], [_s(x) for x in short.outputs[0].data]

    chunks, whole, short = asyncio.run(run())
    assert len(chunks) == 12 and all(len(c) == 2 for c in chunks)  # one character per row per chunk
    assert ["".join(c[i] for c in chunks) for i in range(2)] == whole
    assert [len(t) for t in short] == [3, 3]


def test_the_triton_binding_yields_one_character_per_row_of_every_request(tiny: TextGen) -> None:
    from types import SimpleNamespace

    from satpoint.servers.triton.child import _textgen_function

    rows = np.random.default_rng(1).random((2, 6)).astype(np.float32)
    requests = [SimpleNamespace(data={"input-0": rows}), SimpleNamespace(data={"input-0": rows[:1]})]
    steps = list(_textgen_function(tiny, 5, "text")(requests))
    assert len(steps) == 5 and [s[0]["text"].shape for s in steps[:1]] == [(2, 1)]
    first = b"".join(s[0]["text"][0, 0] for s in steps).decode()
    assert first == "".join(tiny.generate(prompt_ids(rows[0]), 5))
    assert b"".join(s[1]["text"][0, 0] for s in steps).decode() == first  # same prompt, same answer


def test_a_sweep_refuses_textgen_knobs_on_another_model_before_anything_starts() -> None:
    from satpoint.experiments.sweep_config import SweepConfig
    from satpoint.experiments.sweep_servers import BaseServer

    ok = SweepConfig(sets=("max_tokens=16,256",), server=BaseServer(kind="mlserver", demo_model="textgen"))
    assert [p.values for p in ok.validate().points()] == [{"max_tokens": 16}, {"max_tokens": 256}]
    with pytest.raises(ValueError, match="max_tokens: knobs of the streaming demo model"):
        SweepConfig(sets=("max_tokens=16,64",), server=BaseServer(kind="mlserver")).validate()
