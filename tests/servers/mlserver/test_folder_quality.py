"""A user's model folders judged on ``--eval-data`` (``servers.mlserver.folder_quality``): a small scikit-learn model
in a joblib folder and converted to ONNX, each run offline through its own MLServer runtime; the file's
checks; the sweep's figures per point and its recommendation. No server."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from satpoint.analysis.sweep.artefact_choice import attach_quality
from satpoint.experiments.sweep_config import SweepConfig
from satpoint.experiments.sweep_quality import sweep_quality
from satpoint.experiments.sweep_servers import BaseServer
from satpoint.reports.sweep import quality_cells
from satpoint.servers.mlserver.folder_quality import folder_quality, read_eval_data
from satpoint.servers.models.demo import to_onnx_bytes

# the folder's runtime is loaded in process (MLServer's modules): apart from tritonclient (tests/conftest.py)
pytestmark = [pytest.mark.mlserver_in_process, pytest.mark.slow]


_SKLEARN = "mlserver_sklearn.SKLearnModel"
_ONNX = "satpoint.servers.artefacts.onnx_runtime.OnnxModel"


def _folder(root: Path, name: str, implementation: str, files: dict[str, bytes], inputs: Any = None) -> Path:
    d = root / name
    d.mkdir()
    for fname, data in files.items():
        (d / fname).write_bytes(data)
    settings: dict[str, Any] = {"name": name, "implementation": implementation}
    if inputs is not None:
        settings["inputs"] = inputs
    (d / "model-settings.json").write_text(json.dumps(settings))
    return d


def _joblib(model: Any) -> bytes:
    import io

    import joblib

    buf = io.BytesIO()
    joblib.dump(model, buf)
    return buf.getvalue()


def _request(rows: Any, expected: Any = None, name: str = "input-0") -> str:
    doc: dict[str, Any] = {
        "inputs": [{"name": name, "shape": list(rows.shape), "datatype": "FP32", "data": rows.ravel().tolist()}]
    }
    if expected is not None:
        doc["expected"] = {"name": "predict", "data": [int(x) for x in expected]}
    return json.dumps(doc)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Folders ``sk`` (joblib), ``onnx`` (the same model as ONNX), ``weak`` (a model fit on little data)
    and ``sk_decl`` (declares its input in model-settings.json); an eval file with and one without
    expected labels (iris, held-out rows)."""
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split

    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.4, random_state=0, stratify=y)
    good = LogisticRegression(max_iter=500).fit(x_tr, y_tr)
    with warnings.catch_warnings():  # the weak model is meant not to converge
        warnings.simplefilter("ignore")
        weak = LogisticRegression(max_iter=3, C=0.001).fit(x_tr[::10], y_tr[::10])
    root = tmp_path_factory.mktemp("folders")
    decl = [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}]
    folders = {
        "sk": _folder(root, "sk", _SKLEARN, {"model.joblib": _joblib(good)}),
        "onnx": _folder(root, "onnx", _ONNX, {"model.onnx": to_onnx_bytes(good, 4)}),
        "weak": _folder(root, "weak", _SKLEARN, {"model.joblib": _joblib(weak)}),
        "sk_decl": _folder(root, "sk_decl", _SKLEARN, {"model.joblib": _joblib(good)}, decl),
    }
    lines = [_request(x_te[i : i + 6], y_te[i : i + 6]) for i in range(0, len(x_te), 6)]
    with_expected = root / "eval.jsonl"
    with_expected.write_text("\n".join(lines) + "\n")
    inputs_only = root / "inputs.jsonl"
    inputs_only.write_text("\n".join(_request(x_te[i : i + 6]) for i in range(0, len(x_te), 6)) + "\n")
    return {
        "root": root,
        "folders": {k: str(v) for k, v in folders.items()},
        "eval": with_expected,
        "inputs": inputs_only,
        "x": x_te,
        "y": y_te,
        "good": good,
        "weak": weak,
    }


def test_quality_against_expected_outputs(setup: dict[str, Any]) -> None:
    f = setup["folders"]
    q = folder_quality([f["sk"], f["onnx"], f["weak"]], setup["eval"])
    x, y = setup["x"], setup["y"]
    good_acc = float(np.mean(setup["good"].predict(x) == y))
    weak_acc = float(np.mean(setup["weak"].predict(x) == y))
    assert good_acc > weak_acc + 0.1  # the test needs a model that is clearly worse
    sk, onnx, weak = q[f["sk"]], q[f["onnx"]], q[f["weak"]]
    assert sk["rows"] == len(y) == onnx["rows"]
    assert sk["accuracy"] == pytest.approx(good_acc, abs=1e-6) and sk["reference_accuracy"] == sk["accuracy"]
    assert sk["accuracy_loss_pp"] == 0.0 and sk["agreement"] == 1.0 and sk["max_abs_proba_diff"] == 0.0
    # ONNX: same labels, float32 probabilities (both runtimes answer predict_proba when asked)
    assert onnx["agreement"] == 1.0 and onnx["max_abs_proba_diff"] is not None and onnx["max_abs_proba_diff"] < 1e-4
    assert weak["accuracy"] == pytest.approx(weak_acc, abs=1e-6)
    assert weak["accuracy_loss_pp"] == pytest.approx(100 * (good_acc - weak_acc), abs=1e-3)
    assert weak["agreement"] < 1.0 and weak["max_abs_proba_diff"] > 0.01
    assert weak["model_dir"] == f["weak"] and weak["implementation"] == _SKLEARN
    assert "first point" in weak["reference"] and "expected" in weak["truth"]


def test_inputs_only_agreement_with_a_reference_folder(setup: dict[str, Any]) -> None:
    f = setup["folders"]
    q = folder_quality([f["weak"], f["onnx"]], setup["inputs"], reference_dir=f["sk"])
    x = setup["x"]
    agree = float(np.mean(setup["weak"].predict(x) == setup["good"].predict(x)))
    weak = q[f["weak"]]
    assert set(q) == {f["weak"], f["onnx"]}  # the reference is judged against, not reported
    assert weak["agreement"] == pytest.approx(agree, abs=1e-6) and weak["accuracy"] == weak["agreement"]
    assert weak["reference_accuracy"] == 1.0 and weak["accuracy_loss_pp"] == pytest.approx(100 * (1 - agree), abs=1e-3)
    assert "--reference-model-dir" in weak["reference"] and "no expected outputs" in weak["truth"]
    assert q[f["onnx"]]["accuracy_loss_pp"] == 0.0


def _write(root: Path, name: str, text: str) -> Path:
    p = root / name
    p.write_text(text)
    return p


def test_eval_file_errors_name_the_line(setup: dict[str, Any]) -> None:
    root: Path = setup["root"]
    good_line = _request(setup["x"][:2], setup["y"][:2])
    with pytest.raises(ValueError, match="no such file"):
        read_eval_data(root / "missing.jsonl")
    with pytest.raises(ValueError, match=r"line 2: not valid JSON"):
        read_eval_data(_write(root, "bad.jsonl", good_line + "\n{oops\n"))
    with pytest.raises(ValueError, match=r"line 1: no \"inputs\""):
        read_eval_data(_write(root, "noinp.jsonl", '{"expected": {"data": [1]}}\n'))
    with pytest.raises(ValueError, match=r"line 3: no \"expected\" although"):
        read_eval_data(_write(root, "mixed.jsonl", f"{good_line}\n\n{_request(setup['x'][:2])}\n"))
    with pytest.raises(ValueError, match=r"shape \[2, 4\] holds 8 values, data has 3"):
        read_eval_data(_write(root, "size.jsonl", good_line.replace('"data": [', '"data": [1, 2, 3], "x": [', 1)))
    with pytest.raises(ValueError, match="holds no requests"):
        read_eval_data(_write(root, "empty.jsonl", "\n\n"))
    assert [r.line for r in read_eval_data(_write(root, "ok.jsonl", f"\n{good_line}\n"))] == [2]


def test_requests_that_do_not_fit_the_model(setup: dict[str, Any]) -> None:
    root: Path = setup["root"]
    f, x = setup["folders"], setup["x"]
    # metadata declared in model-settings.json: the input's name and shape are checked against it
    wrong_name = _write(root, "name.jsonl", _request(x[:2], name="features") + "\n")
    with pytest.raises(ValueError, match=r"line 1: input 'features' is not one of the model's inputs \(input-0\)"):
        folder_quality([f["sk_decl"]], wrong_name)
    wrong_shape = _write(root, "shape.jsonl", _request(x[:2]) + "\n" + _request(x[:2, :3]) + "\n")
    with pytest.raises(
        ValueError, match=r"line 2: input 'input-0' has shape \[2, 3\], the model's metadata says \[-1, 4\]"
    ):
        folder_quality([f["sk_decl"]], wrong_shape)
    # no metadata: the runtime's own refusal, with the line
    with pytest.raises(ValueError, match=r"line 2: the model in .*onnx refused the request: input shape \[2, 3\]"):
        folder_quality([f["onnx"]], wrong_shape)
    wrong_count = _write(root, "count.jsonl", _request(x[:2], [0, 1, 2]) + "\n")
    with pytest.raises(ValueError, match=r'line 1: "expected" has 3 labels, the model answered 2 rows'):
        folder_quality([f["sk"]], wrong_count)


def test_sweep_figures_per_point_and_the_recommendation(setup: dict[str, Any]) -> None:
    f = setup["folders"]
    cfg = SweepConfig(sets=(f"model_dir={f['sk']},{f['onnx']},{f['weak']}",), eval_data=str(setup["eval"])).validate()
    quality = sweep_quality(cfg, cfg.points())
    assert [quality[p]["model_dir"] for p in ("p01", "p02", "p03")] == [f["sk"], f["onnx"], f["weak"]]
    assert all(f["sk"] in quality[p]["reference"] for p in quality)  # the first point's folder
    speeds = {"p01": (100, 105), "p02": (300, 310), "p03": (600, 620)}  # the weak model is the fastest
    rows = [
        {"id": p, "label": f"model_dir={quality[p]['model_dir']}", **_speed(*speeds[p])} for p in ("p01", "p02", "p03")
    ]
    doc: dict[str, Any] = {"objective": "saturation", "points": rows, "recommendation": ["best: p03"]}
    attach_quality(doc, quality, 1.0)
    choice = doc["artefact_choice"]
    assert choice["point"] == "p02" and choice["over_bound"] == ["p03"]
    assert "on --eval-data" in choice["text"] and "is left out" in choice["text"]
    assert doc["recommendation"][1] == choice["text"]
    attach_quality(doc, quality, 100.0)
    assert doc["artefact_choice"]["point"] == "p03"
    # the sweep's document keeps the settings for a resume
    again = SweepConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again.eval_data == str(setup["eval"]) and again.reference_model_dir is None


def _speed(lo: float, hi: float) -> dict[str, Any]:
    """A point row's speed figures as the sweep's analysis writes them (two measurements, lo..hi rps)."""
    return {
        "saturation_rps": {"median": (lo + hi) / 2, "min": lo, "max": hi, "n": 2},
        "measurements": 2,
        "bracket_rps": [lo, hi * 1.05],
        "rps_per_core": None,
        "server_cores": 1,
        "lower_bound": False,
    }


def test_sweep_refuses_eval_data_it_cannot_use(setup: dict[str, Any]) -> None:
    f = setup["folders"]
    with pytest.raises(ValueError, match="judges your model folders"):
        SweepConfig(sets=("runtime=sklearn,onnx",), eval_data=str(setup["eval"])).validate()
    with pytest.raises(ValueError, match="give --eval-data"):
        SweepConfig(sets=(f"model_dir={f['sk']},{f['onnx']}",), reference_model_dir=f["sk"]).validate()
    with pytest.raises(ValueError, match="no such file"):
        SweepConfig(sets=(f"model_dir={f['sk']},{f['onnx']}",), eval_data=str(setup["root"] / "nope")).validate()
    base = BaseServer(model_dir=f["sk"])
    with pytest.raises(ValueError, match="does not exist"):
        SweepConfig(
            sets=("workers=1,2",), server=base, eval_data=str(setup["eval"]), reference_model_dir="/nonexistent"
        ).validate()


def test_a_model_without_probabilities_shows_a_dash() -> None:
    row = {"quality": {"accuracy": 0.9, "accuracy_loss_pp": 0.5, "agreement": 0.95, "max_abs_proba_diff": None}}
    assert quality_cells(row) == ["90.0 (+0.5)", "95.0", "-"]


_ENV_MODEL = '''
import os

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceResponse


class EnvModel(MLModel):
    """Answers, per row, 1 when it shares satpoint's process or sees its environment's secret, else 0."""

    async def load(self) -> bool:
        return True

    async def predict(self, payload):
        rows = payload.inputs[0].shape[0]
        leaked = os.environ.get("SATPOINT_TEST_TOKEN") is not None or os.getpid() == int(os.environ.get("P", "0"))
        out = NumpyCodec.encode_output("predict", np.full(rows, int(leaked)))
        return InferenceResponse(model_name=self.name, outputs=[out])
'''


def test_a_folder_s_code_runs_in_a_child_without_satpoint_s_environment(
    setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    root: Path = setup["root"]
    folder = _folder(root, "env", "envmodel.EnvModel", {"envmodel.py": _ENV_MODEL.encode()})
    monkeypatch.setenv("SATPOINT_TEST_TOKEN", "s3cret")
    monkeypatch.setenv("P", str(__import__("os").getpid()))  # kept only if the environment is not scrubbed
    got = folder_quality([str(folder)], setup["inputs"])[str(folder)]
    assert got["implementation"] == "envmodel.EnvModel"
    expected = _write(root, "zeros.jsonl", _request(setup["x"][:3], [0, 0, 0]) + "\n")
    assert folder_quality([str(folder)], expected)[str(folder)]["accuracy"] == 1.0  # every row answered 0
    from satpoint.servers.mlserver.folder_quality import scrubbed_env

    kept = scrubbed_env({"PATH": "/bin", "LC_ALL": "C", "AWS_SECRET_ACCESS_KEY": "x", "HF_TOKEN": "y", "P": "1"})
    assert kept == {"PATH": "/bin", "LC_ALL": "C"}


def test_a_credential_under_a_kept_prefix_is_scrubbed_too() -> None:
    from satpoint.servers.mlserver.folder_quality import scrubbed_env

    environ = {"LC_ALL": "C.UTF-8", "LC_API_TOKEN": "t0k", "LC_PASSWORD": "pw", "LC_AUTH": "a", "PATH": "/bin"}
    assert scrubbed_env(environ) == {"LC_ALL": "C.UTF-8", "PATH": "/bin"}
