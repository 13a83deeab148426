"""satpoint.servers.models.many and the settings of an MLServer with many models: N independent demo
copies (distinct names, distinct trained artefacts), a repository of model folders, the readiness wait,
the load times read from MLServer's log, the memory of a process tree."""

from __future__ import annotations

import json
import os
from pathlib import Path

import joblib
import numpy as np
import pytest

from satpoint.servers.mlserver.settings import MLServerSettings, repo_model_settings
from satpoint.servers.models.many import (
    copy_digests,
    copy_names,
    fit_demo_copy,
    load_span,
    ready_timeout_s,
    tree_memory,
    write_demo_copies,
)


def test_copy_names_are_distinct_and_ordered() -> None:
    assert copy_names("iris", 3) == ["iris-000", "iris-001", "iris-002"]
    names = copy_names("m", 1200)
    assert names[0] == "m-0000" and names[-1] == "m-1199" and len(set(names)) == 1200
    with pytest.raises(ValueError, match=">= 1"):
        copy_names("iris", 0)


def test_each_copy_is_trained_on_its_own_sample(tmp_path: Path) -> None:
    a, b = fit_demo_copy("iris", 0), fit_demo_copy("iris", 1)
    assert not np.allclose(a.coef_, b.coef_)  # different bootstrap samples, different coefficients
    assert np.allclose(a.coef_, fit_demo_copy("iris", 0).coef_)  # the same seed, the same copy
    assert sorted(a.classes_) == [0, 1, 2]  # a stratified sample keeps every class
    paths = write_demo_copies("iris", "sklearn", copy_names("iris", 3), tmp_path)
    assert [p.parent.name for p in paths] == ["iris-000", "iris-001", "iris-002"]
    assert len(set(copy_digests(paths))) == 3  # three files, three different artefacts
    loaded = [joblib.load(p) for p in paths]
    assert len({id(m) for m in loaded}) == 3 and not np.allclose(loaded[1].coef_, loaded[2].coef_)


def test_settings_with_demo_copies() -> None:
    s = MLServerSettings(demo_models=3)
    assert s.served_model_names == ("iris-000", "iris-001", "iris-002")
    assert s.served_model_name == "iris-000"
    d = s.to_dict()
    assert d["demo_models"] == 3 and d["models"] == 3 and d["model_repo"] is None
    assert MLServerSettings(demo_models=2, model_name="m").served_model_names == ("m-000", "m-001")
    assert MLServerSettings().served_model_names == ("iris",) and MLServerSettings().to_dict()["models"] == 1
    with pytest.raises(ValueError, match="between 1 and"):
        MLServerSettings(demo_models=0)


def _folder(root: Path, name: str, doc: dict[str, object]) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "model-settings.json").write_text(json.dumps(doc))
    return folder


def test_settings_with_a_model_repository(tmp_path: Path) -> None:
    impl = "mlserver_sklearn.SKLearnModel"
    _folder(tmp_path, "b", {"implementation": impl, "parameters": {"uri": "./model.joblib"}})
    _folder(tmp_path, "a", {"name": "alpha", "implementation": impl})
    (tmp_path / "not-a-model").mkdir()
    s = MLServerSettings(model_repo=tmp_path, max_batch_size=4)
    assert s.served_model_names == ("alpha", "b")  # a folder's own name, else the folder's; sorted
    served = repo_model_settings(s, s.repo_models[1])
    assert served["name"] == "b" and served["max_batch_size"] == 4
    assert served["parameters"]["uri"] == str((tmp_path / "b" / "model.joblib").resolve())
    _folder(tmp_path, "c", {"name": "alpha", "implementation": impl})
    with pytest.raises(ValueError, match="alpha served by more than one folder"):
        MLServerSettings(model_repo=tmp_path)
    with pytest.raises(ValueError, match="no model folder"):
        MLServerSettings(model_repo=tmp_path / "not-a-model")
    with pytest.raises(ValueError, match="excludes"):
        MLServerSettings(model_repo=tmp_path / "a", demo_models=2)


def test_the_readiness_wait_grows_with_models_and_workers() -> None:
    assert ready_timeout_s(200, 2) > ready_timeout_s(200, 1) > ready_timeout_s(1, 1) >= 90.0


def test_load_span_reads_mlserver_log() -> None:
    log = "\n".join(
        [
            "2026-12-04 01:00:00,000 [mlserver] INFO - starting",
            "2026-12-04 01:00:03,500 [mlserver] INFO - Loaded model 'iris-000' successfully.",
            "2026-12-04 01:00:04,250 [mlserver] INFO - Loaded model 'iris-001' successfully.",
        ]
    )
    from datetime import datetime

    start = datetime(2026, 12, 4, 1, 0, 0).timestamp()
    assert load_span(log, start) == {"loaded_lines": 2, "first_loaded_s": 3.5, "last_loaded_s": 4.25}
    assert load_span("nothing here", start)["last_loaded_s"] is None


def test_tree_memory_of_this_process() -> None:
    mem = tree_memory([os.getpid(), 2**22 + 7])  # a pid that does not exist is left out
    assert mem is not None and mem["rss_mb"] > 10 and len(mem["processes"]) == 1
    assert mem["processes"][0]["role"] == "main"
    assert tree_memory([2**22 + 7]) is None
