"""The embedded MLServer with three demo copies (issue 23): three models with distinct names and distinct
artefacts, loaded by the main process and its worker, and a short open-loop run spread over all three
(the uniform mix the server's target carries), every request answered; then cold starts of two of them
(``satpoint coldstart``'s measurement) on the same server."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from satpoint import api
from satpoint.endpoints.spec import Target
from satpoint.experiments.coldstart import ColdStartOptions, attach, measure
from satpoint.metrics.records import Outcome
from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget


@pytest.mark.slow
def test_three_demo_copies_serve_and_share_the_load(tmp_path: Path) -> None:
    with MLServerTarget(MLServerSettings(demo_models=3)) as server:
        info = server.info()
        assert info["models"]["names"] == ["iris-000", "iris-001", "iris-002"]
        assert info["models"]["distinct_artifacts"] == 3
        assert info["models"]["load"]["loaded_lines"] >= 3  # MLServer logged every model as loaded
        memory = server.memory_at_ready
        assert memory is not None and len(memory["processes"]) >= 2  # the main process and its worker
        assert memory["rss_mb"] == pytest.approx(sum(p["rss_mb"] for p in memory["processes"]), abs=0.1)
        api.run(server.target(), ["60:0.5:1.5"], out=tmp_path / "run", html=False)
        # cold starts on the same server (issue 23, part C): one round over two copies, one overcommit run
        opts = ColdStartOptions(repeats=1, during_rps=100, warm_requests=1, models=("iris-000", "iris-001"),
                                resident=(1,), rate_rps=20, duration_s=1.0)  # fmt: skip
        with attach(Target(server.rest_url, "iris-000"), opts) as served:
            cold = measure(served, opts, tmp_path / "coldstart").summary
        assert cold["coldstart"]["repetitions"] == 2 and cold["coldstart"]["load_failures"] == 0
        assert cold["coldstart"]["first_infer_failures"] == 0 and cold["coldstart"]["during_load"]["requests"] >= 2
        (oc,) = cold["overcommit"]
        assert oc["errors"] == 0 and oc["cold_requests"] > 0 and oc["loads"] >= 1 and oc["requests"] == 20
        assert (tmp_path / "coldstart" / "report.html").exists()
    loaded = api.load(tmp_path / "run")
    assert loaded.header["mix"]["models"] == ["iris-000", "iris-001", "iris-002"]
    rows = loaded.rows()
    counts = np.bincount(rows["model"], minlength=3)
    assert len(counts) == 3 and counts.min() > 0.2 * counts.sum()  # ~120 requests spread over all three
    assert (rows["outcome"] == Outcome.OK).all()
