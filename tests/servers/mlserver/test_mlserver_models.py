"""The embedded MLServer serving other models than iris: digits-mlp converted to ONNX through satpoint's
onnxruntime runtime, and a user's own model folder (``model_dir``). Real MLServer, real REST inference."""

from __future__ import annotations

import json
from pathlib import Path

import joblib
import numpy as np
import pytest

from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget
from satpoint.servers.models.demo import demo_dataset, fit_demo_model
from tests.servers.mlserver.test_mlserver import http_json, wait_gone

pytestmark = pytest.mark.slow


def infer(url: str, model: str, rows: np.ndarray, datatype: str = "FP32") -> tuple[int, object]:
    body = {
        "inputs": [{"name": "input-0", "datatype": datatype, "shape": list(rows.shape), "data": rows.ravel().tolist()}]
    }
    return http_json(f"{url}/v2/models/{model}/infer", body)


def test_digits_mlp_on_onnx_answers_like_sklearn() -> None:
    features, _ = demo_dataset("digits-mlp")
    rows = features[[0, 1, 2, 3, 5, 8, 13]]
    expected = fit_demo_model("digits-mlp").predict(rows)  # the same deterministic training
    settings = MLServerSettings(demo_model="digits-mlp", runtime="onnx", env={"OMP_NUM_THREADS": "1"})
    with MLServerTarget(settings, ready_timeout_s=90) as target:
        assert target.model_name == "digits-mlp"
        status, meta = http_json(f"{target.rest_url}/v2/models/digits-mlp")
        assert status == 200
        assert meta["inputs"] == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}]

        status, out = infer(target.rest_url, "digits-mlp", rows)
        assert status == 200, out
        assert isinstance(out, dict)
        (predict,) = out["outputs"]
        # the same answer the sklearn runtime gives: `predict`, INT64, [N, 1]
        assert (predict["name"], predict["datatype"], predict["shape"]) == ("predict", "INT64", [len(rows), 1])
        assert predict["data"] == expected.tolist()
        status, out = infer(target.rest_url, "digits-mlp", rows[:1].astype(np.float64), "FP64")
        assert status == 200 and isinstance(out, dict) and out["outputs"][0]["data"] == expected[:1].tolist()
        status, out = infer(target.rest_url, "digits-mlp", features[:1, :10])
        assert status == 400 and "[N, 64]" in json.dumps(out)

        info = target.info()
        assert info["model"]["onnx"]["intra_op_num_threads"] == 1
        assert info["settings"]["runtime"] == "onnx"
        assert info["train_s"] is not None and info["train_s"] > 0
        # the runtime says what it did in the server's log
        assert "intra_op_num_threads=1" in target.log_tail(200)
        seen = target.seen_pids
    assert wait_gone(seen) == []


def test_user_model_folder_is_served_as_it_is(tmp_path: Path) -> None:
    from sklearn.linear_model import LogisticRegression

    features, labels = demo_dataset("iris")
    folder = tmp_path / "my-model"
    (folder / "artefacts").mkdir(parents=True)
    clf = LogisticRegression(max_iter=500).fit(features[:, :2], labels)  # two features: not the demo model
    joblib.dump(clf, folder / "artefacts" / "clf.joblib")
    own = {
        "name": "flowers",
        "implementation": "mlserver_sklearn.SKLearnModel",
        "parameters": {"uri": "./artefacts/clf.joblib"},
        "max_batch_size": 8,
        "max_batch_time": 0.5,
        "inputs": [{"name": "input-0", "datatype": "FP64", "shape": [-1, 2]}],
    }
    (folder / "model-settings.json").write_text(json.dumps(own))
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))

    # max_batch_time given explicitly replaces the folder's 0.5 s (which would add half a second here)
    with MLServerTarget(MLServerSettings(model_dir=folder, max_batch_time_s=0.0), ready_timeout_s=90) as target:
        assert target.model_name == "flowers"
        status, meta = http_json(f"{target.rest_url}/v2/models/flowers")
        assert status == 200 and meta["inputs"] == own["inputs"]
        rows = features[[0, 60, 120]][:, :2]
        status, out = infer(target.rest_url, "flowers", rows, "FP64")
        assert status == 200, out
        assert isinstance(out, dict) and out["outputs"][0]["data"] == clf.predict(rows).tolist()

        info = target.info()
        model = info["model"]
        assert model["model_dir"] == str(folder.resolve())
        assert model["implementation"] == "mlserver_sklearn.SKLearnModel"
        assert (model["max_batch_size"], model["max_batch_time_s"]) == (8, 0.0)
        assert model["overridden"] == {"max_batch_time": {"yours": 0.5, "used": 0.0}}
        assert info["settings"]["demo_model"] is None and info["settings"]["model_dir"] == str(folder)
        served = json.loads((Path(info["workdir"]) / "flowers" / "model-settings.json").read_text())
        assert (served["max_batch_size"], served["max_batch_time"]) == (8, 0.0)
        seen = target.seen_pids
    assert wait_gone(seen) == []
    # the user's folder is left as it was
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    assert json.loads((folder / "model-settings.json").read_text()) == own
