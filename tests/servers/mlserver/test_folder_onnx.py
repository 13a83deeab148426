"""A user's ONNX model folder served through satpoint's runtimes (runtime=onnx, onnx-int8, openvino): the
settings produced, the derived model written outside the user's folder, the int8 copy, the refusals. Fast:
a tiny scikit-learn MLP and a tree converted to ONNX in tmp_path, no server."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from satpoint.experiments.sweep_config import SweepConfig
from satpoint.servers.mlserver.folder_onnx import folder_onnx_bytes, write_folder_onnx
from satpoint.servers.mlserver.settings import MLServerSettings, folder_model_settings
from satpoint.servers.models.demo import to_onnx_bytes

_HAVE_OPENVINO = importlib.util.find_spec("openvino") is not None


def _data() -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int64)


def _mlp_onnx() -> bytes:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    x, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = MLPClassifier(hidden_layer_sizes=(16,), max_iter=50, random_state=0).fit(x, y)
    return to_onnx_bytes(model, 4)


def _tree_onnx() -> bytes:
    from sklearn.tree import DecisionTreeClassifier

    x, y = _data()
    return to_onnx_bytes(DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y), 4)


@pytest.fixture(scope="module")
def onnx_models() -> dict[str, bytes]:
    return {"mlp": _mlp_onnx(), "tree": _tree_onnx()}


def _folder(root: Path, files: dict[str, bytes], settings: dict[str, Any] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    if settings is not None:
        (root / "model-settings.json").write_text(json.dumps(settings))
    return root


def test_onnx_and_int8_settings_and_artefact(tmp_path: Path, onnx_models: dict[str, bytes]) -> None:
    user = _folder(
        tmp_path / "user",
        {"clf.onnx": onnx_models["mlp"]},
        {"name": "my-clf", "implementation": "some_runtime.Model", "max_batch_size": 8, "parameters": {"x": 1}},
    )
    before = sorted(p.name for p in user.iterdir())
    s = MLServerSettings(model_dir=user, runtime="onnx")
    assert s.served_model_name == "my-clf"
    assert s.to_dict()["runtime"] == "onnx"
    doc = folder_model_settings(s)
    assert doc == {
        "name": "my-clf",
        "max_batch_size": 8,
        "implementation": "satpoint.servers.artefacts.onnx_runtime.OnnxModel",
        "parameters": {"uri": "./model.onnx"},
        # MLServer lists inputs only when the settings declare them: the graph's, for satpoint's requests
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, _data()[0].shape[1]]}],
    }
    assert folder_onnx_bytes(user / "clf.onnx", "onnx") == onnx_models["mlp"]

    int8 = MLServerSettings(model_dir=user, runtime="onnx-int8", max_batch_size=4)
    assert folder_model_settings(int8)["max_batch_size"] == 4
    out = write_folder_onnx(user / "clf.onnx", "onnx-int8", tmp_path / "served")
    data = out.read_bytes()
    assert data != onnx_models["mlp"]
    assert any(n.op_type == "DynamicQuantizeLinear" for n in onnx.load_from_string(data).graph.node)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x, _ = _data()
    label, _ = session.run(None, {"input": x})
    (expected, _) = ort.InferenceSession(onnx_models["mlp"], providers=["CPUExecutionProvider"]).run(None, {"input": x})
    assert label.shape == (60,) and float(np.mean(label == expected)) > 0.8
    assert sorted(p.name for p in user.iterdir()) == before  # the user's folder is never written to


def test_folder_without_model_settings_takes_its_name(tmp_path: Path, onnx_models: dict[str, bytes]) -> None:
    user = _folder(tmp_path / "plain", {"m.onnx": onnx_models["tree"]})
    s = MLServerSettings(model_dir=user, runtime="onnx")
    assert s.served_model_name == "plain"
    assert folder_model_settings(s)["implementation"] == "satpoint.servers.artefacts.onnx_runtime.OnnxModel"
    with pytest.raises(ValueError, match=r"no model-settings.json"):  # without a runtime: served as it is
        MLServerSettings(model_dir=user)


def test_refusals(tmp_path: Path, onnx_models: dict[str, bytes]) -> None:
    tree = _folder(tmp_path / "tree", {"m.onnx": onnx_models["tree"]})
    with pytest.raises(ValueError, match=r"onnx-int8 cannot serve .*no MatMul or Gemm with a constant weight"):
        MLServerSettings(model_dir=tree, runtime="onnx-int8")
    if _HAVE_OPENVINO:
        with pytest.raises(ValueError, match=r"needs ai.onnx.ml operators, which OpenVINO cannot convert"):
            MLServerSettings(model_dir=tree, runtime="openvino")
    else:
        with pytest.raises(ValueError, match=r"needs the openvino package"):
            MLServerSettings(model_dir=tree, runtime="openvino")
    two = _folder(tmp_path / "two", {"a.onnx": onnx_models["mlp"], "b.onnx": onnx_models["mlp"]})
    with pytest.raises(ValueError, match=r"exactly one \*\.onnx model; .* has 2 \*\.onnx files \(a.onnx, b.onnx\)"):
        MLServerSettings(model_dir=two, runtime="onnx")
    none = _folder(tmp_path / "none", {"model.joblib": b"x"})
    with pytest.raises(ValueError, match=r"has no \*\.onnx file"):
        MLServerSettings(model_dir=none, runtime="onnx")
    with pytest.raises(ValueError, match=r"runtime=pruned:0.5 does not apply to a model folder"):
        MLServerSettings(model_dir=tree, runtime="pruned:0.5")
    with pytest.raises(ValueError, match=r"and demo_model='digits-mlp' .* exclude"):
        MLServerSettings(model_dir=tree, demo_model="digits-mlp", runtime="onnx")
    broken = _folder(tmp_path / "broken", {"m.onnx": b"not onnx"})
    with pytest.raises(ValueError, match=r"is not a readable ONNX model"):
        MLServerSettings(model_dir=broken, runtime="onnx")


def _graph_onnx(elem_type: int, rank: int, zipmap_like: bool = False) -> bytes:
    from onnx import helper

    shape = [None, 4] if rank == 2 else [None, 2, 2]
    x = helper.make_tensor_value_info("x", elem_type, shape)
    if zipmap_like:
        out = helper.make_value_info("y", helper.make_sequence_type_proto(helper.make_tensor_type_proto(1, None)))
        node = helper.make_node("SequenceConstruct", ["x"], ["y"])
    else:
        out = helper.make_tensor_value_info("y", elem_type, shape)
        node = helper.make_node("Identity", ["x"], ["y"])
    model = helper.make_model(helper.make_graph([node], "g", [x], [out]), opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def test_refuses_graphs_the_runtime_cannot_decode(tmp_path: Path) -> None:
    cases = {
        "double": (_graph_onnx(onnx.TensorProto.DOUBLE, 2), r"must be a float32 tensor"),
        "rank3": (_graph_onnx(onnx.TensorProto.FLOAT, 3), r"has rank 3; .* \(rank 2\)"),
        "seq": (_graph_onnx(onnx.TensorProto.FLOAT, 2, zipmap_like=True), r"output 'y' is not a tensor"),
    }
    for name, (data, message) in cases.items():
        folder = _folder(tmp_path / name, {"m.onnx": data})
        with pytest.raises(ValueError, match=message):
            MLServerSettings(model_dir=folder, runtime="onnx")
    ok = _folder(tmp_path / "ok", {"m.onnx": _graph_onnx(onnx.TensorProto.FLOAT, 2)})
    assert MLServerSettings(model_dir=ok, runtime="onnx").runtime == "onnx"


def test_sweep_validates_runtimes_over_a_model_folder(tmp_path: Path, onnx_models: dict[str, bytes]) -> None:
    from satpoint.experiments.sweep_servers import BaseServer

    mlp = _folder(tmp_path / "mlp", {"m.onnx": onnx_models["mlp"]})
    cfg = SweepConfig(sets=("runtime=onnx,onnx-int8",), server=BaseServer(kind="mlserver", model_dir=str(mlp)))
    assert [p.values["runtime"] for p in cfg.validate().points()] == ["onnx", "onnx-int8"]
    tree = _folder(tmp_path / "tree", {"m.onnx": onnx_models["tree"]})
    bad = SweepConfig(sets=("runtime=onnx,onnx-int8",), server=BaseServer(kind="mlserver", model_dir=str(tree)))
    with pytest.raises(ValueError, match=r"onnx-int8 cannot serve"):
        bad.validate()


@pytest.mark.skipif(not _HAVE_OPENVINO, reason="the openvino package is not installed")
@pytest.mark.mlserver_in_process
def test_openvino_serves_the_probabilities_cut(tmp_path: Path, onnx_models: dict[str, bytes]) -> None:
    from satpoint.servers.artefacts.openvino_runtime import compile_openvino, openvino_predict

    user = _folder(tmp_path / "mlp", {"m.onnx": onnx_models["mlp"]})
    s = MLServerSettings(model_dir=user, runtime="openvino")
    assert folder_model_settings(s)["implementation"] == "satpoint.servers.artefacts.openvino_runtime.OpenVinoModel"
    out = write_folder_onnx(user / "m.onnx", "openvino", tmp_path / "served")
    cut = onnx.load(str(out))
    assert [o.name for o in cut.graph.output] == ["probabilities"]
    assert not any(n.domain == "ai.onnx.ml" for n in cut.graph.node)
    x, _ = _data()
    labels, _ = openvino_predict(compile_openvino(str(out), 1).create_infer_request(), x)
    (expected, _) = ort.InferenceSession(onnx_models["mlp"], providers=["CPUExecutionProvider"]).run(None, {"input": x})
    assert np.array_equal(labels, expected)


@pytest.mark.mlserver_in_process
@pytest.mark.slow
def test_eval_data_judges_each_runtime_of_a_folder(tmp_path: Path, onnx_models: dict[str, bytes]) -> None:
    from satpoint.experiments.sweep_quality import sweep_quality
    from satpoint.experiments.sweep_servers import BaseServer

    mlp = _folder(tmp_path / "mlp", {"m.onnx": onnx_models["mlp"]})
    x, y = _data()
    eval_path = tmp_path / "eval.jsonl"
    lines = []
    for i in range(0, 60, 20):
        rows = x[i : i + 20]
        doc = {
            "inputs": [{"name": "input", "shape": list(rows.shape), "datatype": "FP32", "data": rows.ravel().tolist()}]
        }
        lines.append(json.dumps({**doc, "expected": {"name": "predict", "data": [int(v) for v in y[i : i + 20]]}}))
    eval_path.write_text("\n".join(lines) + "\n")
    runtimes = "runtime=onnx,onnx-int8,openvino" if _HAVE_OPENVINO else "runtime=onnx,onnx-int8"
    cfg = SweepConfig(
        sets=(runtimes,), server=BaseServer(kind="mlserver", model_dir=str(mlp)), eval_data=str(eval_path)
    ).validate()
    quality = sweep_quality(cfg, cfg.points())
    assert [quality[p]["runtime"] for p in sorted(quality)] == runtimes.split("=")[1].split(",")
    first = quality["p01"]
    assert first["rows"] == 60 and first["agreement"] == 1.0 and "runtime=onnx" in first["reference"]
    assert quality["p02"]["implementation"] == "satpoint.servers.artefacts.onnx_runtime.OnnxModel"
    assert quality["p02"]["max_abs_proba_diff"] is not None and quality["p02"]["max_abs_proba_diff"] > 0  # int8
    assert sorted(p.name for p in mlp.iterdir()) == ["m.onnx"]
