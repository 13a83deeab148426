"""``run --url … --models-from-server --resident 2 --allow-unload`` on a real MLServer serving four demo
copies (review M5, M4): every model is READY again afterwards, and no request reached a model that was
being unloaded, by the server's own counts (its Prometheus ``model_infer_request_success`` per model
equals the run's answered requests per model, plus each model's test request; nothing failed on either
side)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from satpoint import api
from satpoint.cli.main import app
from satpoint.metrics.records import Outcome
from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget
from satpoint.transports.rest.repository import RepositoryClient

_LINE = re.compile(r"^(model_infer_request_(?:success|failure))(?:_total)?\{([^}]*)\}\s+([0-9.eE+-]+)$")


def server_counts(metrics_url: str) -> dict[tuple[str, str], float]:
    """(counter, model) -> value, from MLServer's Prometheus text."""
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        text = r.read().decode()
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        key = (str(m.group(1)), str(labels.get("model", labels.get("model_name", ""))))
        out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


@pytest.mark.slow
def test_resident_two_of_four_leaves_every_model_ready_and_sends_none_to_an_unloading_model(tmp_path: Path) -> None:
    with MLServerTarget(MLServerSettings(demo_models=4)) as server:
        names = list(server.info()["models"]["names"])
        assert len(names) == 4
        metrics_url = server.info()["metrics_url"]
        before = server_counts(metrics_url)
        out = tmp_path / "run"
        args = ["run", "--url", server.rest_url, "--models-from-server", "--resident", "2", "--allow-unload",
                "--stage", "40:0:3", "--out", str(out), "--no-html"]  # fmt: skip
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        index = RepositoryClient(server.rest_url).index()
        assert {s.name for s in index if s.ready} == set(names)  # every model READY again
        after = server_counts(metrics_url)
    rows = api.load(out).rows()
    assert (rows["outcome"] == Outcome.OK).all()  # no 404 from a model unloaded under its request
    oc = api.load(out).segments[0].generator["transport"]["overcommit"]
    assert oc["loads"] >= 2 and oc["evictions"] >= 2 and oc["load_failures"] == 0
    ours = np.bincount(rows["model"], minlength=4)
    for m, name in enumerate(names):
        served = after.get(("model_infer_request_success", name), 0.0) - before.get(
            ("model_infer_request_success", name), 0.0
        )
        failed = after.get(("model_infer_request_failure", name), 0.0) - before.get(
            ("model_infer_request_failure", name), 0.0
        )
        # the server answered every request of the run for this model, plus the one test request
        # satpoint sends each model before the run
        assert failed == 0 and served == ours[m] + 1, (name, served, int(ours[m]), after)
