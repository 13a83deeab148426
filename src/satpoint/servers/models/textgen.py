"""The streaming demo model ``textgen``: a character-level text generator trained at start on text
scikit-learn ships (the ``.rst`` descriptions of its bundled datasets, ``sklearn/datasets/descr``: about
37 000 characters once normalised), no download.

The model is a small neural n-gram model: the last ``CONTEXT`` characters (one-hot, ``CONTEXT x
len(VOCAB)`` inputs) through one hidden layer of ``HIDDEN`` ReLU units to a softmax over the next
character, trained with scikit-learn's ``MLPClassifier`` (sparse one-hot input, fixed seed, ~2 s here).
It is saved as plain arrays (``model.npz``) and run here with numpy, one forward pass per generated
character (~20 µs on this machine): the real CPU work per token of a tiny language model.

A request's prompt is its first input's first row (batch rows each get their own answer):

- numbers (FP32, FP64, integers; the form satpoint's payloads from metadata take): each value ``x`` is
  the character ``VOCAB[int(abs(x) * len(VOCAB)) % len(VOCAB)]``, so a ``[N, input_len]`` tensor of
  random values in [0, 1) is a random prompt of ``input_len`` characters;
- text (BYTES): the string itself (lower-cased; characters outside ``VOCAB`` read as spaces).

Reading the prompt ("prefill") runs the model over every prompt position at once (its negative
log-likelihood per character is reported), so a longer input costs more CPU; then the answer is sampled
one character at a time (temperature ``TEMPERATURE``, a generator seeded by the prompt: the same
prompt gets the same answer). Every answer has exactly ``max_tokens`` characters (no early stop), so a
stream's chunk count is known.

Pure: numpy and scikit-learn only (the MLServer runtime is :mod:`satpoint.servers.models.textgen_runtime`).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "CONTEXT",
    "DEFAULT_INPUT_LEN",
    "DEFAULT_MAX_TOKENS",
    "HIDDEN",
    "TEXTGEN_FILENAME",
    "TEXTGEN_IMPLEMENTATION",
    "TEXTGEN_SERVER_SETTINGS",
    "VOCAB",
    "TextGen",
    "corpus_ids",
    "corpus_text",
    "encode_text",
    "prompt_ids",
    "textgen_model_settings",
    "train_textgen",
]

#: the characters the model reads and writes (index 0, the space, stands for anything else)
VOCAB = " abcdefghijklmnopqrstuvwxyz0123456789.,;:()'-"
CONTEXT = 6
HIDDEN = 128
EPOCHS = 10
TEMPERATURE = 0.8
DEFAULT_MAX_TOKENS = 64
DEFAULT_INPUT_LEN = 32
TEXTGEN_FILENAME = "model.npz"
_SEED = 0
_INDEX = {c: i for i, c in enumerate(VOCAB)}

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


def corpus_text() -> str:
    """The training text: scikit-learn's dataset descriptions (every ``descr/*.rst``, sorted by name)."""
    folder = importlib.resources.files("sklearn.datasets") / "descr"
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".rst"))
    return "".join((folder / n).read_text(encoding="utf-8") for n in names)


def encode_text(text: str) -> I64:
    """``text`` as vocabulary indices: lower-cased, characters outside ``VOCAB`` as spaces, runs of spaces
    as one."""
    lowered = text.lower()
    ids = np.fromiter((_INDEX.get(c, 0) for c in lowered), dtype=np.int64, count=len(lowered))
    if len(ids) < 2:
        return ids
    keep = np.ones(len(ids), dtype=bool)
    keep[1:] = ~((ids[1:] == 0) & (ids[:-1] == 0))
    return np.asarray(ids[keep], dtype=np.int64)


def corpus_ids() -> I64:
    return encode_text(corpus_text())


def _contexts(ids: I64, k: int) -> I64:
    """One row per position ``i >= k``: the input columns of the one-hot context ``ids[i-k:i]``."""
    windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], k) if len(ids) > k else np.zeros((0, k), np.int64)
    return np.asarray(windows + (np.arange(k) * len(VOCAB))[None, :], dtype=np.int64)


@dataclass(frozen=True)
class TextGen:
    """The trained generator's arrays: ``w1`` [CONTEXT * len(VOCAB), HIDDEN], ``b1`` [HIDDEN],
    ``w2`` [HIDDEN, C], ``b2`` [C] and ``classes`` [C] (the vocabulary index of each output)."""

    w1: F32
    b1: F32
    w2: F32
    b2: F32
    classes: I64

    @property
    def context(self) -> int:
        return int(self.w1.shape[0]) // len(VOCAB)

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            np.savez(f, w1=self.w1, b1=self.b1, w2=self.w2, b2=self.b2, classes=self.classes)
        return path

    @classmethod
    def load(cls, path: Path) -> TextGen:
        with np.load(Path(path)) as z:
            return cls(
                np.asarray(z["w1"], np.float32),
                np.asarray(z["b1"], np.float32),
                np.asarray(z["w2"], np.float32),
                np.asarray(z["b2"], np.float32),
                np.asarray(z["classes"], np.int64),
            )

    def _probabilities(self, hidden: F32) -> F32:
        np.maximum(hidden, 0.0, out=hidden)
        z = hidden @ self.w2 + self.b2
        z -= z.max(axis=-1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=-1, keepdims=True)
        return np.asarray(p, dtype=np.float32)

    def prompt_nll(self, ids: I64) -> float:
        """Prefill: the prompt's mean negative log-likelihood per character under the model (every position
        at once; 0.0 for a prompt no longer than the context)."""
        k = self.context
        cols = _contexts(ids, k)
        if not len(cols):
            return 0.0
        hidden = self.w1[cols].sum(axis=1) + self.b1
        p = self._probabilities(hidden)
        where = np.searchsorted(self.classes, ids[k:])
        where = np.minimum(where, len(self.classes) - 1)
        hit = self.classes[where] == ids[k:]
        probs = np.where(hit, p[np.arange(len(where)), where], 1e-6)
        return float(-np.log(np.maximum(probs, 1e-6)).mean())

    def generate(self, ids: I64, max_tokens: int) -> Iterator[str]:
        """The answer to the prompt ``ids``, one character per step (``max_tokens`` of them); the sampler is
        seeded by the prompt, so the same prompt gives the same answer."""
        k = self.context
        ctx = np.zeros(k, dtype=np.int64)
        tail = ids[-k:]
        ctx[k - len(tail) :] = tail
        seed = int.from_bytes(hashlib.blake2b(np.ascontiguousarray(ids).tobytes(), digest_size=8).digest(), "big")
        rng = np.random.default_rng(seed)
        offsets = np.arange(k) * len(VOCAB)
        draws = rng.random(max_tokens)
        for step in range(max_tokens):
            hidden = self.w1[ctx + offsets].sum(axis=0) + self.b1
            p = self._tempered(hidden)
            choice = int(np.searchsorted(np.cumsum(p), draws[step] * float(p.sum())))
            nxt = int(self.classes[min(choice, len(self.classes) - 1)])
            ctx[:-1] = ctx[1:]
            ctx[-1] = nxt
            yield VOCAB[nxt]

    def _tempered(self, hidden: F32) -> F32:
        np.maximum(hidden, 0.0, out=hidden)
        z = (hidden @ self.w2 + self.b2) / TEMPERATURE
        z -= z.max()
        p = np.exp(z)
        return np.asarray(p / p.sum(), dtype=np.float32)


def prompt_ids(row: Sequence[Any] | npt.NDArray[Any]) -> I64:
    """A request row as a prompt: text (str/bytes, one element) read as characters; numbers each mapped to
    ``VOCAB[int(abs(x) * len(VOCAB)) % len(VOCAB)]``."""
    values = list(np.asarray(row, dtype=object).ravel()) if not isinstance(row, str | bytes) else [row]
    if values and isinstance(values[0], str | bytes):
        first = values[0]
        text = first.decode("utf-8", "replace") if isinstance(first, bytes) else first
        return encode_text(text)
    numbers = np.abs(np.asarray(values, dtype=np.float64))
    n = len(VOCAB)
    return np.asarray(np.floor(np.nan_to_num(numbers) * n).astype(np.int64) % n, dtype=np.int64)


def train_textgen(
    ids: I64 | None = None, *, context: int = CONTEXT, hidden: int = HIDDEN, epochs: int = EPOCHS
) -> TextGen:
    """Train the generator on ``ids`` (default: the corpus) with scikit-learn's ``MLPClassifier``
    (deterministic: fixed seed)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import OneHotEncoder

    data = corpus_ids() if ids is None else np.asarray(ids, dtype=np.int64)
    if len(data) <= context + 1:
        raise ValueError(f"the training text needs more than {context + 1} characters")
    windows = _contexts(data, context) - (np.arange(context) * len(VOCAB))[None, :]  # the characters
    # one-hot per context position, side by side (sparse): the column layout ``_contexts`` indexes
    encoder = OneHotEncoder(categories=[np.arange(len(VOCAB))] * context, sparse_output=True, dtype=np.float32)
    x = encoder.fit_transform(windows)
    mlp = MLPClassifier(hidden_layer_sizes=(hidden,), max_iter=epochs, batch_size=256, random_state=_SEED)
    with warnings.catch_warnings():  # a few epochs give readable text; full convergence is not the point
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp.fit(x, data[context:])
    w1, w2 = mlp.coefs_
    b1, b2 = mlp.intercepts_
    classes = np.asarray(mlp.classes_, dtype=np.int64)
    if len(classes) == 2:  # scikit-learn's binary head has one logistic output: not a next-character model
        raise ValueError("the training text needs more than two distinct characters")
    f32 = np.float32
    return TextGen(np.asarray(w1, f32), np.asarray(b1, f32), np.asarray(w2, f32), np.asarray(b2, f32), classes)


#: the MLServer runtime that serves the model (imported only inside MLServer's process)
TEXTGEN_IMPLEMENTATION = "satpoint.servers.models.textgen_runtime.TextGenRuntime"
#: MLServer settings streaming needs: see :mod:`satpoint.servers.models.textgen_runtime`
TEXTGEN_SERVER_SETTINGS: dict[str, Any] = {"parallel_workers": 0, "gzip_enabled": False}


def textgen_model_settings(
    name: str,
    *,
    input_name: str,
    input_datatype: str,
    max_tokens: int | None,
    input_len: int | None,
    max_batch_size: int = 1,
    max_batch_time_s: float = 0.0,
) -> dict[str, Any]:
    """The ``model-settings.json`` of the textgen model served as ``name``: satpoint's runtime on
    ``model.npz``, the answer length in ``parameters.extra.max_tokens``, the prompt declared as one input
    ``[-1, input_len]`` (satpoint builds its requests from it), the answer as output ``text`` (BYTES)."""
    return {
        "name": name,
        "implementation": TEXTGEN_IMPLEMENTATION,
        "parameters": {
            "uri": f"./{TEXTGEN_FILENAME}",
            "extra": {"max_tokens": int(max_tokens or DEFAULT_MAX_TOKENS)},
        },
        "max_batch_size": max_batch_size,
        "max_batch_time": max_batch_time_s,
        "inputs": [
            {"name": input_name, "datatype": input_datatype, "shape": [-1, int(input_len or DEFAULT_INPUT_LEN)]}
        ],
        "outputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
    }
