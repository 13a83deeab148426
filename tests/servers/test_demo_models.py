"""The demo models (iris, digits-mlp, digits-forest), their ONNX form, and how MLServerSettings / the CLI
check a demo model, a runtime and a user's model folder: fast, no server."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.experiments.compare import CompareConfig
from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget
from satpoint.servers.models.demo import (
    DEMO_MODELS,
    ONNX_INPUT_NAME,
    ONNX_LABEL_OUTPUT,
    ONNX_PROBA_OUTPUT,
    demo_dataset,
    demo_model,
    fit_demo_model,
    intra_op_threads,
    to_onnx_bytes,
    train_demo_model,
    write_demo_artifact,
)

EXPECTED_FEATURES = {"iris": 4, "digits-mlp": 64, "digits-forest": 64, "digits-mlp-pca16": 64}


#: the classifiers (textgen, the streaming demo model, has tests of its own)
CLASSIFIERS = [name for name, m in DEMO_MODELS.items() if not m.streaming]


@pytest.fixture(scope="module")
def fitted() -> dict[str, Any]:
    """Each demo model trained once for the module (about 2 s in all)."""
    return {name: fit_demo_model(name) for name in CLASSIFIERS}


# -- the models --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_three_demo_models_with_their_feature_counts(fitted: dict[str, Any]) -> None:
    assert CLASSIFIERS == ["iris", "digits-mlp", "digits-forest", "digits-mlp-pca16"]
    assert [name for name, m in DEMO_MODELS.items() if m.streaming] == [
        "textgen"
    ]  # tests/servers/models/test_textgen.py
    with pytest.raises(ValueError, match="text generator"):
        fit_demo_model("textgen")
    for name, model in fitted.items():
        features, labels = demo_dataset(name)
        assert demo_model(name).n_features == EXPECTED_FEATURES[name] == features.shape[1]
        assert model.n_features_in_ == EXPECTED_FEATURES[name]
        # trained, not a stub: they fit the data they were trained on
        assert (model.predict(features) == labels).mean() > 0.9
    with pytest.raises(ValueError, match="iris, digits-mlp, digits-forest"):
        demo_model("mnist")


@pytest.mark.parametrize("name", ["digits-mlp", "digits-forest"])
def test_training_is_deterministic(name: str, fitted: dict[str, Any], tmp_path: Path) -> None:
    features, _ = demo_dataset(name)
    again = joblib.load(train_demo_model(name, tmp_path))  # trained anew, through the file the server loads
    np.testing.assert_array_equal(again.predict_proba(features), fitted[name].predict_proba(features))


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_onnx_conversion_matches_sklearn(name: str, fitted: dict[str, Any]) -> None:
    import onnxruntime as ort

    model = fitted[name]
    features, _ = demo_dataset(name)
    session = ort.InferenceSession(
        to_onnx_bytes(model, demo_model(name).n_features), providers=["CPUExecutionProvider"]
    )
    (inp,) = session.get_inputs()
    assert (inp.name, inp.type, inp.shape) == (ONNX_INPUT_NAME, "tensor(float)", [None, EXPECTED_FEATURES[name]])
    # zipmap off: plain tensors, no list of dicts
    assert [(o.name, o.type) for o in session.get_outputs()] == [
        (ONNX_LABEL_OUTPUT, "tensor(int64)"),
        (ONNX_PROBA_OUTPUT, "tensor(float)"),
    ]
    rows = features.astype(np.float32)
    label, proba = session.run(None, {ONNX_INPUT_NAME: rows})
    # compared on the float32 rows the ONNX model sees (the data is exactly representable in float32)
    np.testing.assert_array_equal(label, model.predict(rows))
    np.testing.assert_allclose(proba, model.predict_proba(rows), atol=1e-5)


def test_write_demo_artifact(tmp_path: Path) -> None:
    assert write_demo_artifact("iris", "sklearn", tmp_path / "a").name == "model.joblib"
    onnx_path = write_demo_artifact("iris", "onnx", tmp_path / "b")
    assert onnx_path.name == "model.onnx" and onnx_path.stat().st_size > 100
    with pytest.raises(ValueError, match="sklearn, onnx"):
        write_demo_artifact("iris", "tensorflow", tmp_path / "c")


def test_intra_op_threads() -> None:
    assert intra_op_threads(None, {}) == 1
    assert intra_op_threads({}, {"OMP_NUM_THREADS": "2"}) == 2
    assert intra_op_threads({"intra_op_num_threads": 3}, {"OMP_NUM_THREADS": "2"}) == 3
    for extra, env in (
        ({"intra_op_num_threads": 0}, {}),
        (None, {"OMP_NUM_THREADS": "two"}),
        ({"intra_op_num_threads": 1.5}, {}),
    ):
        with pytest.raises(ValueError, match="positive integer"):
            intra_op_threads(extra, env)


# -- settings ----------------------------------------------------------------------------------------------


def test_settings_name_follows_the_demo_model() -> None:
    s = MLServerSettings()
    assert (s.demo_model, s.runtime, s.model_dir, s.served_model_name) == ("iris", "sklearn", None, "iris")
    assert MLServerTarget(s).model_name == "iris"
    mlp = MLServerSettings(demo_model="digits-mlp", runtime="onnx")
    assert mlp.served_model_name == "digits-mlp"
    assert MLServerSettings(demo_model="digits-mlp", model_name="m1").served_model_name == "m1"
    # replace() keeps the name following the model (nothing resolved is stored in the fields)
    assert dataclasses.replace(s, demo_model="digits-forest").served_model_name == "digits-forest"
    d = mlp.to_dict()
    assert {k: d[k] for k in ("demo_model", "runtime", "model_dir", "model_name", "max_batch_size")} == {
        "demo_model": "digits-mlp",
        "runtime": "onnx",
        "model_dir": None,
        "model_name": "digits-mlp",
        "max_batch_size": 1,
    }


def test_info_describes_the_demo_model_before_start() -> None:
    info = MLServerTarget(
        MLServerSettings(demo_model="digits-forest", runtime="onnx", env={"OMP_NUM_THREADS": "2"})
    ).info()
    model = info["model"]
    assert model["estimator"].startswith("sklearn.ensemble.RandomForestClassifier")
    assert model["dataset"] == "sklearn.datasets.load_digits"
    assert model["implementation"] == "satpoint.servers.artefacts.onnx_runtime.OnnxModel"
    assert model["inputs"] == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}]
    assert model["onnx"]["intra_op_num_threads"] == 2 and model["onnx"]["threads_from"] == "OMP_NUM_THREADS"
    assert info["versions"]["onnxruntime"] and info["versions"]["skl2onnx"]
    sk = MLServerTarget(MLServerSettings()).info()
    assert "onnx" not in sk["model"] and "onnxruntime" not in sk["versions"]
    assert sk["model"]["estimator"] == "sklearn.linear_model.LogisticRegression"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"demo_model": "mnist"}, "choose one of iris, digits-mlp, digits-forest"),
        ({"runtime": "tensorflow"}, "choose one of sklearn, onnx"),
        ({"max_batch_size": 0}, "max_batch_size"),
    ],
)
def test_settings_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MLServerSettings(**kwargs)


def write_folder(path: Path, settings: Any, raw: str | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "model-settings.json").write_text(raw if raw is not None else json.dumps(settings))
    return path


def test_model_dir_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        MLServerSettings(model_dir=tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a folder"):
        MLServerSettings(model_dir=tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"has no model-settings\.json"):
        MLServerSettings(model_dir=tmp_path / "empty")
    with pytest.raises(ValueError, match="is not valid JSON"):
        MLServerSettings(model_dir=write_folder(tmp_path / "bad", None, raw="{name: 1"))
    with pytest.raises(ValueError, match="JSON object"):
        MLServerSettings(model_dir=write_folder(tmp_path / "list", [1]))
    with pytest.raises(ValueError, match='names no "implementation"'):
        MLServerSettings(model_dir=write_folder(tmp_path / "noimpl", {"name": "x"}))
    with pytest.raises(ValueError, match="give another with model_name"):
        MLServerSettings(model_dir=write_folder(tmp_path / "spaces", {"name": "my model", "implementation": "a.B"}))
    good = write_folder(tmp_path / "good", {"name": "mine", "implementation": "a.B", "max_batch_size": 8})
    with pytest.raises(ValueError, match="exclude each other"):
        MLServerSettings(model_dir=good, demo_model="digits-mlp")
    with pytest.raises(ValueError, match=r"exactly one \*\.onnx model; .* has no \*\.onnx file"):
        MLServerSettings(model_dir=good, runtime="onnx")  # a runtime serves a folder's one ONNX model


def test_model_dir_settings(tmp_path: Path) -> None:
    good = write_folder(tmp_path / "good", {"name": "mine", "implementation": "a.B", "max_batch_size": 8})
    s = MLServerSettings(model_dir=str(good))  # type: ignore[arg-type]  # a str is accepted too
    assert s.model_dir == good and s.served_model_name == "mine"
    assert s.effective_max_batch_size == 8 and s.effective_max_batch_time_s == 0.0
    d = s.to_dict()
    assert (d["demo_model"], d["runtime"], d["model_dir"], d["max_batch_size"]) == (None, None, str(good), 8)
    over = MLServerSettings(model_dir=good, max_batch_size=1, max_batch_time_s=0.0)
    assert over.effective_max_batch_size == 1
    info = MLServerTarget(over).info()["model"]
    assert info["overridden"] == {
        "max_batch_size": {"yours": 8, "used": 1},
        "max_batch_time": {"yours": None, "used": 0.0},
    }
    nameless = write_folder(tmp_path / "folder-name", {"implementation": "a.B"})
    assert MLServerSettings(model_dir=nameless).served_model_name == "folder-name"


# -- CLI and compare: usage errors before anything starts ------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--demo-model", "mnist"], "iris, digits-mlp, digits-forest"),
        (["--runtime", "tf"], "sklearn, onnx"),
        (["--model-dir", "/nonexistent/satpoint-model"], "does not exist"),
        (["--url", "http://127.0.0.1:9", "-m", "m", "--runtime", "onnx"], "--runtime describe the embedded"),
        (["--demo-model", "digits-mlp", "--model-dir", "."], "exclude each other"),
    ],
)
def test_find_usage_errors_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["find", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_compare_usage_errors_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["compare", "--runtime", "onnx", "--url", "http://127.0.0.1:9", "--model", "m"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "does not use --runtime (it sets up the embedded MLServer" in said
    result = CliRunner().invoke(app, ["compare", "--demo-model", "mnist", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "iris, digits-mlp, digits-forest" in result.output
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="not with a URL"):
        CompareConfig(url="http://127.0.0.1:9", model="m", protocols=("rest",), demo_model="iris").validate()
    cfg = CompareConfig(demo_model="digits-forest", runtime="onnx", workers=2).validate()
    s = cfg.server_settings()
    assert (s.demo_model, s.runtime, s.parallel_workers, s.served_model_name) == (
        "digits-forest",
        "onnx",
        2,
        "digits-forest",
    )
