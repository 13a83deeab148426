"""``--demo-models N`` with ``--server triton`` on ``find`` and ``sweep``: copies of a demo model in the
repository Triton (``servers.triton.repo``) with the same knobs, the same mix and the same refusals; nothing
here starts a server."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.errors import ConfigError
from satpoint.experiments.sweep_config import SweepConfig
from satpoint.experiments.sweep_servers import BaseServer, point_server
from satpoint.payloads.mix import ModelMix
from satpoint.servers.embedded import MODEL_REPO_ON_TRITON, embedded_settings
from satpoint.servers.embedded_base import Ports
from satpoint.servers.triton import repo as triton_repo
from satpoint.servers.triton.repo import TritonRepoSettings, TritonRepoTarget


class _Started(TritonRepoTarget):
    """A repository Triton that only pretends to run: ports, no process."""

    made: ClassVar[list[_Started]] = []

    def __enter__(self) -> _Started:
        self._ports = Ports(http=8000, grpc=8001, metrics=8002)
        _Started.made.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @property
    def pid(self) -> int:
        return 4242


def test_find_options_give_the_copies_with_triton_s_knobs() -> None:
    s = embedded_settings("triton", {"demo_model": "digits-mlp", "demo_models": 3}, (0,), max_batch_size=16,
                          max_queue_delay_us=500, instances=2, preferred_batch_size=4)  # fmt: skip
    assert isinstance(s, TritonRepoSettings)
    assert s.model_names == ("digits-mlp-000", "digits-mlp-001", "digits-mlp-002") and s.cpus == (0,)
    assert s.knobs() == {"max_batch_size": 16, "max_queue_delay_us": 500, "instances": 2, "preferred_batch_size": 4}
    config = s.config("digits-mlp-001")
    assert 'name: "digits-mlp-001"' in config and "max_batch_size: 16" in config and "count: 2" in config
    assert "dynamic_batching { max_queue_delay_microseconds: 500 preferred_batch_size: [ 4 ] }" in config
    plain = TritonRepoSettings("iris", 2).config("iris-000")  # coldstart's repository, as before
    assert "dynamic_batching { }" in plain and "count: 1," in plain and "dims: [ 4 ]" in plain


@pytest.mark.parametrize(
    ("served", "knobs", "match"),
    [
        ({"model_repo": Path("repo")}, {}, re.escape(MODEL_REPO_ON_TRITON)),
        ({"demo_models": 2, "model_repo": Path("repo")}, {}, re.escape(MODEL_REPO_ON_TRITON)),
        ({"demo_models": 2, "demo_model": "textgen"}, {}, "demo_models copies a classifier; textgen"),
        ({"demo_models": 2, "runtime": "onnx"}, {}, "--runtime: the embedded Triton serves the demo models only"),
        ({"demo_models": 2}, {"max_batch_size": 4, "preferred_batch_size": 8}, "preferred_batch_size must be"),
        ({"demo_models": 2}, {"workers": 2}, "--workers: not for the embedded triton"),
    ],
)
def test_what_the_triton_copies_cannot_do_is_one_line(
    served: dict[str, Any], knobs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        embedded_settings("triton", served, None, **knobs)
    assert "\n" not in str(info.value)


def test_the_target_mixes_every_copy_and_knows_them_without_the_repository_index() -> None:
    with _Started(TritonRepoSettings("iris", 3)) as server:
        assert server.target().mix == ModelMix(("iris-000", "iris-001", "iris-002"))
        assert server.target("grpc").url == "127.0.0.1:8001"
        # the index is kept to the server's token: --models-from-server is the copies it serves
        zipf = server.target(mix=ModelMix(from_server=True, weights="zipf:1.1")).mix
        assert zipf == ModelMix(("iris-000", "iris-001", "iris-002"), weights="zipf:1.1")
        with pytest.raises(ConfigError, match="--resident loads and unloads"):
            server.target(mix=ModelMix(from_server=True, resident=1))
        assert server.stats_url == "http://127.0.0.1:8000/v2/models/stats"
        info = server.info()
    assert info["models"]["count"] == 3 and info["models"]["source"] == "demo_models"
    assert info["settings"]["models"] == 3 and info["model"]["name"] == "iris-000"


def test_a_sweep_point_serves_the_models_knob_else_the_base_s_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_repo, "TritonRepoTarget", _Started)
    _Started.made.clear()
    base = BaseServer(kind="triton", demo_models=2, max_batch_size=8, server_cpus=(0,))
    for knobs, count in (({}, 2), ({"models": 4, "max_queue_delay_us": 100}, 4)):
        with point_server(base, knobs, stop=threading.Event()) as point:
            assert point.target.mix is not None and len(point.target.mix.models) == count
            assert point.info is not None and point.info["models"]["count"] == count
            assert "http://127.0.0.1:8000/v2/models/stats" in point.metrics_urls
    last = _Started.made[-1].settings
    assert (last.models, last.max_batch_size, last.max_queue_delay_us, last.cpus) == (4, 8, 100, (0,))


def test_sweep_takes_demo_models_and_the_models_knob_on_triton() -> None:
    cfg = SweepConfig(sets=("models=1,2",), server=BaseServer(kind="triton", demo_models=2)).validate()
    assert [p.values["models"] for p in cfg.points()] == [1, 2]
    for server, match in (
        (BaseServer(kind="triton", model_repo="repo"), re.escape(MODEL_REPO_ON_TRITON)),
        (BaseServer(kind="triton", runtime="onnx"), "--runtime/--model-dir/--model-repo describe the embedded"),
        (BaseServer(kind="sim", demo_models=2), "--demo-models describes an embedded server"),
    ):
        with pytest.raises(ValueError, match=match):
            SweepConfig(sets=("batch=1",), server=server).validate()


def test_the_command_line_takes_demo_models_with_triton_and_refuses_model_repo(tmp_path: Path) -> None:
    runner = CliRunner()
    dry = ["sweep", "--server", "triton", "--demo-models", "2", "--set", "models=1,2", "--dry-run"]
    assert runner.invoke(app, dry).exit_code == 0
    for cmd in (["find"], ["sweep", "--set", "batch=1"]):
        result = runner.invoke(
            app, [*cmd, "--server", "triton", "--model-repo", str(tmp_path), "--out", str(tmp_path / "o")]
        )
        assert result.exit_code == 2 and "--model-repo serves an MLServer repository" in result.output
        assert not (tmp_path / "o").exists()
