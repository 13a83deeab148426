"""A user's ONNX model folder served through satpoint's own runtimes: ``runtime=onnx`` (the file as it is,
:class:`satpoint.servers.artefacts.onnx_runtime.OnnxModel`), ``runtime=onnx-int8`` (a copy quantized with
``demo_model.quantize_onnx_bytes``) and ``runtime=openvino`` (``OpenVinoModel``, where the openvino
package is installed). The derived ``model.onnx`` is written in the server's own temp folder, never in the
user's folder.

The folder must hold exactly one ``*.onnx`` file that the runtime can serve (checked here with ``onnx``,
before anything starts): one input, a float32 tensor of rank 2 (``onnx_runtime.input_rows`` decodes the
request as float32 rows ``[N, features]``), and a tensor output to answer ``predict`` with (``label`` if
present, else the first output; a ZipMap's sequence of maps cannot be encoded). ``onnx-int8`` needs a
MatMul with a constant weight matrix (what dynamic quantization rewrites); ``openvino`` needs a
``probabilities`` tensor output (its ``predict`` is their argmax) reachable without ``ai.onnx.ml``
operators, which OpenVINO cannot convert."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from satpoint.servers.models.demo import (
    ONNX_FILENAME,
    ONNX_LABEL_OUTPUT,
    ONNX_PROBA_OUTPUT,
    quantize_onnx_bytes,
)

__all__ = [
    "FOLDER_RUNTIMES",
    "check_folder_onnx",
    "check_folder_runtime",
    "find_folder_onnx",
    "folder_implementation",
    "folder_onnx_bytes",
    "folder_onnx_inputs",
    "write_folder_onnx",
]

#: the runtimes a user's ONNX folder can be served through (besides the default: the folder as it is)
FOLDER_RUNTIMES = ("onnx", "onnx-int8", "openvino")
ML_DOMAIN = "ai.onnx.ml"
_ONNX_IMPLEMENTATION = "satpoint.servers.artefacts.onnx_runtime.OnnxModel"
_OPENVINO_IMPLEMENTATION = "satpoint.servers.artefacts.openvino_runtime.OpenVinoModel"


def folder_implementation(runtime: str) -> str:
    """The ``implementation`` of the derived folder's ``model-settings.json``."""
    return _OPENVINO_IMPLEMENTATION if runtime == "openvino" else _ONNX_IMPLEMENTATION


def check_folder_runtime(runtime: str) -> None:
    """A ValueError unless ``runtime`` is one a user's ONNX folder can be served through."""
    if runtime not in FOLDER_RUNTIMES:
        raise ValueError(
            f"runtime={runtime} does not apply to a model folder: give one of {', '.join(FOLDER_RUNTIMES)} "
            "(a folder holding one ONNX model, served by satpoint's runtimes) or none (the folder served as it is)"
        )


def find_folder_onnx(model_dir: Path, runtime: str) -> Path:
    """The one ``*.onnx`` file of ``model_dir`` (a ValueError when there is none or several)."""
    check_folder_runtime(runtime)
    folder = Path(model_dir)
    if not folder.is_dir():
        raise ValueError(f"model_dir {folder} is not a folder")
    found = sorted(p for p in folder.glob("*.onnx") if p.is_file())
    if len(found) != 1:
        what = "no *.onnx file" if not found else f"{len(found)} *.onnx files ({', '.join(p.name for p in found)})"
        raise ValueError(
            f"runtime={runtime} with model_dir serves a folder holding exactly one *.onnx model; {folder} has "
            f"{what} (serve other folders as they are, without runtime)"
        )
    return found[0]


def folder_onnx_inputs(path: Path) -> list[dict[str, object]]:
    """The input to declare in the derived ``model-settings.json`` (MLServer lists a model's inputs in its
    metadata only when the settings declare them, and satpoint builds requests from that metadata): the
    ONNX graph's one input as FP32 ``[-1, features]``; none when the feature count is not fixed in the graph
    (then requests come from ``--payload``)."""
    import onnx

    graph = onnx.load(str(path)).graph
    initialized = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initialized]
    if len(inputs) != 1 or not inputs[0].type.HasField("tensor_type"):
        return []
    dims = inputs[0].type.tensor_type.shape.dim
    features = dims[1].dim_value if len(dims) == 2 and dims[1].HasField("dim_value") else 0
    if features <= 0:
        return []
    return [{"name": inputs[0].name, "datatype": "FP32", "shape": [-1, int(features)]}]


def check_folder_onnx(path: Path, runtime: str) -> None:
    """A ValueError saying why satpoint's ``runtime`` cannot serve the ONNX file ``path``; None if it can."""
    import onnx

    check_folder_runtime(runtime)
    try:
        model = onnx.load(str(path))
    except Exception as e:  # a corrupt or foreign file
        raise ValueError(f"{path} is not a readable ONNX model: {e}") from None
    graph = model.graph
    initialized = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initialized]
    why = f"runtime={runtime} cannot serve {path}"
    if len(inputs) != 1:
        raise ValueError(f"{why}: satpoint's ONNX runtime serves models with one input, this one has {len(inputs)}")
    ttype = inputs[0].type.tensor_type if inputs[0].type.HasField("tensor_type") else None
    if ttype is None or ttype.elem_type != onnx.TensorProto.FLOAT:
        raise ValueError(
            f"{why}: its input {inputs[0].name!r} must be a float32 tensor (requests are decoded as float32 "
            "rows [N, features])"
        )
    if len(ttype.shape.dim) != 2:
        raise ValueError(
            f"{why}: its input {inputs[0].name!r} has rank {len(ttype.shape.dim)}; satpoint's ONNX runtime "
            "takes rows [N, features] (rank 2)"
        )
    outputs = {o.name: o for o in graph.output}
    if not outputs:
        raise ValueError(f"{why}: it has no output")
    answer = outputs.get(ONNX_LABEL_OUTPUT) or graph.output[0]
    if not answer.type.HasField("tensor_type"):
        raise ValueError(
            f"{why}: its output {answer.name!r} is not a tensor (a classifier converted with ZipMap? convert "
            "it with zipmap disabled)"
        )
    if runtime == "onnx-int8":
        matmuls = [n for n in graph.node if n.op_type in ("MatMul", "Gemm") and any(x in initialized for x in n.input)]
        if not matmuls:
            raise ValueError(
                f"{why}: onnxruntime's dynamic quantization rewrites MatMul weights, and this model has no "
                "MatMul or Gemm with a constant weight matrix (a tree ensemble or ai.onnx.ml operator?)"
            )
    if runtime == "openvino":
        proba = outputs.get(ONNX_PROBA_OUTPUT)
        if proba is None or not proba.type.HasField("tensor_type"):
            raise ValueError(
                f"{why}: satpoint's OpenVINO runtime answers predict with the argmax of a "
                f"{ONNX_PROBA_OUTPUT!r} tensor output, and this model has none"
            )
        if importlib.util.find_spec("openvino") is None:
            raise ValueError("runtime openvino needs the openvino package: pip install 'satpoint[openvino]'")
        if any(n.domain == ML_DOMAIN for n in onnx.load_from_string(_openvino_bytes(model)).graph.node):
            raise ValueError(
                f"{why}: its {ONNX_PROBA_OUTPUT!r} output needs {ML_DOMAIN} operators, which OpenVINO "
                "cannot convert (a tree ensemble or linear classifier?)"
            )


def _openvino_bytes(model: object) -> bytes:
    import onnx

    assert isinstance(model, onnx.ModelProto)
    data: bytes = model.SerializeToString()
    if not any(n.domain == ML_DOMAIN for n in model.graph.node):
        return data
    import onnx.utils

    # the label branch (ai.onnx.ml) dropped, as demo_model.probabilities_only does for the demo models
    inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    cut = onnx.utils.Extractor(model).extract_model(inputs, [ONNX_PROBA_OUTPUT])
    out: bytes = cut.SerializeToString()
    return out


def folder_onnx_bytes(path: Path, runtime: str) -> bytes:
    """The ``model.onnx`` satpoint serves for the user's ONNX file ``path`` under ``runtime`` (checked)."""
    import onnx

    check_folder_onnx(path, runtime)
    data = Path(path).read_bytes()
    if runtime == "onnx-int8":
        return quantize_onnx_bytes(data)
    if runtime == "openvino":
        return _openvino_bytes(onnx.load_from_string(data))
    return data


def write_folder_onnx(path: Path, runtime: str, dest_dir: Path) -> Path:
    """Write the served ``model.onnx`` of ``path`` under ``runtime`` into ``dest_dir`` (the server's own
    folder); returns its path."""
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / ONNX_FILENAME
    out.write_bytes(folder_onnx_bytes(path, runtime))
    return out
