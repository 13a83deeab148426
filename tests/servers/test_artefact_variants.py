"""Artefact variants (onnx-int8, pruned:F, the reduced-input digits-mlp-pca16), their quality figures on
the held-out split, the runtime knob's checks and the sweep's artefact recommendation: fast (a small MLP
is trained here instead of the demo's 256x256 one), no server."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from satpoint.analysis.sweep.artefact_choice import artefact_choice, attach_quality
from satpoint.analysis.sweep.space import parse_set
from satpoint.experiments.sweep_config import SweepConfig
from satpoint.experiments.sweep_quality import sweep_quality
from satpoint.experiments.sweep_servers import BaseServer
from satpoint.reports.sweep import csv_rows, sweep_table
from satpoint.servers.artefacts import quality as aq
from satpoint.servers.mlserver.settings import MLServerSettings
from satpoint.servers.models.demo import (
    DEMO_MODELS,
    build_onnx_bytes,
    check_runtime,
    demo_split,
    parse_runtime,
    prune_mlp,
    to_onnx_bytes,
)


def _small_mlp(name: str = "digits-mlp") -> Any:
    """A (32,) MLP on the demo's training split: the demo's shape of model in a fraction of its time."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    features, _, labels, _ = demo_split(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return MLPClassifier(hidden_layer_sizes=(32,), max_iter=60, random_state=0).fit(features, labels)


@pytest.fixture(scope="module")
def small() -> Any:
    return _small_mlp()


def _session(data: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def test_held_out_split_is_fixed_and_unseen() -> None:
    train, held, _, held_labels = demo_split("digits-mlp")
    again = demo_split("digits-mlp")[1]
    assert np.array_equal(held, again) and len(held) == 450 and len(train) == 1347
    assert set(held_labels) == set(range(10))  # stratified: every class is judged
    # the reduced-input variant is judged on the same rows as its reference
    assert np.array_equal(demo_split("digits-mlp-pca16")[1], held)


def test_int8_artefact_quantizes_the_matmuls_and_predicts(small: Any) -> None:
    data = build_onnx_bytes("digits-mlp", "onnx-int8", small)
    ops = {n.op_type for n in onnx.load_from_string(data).graph.node}
    assert "MatMulInteger" in ops and "MatMul" not in ops
    assert len(data) < 0.6 * len(to_onnx_bytes(small, 64))  # int8 weights: a quarter of float32, plus the graph
    _, rows, _, _ = demo_split("digits-mlp")
    labels, proba = _session(data).run(None, {"input": rows.astype(np.float32)})
    assert labels.shape == (len(rows),) and proba.shape == (len(rows), 10)
    assert np.mean(labels == small.predict(rows)) > 0.9


def test_pruning_zeroes_the_stated_share_of_the_smallest_weights(small: Any) -> None:
    pruned = prune_mlp(small, 0.5)
    before = np.concatenate([c.ravel() for c in small.coefs_])
    after = np.concatenate([c.ravel() for c in pruned.coefs_])
    assert np.count_nonzero(before == 0) == 0  # the original is untouched
    assert np.count_nonzero(after == 0) == round(0.5 * before.size)
    zeroed = after == 0
    assert np.abs(before[zeroed]).max() <= np.abs(before[~zeroed]).min()  # the smallest ones went
    assert np.array_equal(after[~zeroed], before[~zeroed])
    for a, b in zip(pruned.intercepts_, small.intercepts_, strict=True):
        assert np.array_equal(a, b)
    data = build_onnx_bytes("digits-mlp", "pruned:0.5", small)
    _, rows, _, _ = demo_split("digits-mlp")
    labels, proba = _session(data).run(None, {"input": rows[:7].astype(np.float32)})
    assert labels.shape == (7,) and proba.shape == (7, 10)
    np.testing.assert_array_equal(labels, pruned.predict(rows[:7]))


def test_pca_variant_takes_the_64_features() -> None:
    spec = DEMO_MODELS["digits-mlp-pca16"]
    assert spec.n_features == 64 and spec.reference == "digits-mlp" and spec.mlp
    from sklearn.decomposition import PCA
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import Pipeline

    features, _, labels, _ = demo_split("digits-mlp-pca16")
    mlp = MLPClassifier(hidden_layer_sizes=(8,), max_iter=5, random_state=0)
    pipe = Pipeline([("pca", PCA(n_components=16, random_state=0)), ("mlp", mlp)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(features, labels)
    session = _session(build_onnx_bytes("digits-mlp-pca16", "pruned:0.25", pipe))
    assert session.get_inputs()[0].shape == [None, 64]
    _, proba = session.run(None, {"input": features[:3].astype(np.float32)})
    assert proba.shape == (3, 10)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("tflite", "choose one of sklearn, onnx, onnx-int8, openvino, pruned:F"),
        ("pruned:0", "must be > 0 and < 1"),
        ("pruned:1", "must be > 0 and < 1"),
        ("pruned:nan", "must be > 0 and < 1"),
        ("pruned:half", "takes a share F"),
    ],
)
def test_bad_runtime_values_are_refused(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_runtime(value)
    with pytest.raises(ValueError, match=message):
        parse_set([f"runtime=onnx,{value}"], "mlserver")


def test_runtime_knob_values_and_model_checks() -> None:
    (dim,) = parse_set(["runtime=sklearn,onnx,onnx-int8,pruned:.50"], "mlserver")
    assert dim.values == ("sklearn", "onnx", "onnx-int8", "pruned:0.5")
    with pytest.raises(ValueError, match="listed twice"):
        parse_set(["runtime=pruned:0.5,pruned:.5"], "mlserver")
    assert check_runtime("onnx-int8", "digits-mlp-pca16") == "onnx-int8"
    for runtime, model in (("onnx-int8", "digits-forest"), ("onnx-int8", "iris"), ("pruned:0.5", "digits-forest")):
        with pytest.raises(ValueError, match=f"does not apply to the demo model {model}"):
            check_runtime(runtime, model)
        with pytest.raises(ValueError, match="does not apply"):
            MLServerSettings(demo_model=model, runtime=runtime)
    # a sweep refuses the point before anything starts, with the model from the base or from a knob
    forest = SweepConfig(sets=("runtime=onnx,onnx-int8",), server=BaseServer(demo_model="digits-forest"))
    with pytest.raises(ValueError, match="onnx-int8 does not apply to the demo model digits-forest"):
        forest.validate()
    mixed = SweepConfig(sets=("demo_model=digits-mlp,iris", "runtime=pruned:0.5"))
    with pytest.raises(ValueError, match="demo model iris"):
        mixed.validate()
    SweepConfig(
        sets=("runtime=sklearn,onnx,onnx-int8,pruned:0.5",), server=BaseServer(demo_model="digits-mlp")
    ).validate()


# -- quality --------------------------------------------------------------------------------------------------


def test_quality_figures_by_hand() -> None:
    truth = [0, 1, 1, 2]
    ref_labels, ref_proba = [0, 1, 1, 1], [[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.1, 0.9, 0.0], [0.0, 0.6, 0.4]]
    labels, proba = [0, 1, 2, 2], [[0.9, 0.1, 0.0], [0.3, 0.7, 0.0], [0.1, 0.4, 0.5], [0.0, 0.3, 0.7]]
    q = aq.quality_figures(truth, ref_labels, ref_proba, labels, proba)
    assert q["rows"] == 4
    assert q["reference_accuracy"] == 0.75 and q["accuracy"] == 0.75 and q["accuracy_loss_pp"] == 0.0
    assert q["agreement"] == 0.5  # rows 2 and 3 differ from the reference
    assert q["max_abs_proba_diff"] == pytest.approx(0.5)
    worse = aq.quality_figures(truth, ref_labels, ref_proba, [1, 1, 1, 1], ref_proba)
    assert worse["accuracy_loss_pp"] == pytest.approx(25.0) and worse["max_abs_proba_diff"] == 0.0
    with pytest.raises(ValueError, match="same non-zero number of rows"):
        aq.quality_figures([0], [0, 1], ref_proba, labels, proba)


def test_artefact_quality_once_per_artefact_on_the_held_out_split(monkeypatch: pytest.MonkeyPatch, small: Any) -> None:
    fits: list[str] = []

    def fit(name: str) -> Any:
        fits.append(name)
        return small

    monkeypatch.setattr(aq, "fit_demo_model", fit)
    got = aq.artefact_quality(
        [("digits-mlp", "sklearn"), ("digits-mlp", "onnx"), ("digits-mlp", "pruned:0.5"), ("digits-mlp", "onnx")]
    )
    assert fits == ["digits-mlp"]  # one training for every artefact of the model
    assert list(got) == [("digits-mlp", "sklearn"), ("digits-mlp", "onnx"), ("digits-mlp", "pruned:0.5")]
    ref, onx, pruned = got.values()
    assert ref["rows"] == 450 and ref["agreement"] == 1.0 and ref["accuracy_loss_pp"] == 0.0
    assert ref["reference"] == "digits-mlp sklearn" and "not trained on" in ref["held_out"]
    assert onx["agreement"] == 1.0 and onx["max_abs_proba_diff"] < 1e-4
    assert onx["accuracy"] == ref["accuracy"] > 0.85
    assert pruned["max_abs_proba_diff"] > onx["max_abs_proba_diff"]


# -- the sweep --------------------------------------------------------------------------------------------------


def _row(pid: str, runtime: str, sat: tuple[float, float], loss: float | None) -> dict[str, Any]:
    lo, hi = sat
    return {
        "id": pid,
        "label": f"runtime={runtime}",
        "knobs": {"runtime": runtime},
        "measurements": 2,
        "saturation_rps": {"median": (lo + hi) / 2, "min": lo, "max": hi, "n": 2},
        "bracket_rps": [lo, hi * 1.05],
        "rps_per_core": None,
        "server_cores": 1,
        "lower_bound": False,
        "quality": None
        if loss is None
        else {
            "demo_model": "digits-mlp",
            "runtime": runtime,
            "accuracy": 0.98 - loss / 100,
            "accuracy_loss_pp": loss,
            "agreement": 0.99,
            "max_abs_proba_diff": 0.1,
        },
    }


def test_recommendation_is_the_fastest_artefact_within_the_quality_bound() -> None:
    rows = [
        _row("p01", "sklearn", (100, 110), 0.0),
        _row("p02", "onnx", (300, 310), 0.0),
        _row("p03", "onnx-int8", (400, 420), 0.4),
        _row("p04", "pruned:0.5", (600, 640), 1.3),
    ]
    choice = artefact_choice(rows, "saturation", 1.0)
    assert choice is not None
    assert choice["point"] == "p03" and choice["separated"]
    assert choice["over_bound"] == ["p04"] and choice["within_bound"] == ["p01", "p02", "p03"]
    assert "runtime=onnx-int8" in choice["text"] and "runtime=pruned:0.5, is left out" in choice["text"]
    assert artefact_choice(rows, "saturation", 2.0)["point"] == "p04"  # type: ignore[index]
    assert artefact_choice(rows, "saturation", 0.0)["point"] == "p02"  # type: ignore[index]
    # within the bound but tied with another point: the noise rule of every sweep recommendation
    tied = [*rows[:2], _row("p03", "onnx-int8", (305, 320), 0.4)]
    assert artefact_choice(tied, "saturation", 1.0)["tied_with"] in (["p02"], ["p03"])  # type: ignore[index]
    # one artefact, or no quality: nothing to choose between
    assert artefact_choice(rows[:1], "saturation", 1.0) is None
    assert artefact_choice([_row("p01", "sklearn", (1, 2), None), rows[1]], "saturation", 1.0) is None


def test_quality_in_the_sweep_document_table_and_csv() -> None:
    rows = [_row("p01", "sklearn", (100, 110), 0.0), _row("p02", "pruned:0.5", (300, 310), 2.0)]
    for r in rows:
        r.update(
            max_throughput_rps=None,
            inferences_per_s=None,
            batch=1,
            low_load={"rps": None, "p50_ms": None, "p99_ms": None},
            at_operating_point={"rps": None, "p50_ms": None, "p99_ms": None},
            server={"cpu_cores_at_saturation": None, "cpu_us_per_request": None, "rss_mb_max": None, "diagnosis": []},
        )
    quality = {r["id"]: r.pop("quality") for r in rows}
    doc: dict[str, Any] = {"objective": "saturation", "points": rows, "recommendation": ["best: p02"]}
    attach_quality(doc, quality, 1.0)
    assert doc["points"][1]["quality"]["accuracy_loss_pp"] == 2.0
    assert doc["artefact_choice"]["point"] == "p01"
    assert doc["recommendation"][1].startswith("fastest artefact within the quality bound")
    csv = {r["id"]: r for r in csv_rows(doc)}
    assert csv["p02"]["quality_accuracy_loss_pp"] == 2.0 and csv["p02"]["quality_within_bound"] is False
    assert csv["p01"]["quality_within_bound"] is True
    headers = [c.header for c in sweep_table(doc).columns]
    assert "accuracy % (loss pp)" in headers and "agree % vs ref." in headers


def test_sweep_quality_per_point(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[tuple[str, str]]] = []

    def fake(artefacts: Any) -> dict[tuple[str, str], dict[str, Any]]:
        asked.append(list(artefacts))
        return {a: {"runtime": a[1], "accuracy_loss_pp": 0.0} for a in asked[-1]}

    monkeypatch.setattr(aq, "artefact_quality", fake)
    cfg = SweepConfig(sets=("runtime=sklearn,onnx", "workers=1,2"), server=BaseServer(demo_model="digits-mlp"))
    got = sweep_quality(cfg, cfg.points())
    assert asked == [[("digits-mlp", "onnx"), ("digits-mlp", "sklearn")]]  # each artefact once
    assert {pid: q["runtime"] for pid, q in got.items()} == {
        "p01": "sklearn",
        "p02": "sklearn",
        "p03": "onnx",
        "p04": "onnx",
    }
    plain = SweepConfig(sets=("workers=1,2",))
    assert sweep_quality(plain, plain.points()) == {}  # one sklearn artefact: nothing to compare
    sim = SweepConfig(sets=("workers=1,2",), server=BaseServer(kind="sim"))
    assert sweep_quality(sim, sim.points()) == {}


_OPENVINO_SCRIPT = """
import asyncio, json, sys
import numpy as np
from mlserver.errors import InferenceError
from mlserver.settings import ModelParameters, ModelSettings
from mlserver.types import InferenceRequest, RequestInput
from satpoint.servers.artefacts.openvino_runtime import OpenVinoModel

uri, rows_file = sys.argv[1], sys.argv[2]
rows = np.load(rows_file)
model = OpenVinoModel(ModelSettings(name="m", implementation=OpenVinoModel, parameters=ModelParameters(uri=uri)))

def request(x):
    return InferenceRequest(
        inputs=[RequestInput(name="input-0", datatype="FP32", shape=list(x.shape), data=x.ravel().tolist())]
    )

async def run():
    await model.load()
    (out,) = (await model.predict(request(rows))).outputs
    try:
        await model.predict(request(rows[:, :10]))
        refused = ""
    except InferenceError as e:
        refused = str(e)
    return out, refused

out, refused = asyncio.run(run())
print(json.dumps({"head": [out.name, out.datatype, list(out.shape)],
                  "labels": np.asarray(out.data).ravel().tolist(), "refused": refused}))
"""


def test_openvino_runtime_serves_the_cut_model(tmp_path: Any, small: Any) -> None:
    """The OpenVINO runtime (no server): loads the probabilities-only ONNX, answers ``predict`` [N, 1] with
    the labels scikit-learn gives, refuses a wrong width.  In a process of its own, as inside MLServer:
    MLServer's gRPC module cannot be imported into a process that already holds satpoint's OIP protos."""
    pytest.importorskip("openvino")
    import json
    import subprocess
    import sys

    data = build_onnx_bytes("digits-mlp", "openvino", small)
    assert [o.name for o in onnx.load_from_string(data).graph.output] == ["probabilities"]
    (tmp_path / "model.onnx").write_bytes(data)
    _, rows, _, _ = demo_split("digits-mlp")
    rows = rows[:5].astype(np.float32)
    np.save(tmp_path / "rows.npy", rows)
    done = subprocess.run(
        [sys.executable, "-c", _OPENVINO_SCRIPT, str(tmp_path), str(tmp_path / "rows.npy")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["head"] == ["predict", "INT64", [5, 1]]
    assert got["labels"] == small.predict(rows).tolist()
    assert "[N, 64]" in got["refused"]
    with pytest.raises(ValueError, match="openvino does not apply to the demo model digits-forest"):
        check_runtime("openvino", "digits-forest")


def test_openvino_without_the_package_is_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a))
    with pytest.raises(ValueError, match=r"pip install 'satpoint\[openvino\]'"):
        SweepConfig(sets=("runtime=onnx,openvino",), server=BaseServer(demo_model="digits-mlp")).validate()
