"""What a user's model folder costs in quality (``satpoint sweep --eval-data FILE``): each model folder a
sweep serves (``--model-dir``, ``model_dir=``), run offline, once, on the requests of ``FILE`` through
the folder's own MLServer runtime (its ``implementation`` class, loaded from the ``model-settings.json``
satpoint would serve: no server, the same code), and compared with a reference folder.  The folders' code
runs in a child process (``servers.mlserver.folder_quality_child``, every folder of one call in one child) with a
scrubbed environment (``scrubbed_env``: what Python, locales and thread counts need, nothing else), so a
folder's runtime never shares satpoint's process or sees its environment (tokens, credentials); a kept
name that ``redact.is_secret_name`` calls a credential is dropped too (``LC_*`` carries anything: SSH passes
every ``LC_`` variable through, and some set ``LC_API_TOKEN`` that way).

What the child does not share with the server: its resource limits.  A sweep's CPU and memory limits are
knobs of its points (``server_cpu_limit``, ``server_memory_limit``), while each (folder, runtime) is judged
once, for every point that serves it and beside the reference, in one child: no one limit is "the server's".
The child runs in satpoint's cgroup, bounded only in time (``_CHILD_TIMEOUT_S``): a runtime that needs more
memory than a point's limit is judged here and is OOM-killed only when that point serves it.  It runs as
satpoint's user, with ``HOME`` kept: secrets in the environment are out of its reach, not those in files.

The evaluation file is JSON Lines, one Open Inference Protocol request per line::

    {"inputs": [{"name": "input-0", "shape": [2, 4], "datatype": "FP32", "data": [...]}],
     "expected": {"name": "predict", "data": [0, 2]}}

- ``inputs`` (and optionally ``parameters``, ``outputs``, ``id``): the request as a client sends it;
- ``expected`` (optional; on every line or on none): the labels the model should answer, one per row,
  for the output ``name`` (default: ``predict`` when the model answers it, else its first output).

Per folder (``quality_figures``, the same fields as the demo models' quality):

- with expected outputs: ``accuracy`` (share of rows whose label is the expected one), the reference's
  ``reference_accuracy`` and ``accuracy_loss_pp`` (percentage points);
- without: the reference's labels stand as the truth, so ``accuracy`` is the agreement with the reference,
  ``reference_accuracy`` is 1 and ``accuracy_loss_pp`` the share of labels changed (``truth`` says which);
- ``agreement``: share of rows with the reference's label; ``max_abs_proba_diff``: the largest absolute
  difference of class probabilities, where both answer ``predict_proba`` when asked for it (None
  otherwise: asked once per request with ``outputs: [{"name": "predict_proba"}]``; a refusal means no
  probabilities, not an error).

Errors name the line: a file that does not exist, a line that is not JSON or not such a request, inputs
whose names or shapes do not match the model's metadata (its ``inputs`` as MLServer lists them), or a
request the model refuses.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from satpoint.redact import is_secret_name
from satpoint.servers.artefacts.quality import quality_figures
from satpoint.servers.mlserver.folder_onnx import find_folder_onnx, write_folder_onnx
from satpoint.servers.mlserver.settings import (
    DEFAULT_RUNTIME,
    MODEL_SETTINGS_FILE,
    MLServerSettings,
    folder_model_settings,
)

__all__ = [
    "EvalRequest",
    "FolderAnswers",
    "folder_quality",
    "predict_folder",
    "predict_folders",
    "read_eval_data",
    "scrubbed_env",
    "variant_quality",
]

PREDICT_OUTPUT = "predict"
PROBA_OUTPUT = "predict_proba"
_REQUEST_KEYS = frozenset({"id", "inputs", "outputs", "parameters", "expected"})


@dataclass(frozen=True)
class EvalRequest:
    """One line of an evaluation file: the request, and the expected labels when given."""

    line: int
    request: dict[str, Any]
    expected: list[Any] | None = None
    expected_name: str | None = None


def _fail(path: Path, line: int, why: str) -> ValueError:
    return ValueError(f"--eval-data {path}, line {line}: {why}")


def read_eval_data(path: str | Path) -> list[EvalRequest]:
    """The requests of an evaluation file, checked (a ValueError naming the file and line otherwise)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"--eval-data {p}: no such file" if not p.exists() else f"--eval-data {p} is not a file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--eval-data {p} cannot be read: {e}") from None
    out: list[EvalRequest] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as e:
            raise _fail(p, n, f"not valid JSON ({e.msg} at column {e.colno})") from None
        out.append(_eval_request(p, n, doc))
    if not out:
        raise ValueError(f"--eval-data {p} holds no requests (one JSON object per line)")
    with_expected = [r.line for r in out if r.expected is not None]
    if with_expected and len(with_expected) != len(out):
        missing = next(r.line for r in out if r.expected is None)
        raise _fail(p, missing, 'no "expected" although other lines have one: give it on every line or on none')
    return out


def _eval_request(p: Path, n: int, doc: Any) -> EvalRequest:
    if not isinstance(doc, dict):
        raise _fail(p, n, f"an inference request is a JSON object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - _REQUEST_KEYS)
    if unknown:
        raise _fail(p, n, f"unknown field(s) {', '.join(unknown)} (a request has {', '.join(sorted(_REQUEST_KEYS))})")
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise _fail(p, n, 'no "inputs": an inference request needs a non-empty list of inputs')
    for i, t in enumerate(inputs):
        if not isinstance(t, dict):
            raise _fail(p, n, f"inputs[{i}] is not an object")
        for key in ("name", "shape", "datatype", "data"):
            if key not in t:
                raise _fail(p, n, f'inputs[{i}] has no "{key}" (an input has name, shape, datatype and data)')
        shape = t["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise _fail(p, n, f"inputs[{i}] ({t['name']}): shape must be a list of whole numbers, got {shape!r}")
        size = math.prod(shape)
        if isinstance(t["data"], list) and t["datatype"] != "BYTES" and len(_flat(t["data"])) != size:
            raise _fail(
                p, n, f"inputs[{i}] ({t['name']}): shape {shape} holds {size} values, data has {len(_flat(t['data']))}"
            )
    expected = doc.get("expected")
    exp_data: list[Any] | None = None
    exp_name: str | None = None
    if expected is not None:
        if not isinstance(expected, dict) or not isinstance(expected.get("data"), list):
            raise _fail(
                p, n, '"expected" must be an object with "data", a list of labels: {"name": "predict", "data": [...]}'
            )
        exp_name = expected.get("name")
        if exp_name is not None and not isinstance(exp_name, str):
            raise _fail(p, n, f'"expected"."name" must be an output name, got {exp_name!r}')
        exp_data = _flat(expected["data"])
        if not exp_data:
            raise _fail(p, n, '"expected"."data" is empty')
    request = {k: v for k, v in doc.items() if k != "expected"}
    return EvalRequest(line=n, request=request, expected=exp_data, expected_name=exp_name)


def _flat(data: Any) -> list[Any]:
    if isinstance(data, list):
        return [x for item in data for x in _flat(item)]
    return [data]


@dataclass(frozen=True)
class FolderAnswers:
    """A folder's answers to every request of the file, rows concatenated in the file's order."""

    labels: Any
    proba: Any | None
    label_output: str
    implementation: str


def _check_metadata(p: Path, req: EvalRequest, declared: Sequence[Any]) -> None:
    """The request's inputs against the model's metadata inputs (when it declares any)."""
    if not declared:
        return
    by_name = {d.name: d for d in declared}
    for t in req.request["inputs"]:
        d = by_name.get(t["name"])
        if d is None:
            raise _fail(p, req.line, f"input {t['name']!r} is not one of the model's inputs ({', '.join(by_name)})")
        want, got = list(d.shape or []), list(t["shape"])
        if want and (len(want) != len(got) or any(w not in (-1, g) for w, g in zip(want, got, strict=True))):
            raise _fail(p, req.line, f"input {t['name']!r} has shape {got}, the model's metadata says {want} (-1: any)")
        if d.datatype and d.datatype != t["datatype"]:
            raise _fail(p, req.line, f"input {t['name']!r} is {t['datatype']}, the model's metadata says {d.datatype}")
    given = {t["name"] for t in req.request["inputs"]}
    missing = [name for name in by_name if name not in given]
    if missing:
        raise _fail(p, req.line, f"the request lacks the model's input(s) {', '.join(missing)}")


def _decoded(output: Any) -> Any:
    from mlserver.codecs import NumpyCodec

    arr = np.asarray(NumpyCodec.decode_output(output))
    if arr.dtype == object or arr.dtype.kind == "S":
        arr = np.asarray([x.decode() if isinstance(x, bytes) else x for x in arr.ravel()], dtype=object)
    return arr


#: the environment a folder's code gets (``scrubbed_env``): names, and prefixes ending in ``_``
_KEPT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP", "PYTHONPATH",
             "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "SYSTEMROOT", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "LC_")  # fmt: skip
_CHILD_TIMEOUT_S = 1800.0


def scrubbed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with only what running Python needs (``_KEPT_ENV``): no tokens, keys or credentials, even
    under a kept prefix (``LC_API_TOKEN``)."""
    kept = (k for k in environ if k in _KEPT_ENV or (k.startswith("LC_") and "LC_" in _KEPT_ENV))
    return {k: environ[k] for k in kept if not is_secret_name(k)}


def predict_folders(variants: Sequence[tuple[str, str]], eval_path: str | Path) -> dict[tuple[str, str], FolderAnswers]:
    """Every (folder, runtime)'s answers to the requests of ``eval_path``, computed in one child process
    (``servers.mlserver.folder_quality_child``) with a scrubbed environment; its ``ValueError`` (a line of the file,
    a refused request) raised here as it was."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="satpoint-quality-") as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "answers.json"
        spec.write_text(json.dumps({"variants": [list(v) for v in variants], "eval": str(eval_path), "out": str(out)}))
        argv = [sys.executable, "-m", "satpoint.servers.mlserver.folder_quality_child", str(spec)]
        try:
            done = subprocess.run(
                argv, env=scrubbed_env(os.environ), cwd=tmp, capture_output=True, text=True, timeout=_CHILD_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise ValueError(f"judging the model folders took over {_CHILD_TIMEOUT_S:g} s") from None
        try:
            doc = json.loads(out.read_text())
        except (OSError, ValueError):
            tail = (done.stderr or "").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
            raise ValueError(f"judging the model folders failed: {tail[0]}") from None
    if "error" in doc:
        raise ValueError(doc["error"])
    answers = {}
    for v, a in zip(variants, doc["answers"], strict=True):
        proba = None if a["proba"] is None else np.asarray(a["proba"], dtype=float)
        answers[v] = FolderAnswers(np.asarray(a["labels"], dtype=object), proba, a["label_output"], a["implementation"])
    return answers


def predict_folder(
    model_dir: str | Path, requests: Sequence[EvalRequest], eval_path: str | Path, runtime: str = DEFAULT_RUNTIME
) -> FolderAnswers:
    """Load the folder's model through its MLServer runtime in this process (with ``runtime`` onnx,
    onnx-int8 or openvino: its ONNX model as satpoint serves it, derived in a temp folder) and answer
    every request: what the child process of ``predict_folders`` runs."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="satpoint-quality-") as tmp:
        return asyncio.run(_predict_folder(Path(model_dir), requests, Path(eval_path), runtime, Path(tmp)))


async def _predict_folder(
    model_dir: Path, requests: Sequence[EvalRequest], eval_path: Path, runtime: str, tmp: Path
) -> FolderAnswers:
    from mlserver.errors import MLServerError
    from mlserver.settings import ModelSettings
    from mlserver.types import InferenceRequest, RequestOutput

    settings = MLServerSettings(model_dir=model_dir, runtime=runtime)
    doc = folder_model_settings(settings)
    doc["_source"] = str((model_dir / MODEL_SETTINGS_FILE).resolve())
    params = doc.setdefault("parameters", {})
    if runtime != DEFAULT_RUNTIME:  # the served model.onnx, written outside the user's folder
        params["uri"] = str(write_folder_onnx(find_folder_onnx(model_dir, runtime), runtime, tmp))
    if not params.get("uri"):  # MLServer's default when the folder is loaded from its repository
        params["uri"] = str(model_dir.resolve())
    try:
        model_settings = ModelSettings.model_validate(doc)
        model = model_settings.implementation(model_settings)
        await model.load()
        metadata = await model.metadata()
    except Exception as e:  # a user's runtime may raise anything while loading
        raise ValueError(f"the model in {model_dir} did not load for the quality figures: {e}") from e
    impl = str(doc.get("implementation"))
    labels: list[Any] = []
    probas: list[Any] | None = []
    label_output: str | None = None
    for req in requests:
        _check_metadata(eval_path, req, metadata.inputs or [])
        try:
            payload = InferenceRequest.model_validate(req.request)
        except ValueError as e:
            raise _fail(eval_path, req.line, f"not an inference request: {e}") from None
        try:
            response = await model.predict(payload)
        except (MLServerError, ValueError, TypeError, KeyError, IndexError) as e:
            raise _fail(eval_path, req.line, f"the model in {model_dir} refused the request: {e}") from None
        outputs = {o.name: o for o in response.outputs}
        name = req.expected_name or (PREDICT_OUTPUT if PREDICT_OUTPUT in outputs else response.outputs[0].name)
        if name not in outputs:
            raise _fail(
                eval_path,
                req.line,
                f"the model in {model_dir} answered no output {name!r} (it answered {', '.join(outputs)})",
            )
        if label_output is not None and name != label_output:
            raise _fail(eval_path, req.line, f"labels come from output {name!r} here and {label_output!r} before")
        label_output = name
        got = _decoded(outputs[name]).ravel()
        if req.expected is not None and len(req.expected) != got.size:
            raise _fail(
                eval_path, req.line, f'"expected" has {len(req.expected)} labels, the model answered {got.size} rows'
            )
        labels.append(got)
        if probas is not None:
            proba = outputs.get(PROBA_OUTPUT)
            if proba is None:
                try:
                    asked = InferenceRequest.model_validate(req.request)
                    asked.outputs = [RequestOutput(name=PROBA_OUTPUT)]
                    again = await model.predict(asked)
                    proba = next((o for o in again.outputs if o.name == PROBA_OUTPUT), None)
                except Exception:  # no probabilities from this runtime: not an error
                    proba = None
            arr = _decoded(proba).astype(float) if proba is not None else None
            probas = None if arr is None or arr.size % got.size else [*probas, arr.reshape(got.size, -1)]
    assert label_output is not None
    return FolderAnswers(
        labels=np.concatenate(labels),
        proba=np.concatenate(probas) if probas else None,
        label_output=label_output,
        implementation=impl,
    )


def _label_array(values: Any) -> Any:
    """Labels comparable across sources: whole-number floats as ints, everything else as text."""
    arr = np.asarray(values, dtype=object).ravel()
    out = []
    for x in arr:
        if isinstance(x, bool | np.bool_):
            out.append(str(x))
        elif isinstance(x, int | np.integer) or (isinstance(x, float | np.floating) and float(x).is_integer()):
            out.append(str(int(x)))
        else:
            out.append(str(x))
    return np.asarray(out, dtype=object)


def folder_quality(
    model_dirs: Iterable[str], eval_data: str | Path, reference_dir: str | None = None
) -> dict[str, dict[str, Any]]:
    """Quality figures for every model folder (each run once), keyed by the folder as given; the reference
    is ``reference_dir``, else the first folder."""
    variants = [(str(d), DEFAULT_RUNTIME) for d in model_dirs]
    return {d: q for (d, _), q in variant_quality(variants, eval_data, reference_dir).items()}


def variant_quality(
    variants: Iterable[tuple[str, str]], eval_data: str | Path, reference_dir: str | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """Quality figures for every (model folder, runtime) (each run once; runtime ``sklearn``: the folder as
    it is, else its ONNX model as satpoint serves it), keyed as given; the reference is ``reference_dir``
    served as it is, else the first variant."""
    folders = list(dict.fromkeys((str(d), str(r)) for d, r in variants))
    if not folders:
        return {}
    requests = read_eval_data(eval_data)
    ref = (str(reference_dir), DEFAULT_RUNTIME) if reference_dir is not None else folders[0]
    answers = predict_folders(list(dict.fromkeys([ref, *folders])), eval_data)
    ref_ans = answers[ref]
    expected = [x for r in requests for x in (r.expected or [])]
    has_expected = requests[0].expected is not None
    ref_labels = _label_array(ref_ans.labels)
    truth = _label_array(expected) if has_expected else ref_labels
    n_rows = int(ref_labels.size)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for d in folders:
        ans = answers[d]
        labels = _label_array(ans.labels)
        if labels.size != n_rows:
            raise ValueError(f"{d[0]} answered {labels.size} rows to --eval-data, the reference {ref[0]} {n_rows}")
        both_proba = ans.proba is not None and ref_ans.proba is not None and ans.proba.shape == ref_ans.proba.shape
        zeros = np.zeros((n_rows, 1))
        figures = quality_figures(
            truth,
            ref_labels,
            ref_ans.proba if both_proba else zeros,
            labels,
            ans.proba if both_proba else zeros,
        )
        if not both_proba:
            figures["max_abs_proba_diff"] = None
        out[d] = {
            "demo_model": None,
            "runtime": None if d[1] == DEFAULT_RUNTIME else d[1],
            "model_dir": d[0],
            "implementation": ans.implementation,
            "reference": f"model_dir {ref[0]}"
            + ("" if ref[1] == DEFAULT_RUNTIME else f" runtime={ref[1]}")
            + (" (--reference-model-dir)" if reference_dir is not None else " (the first point's)"),
            "held_out": f"--eval-data {eval_data}: {len(requests)} requests, {n_rows} rows",
            "truth": (
                f"the expected {ans.label_output!r} labels in --eval-data"
                if has_expected
                else "the reference's labels (no expected outputs in --eval-data): accuracy is agreement"
            ),
            **figures,
        }
    return out
