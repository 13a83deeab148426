"""The embedded server a command starts, from its options: each server takes only its own options."""

from __future__ import annotations

import pytest

from satpoint.errors import ConfigError
from satpoint.servers.embedded import embedded_settings
from satpoint.servers.mlserver.server import MLServerSettings
from satpoint.servers.triton.server import TritonSettings


def test_mlserver_by_default_with_its_options() -> None:
    s = embedded_settings("mlserver", {"demo_model": "iris"}, (0,), workers=2, max_batch_size=8, max_batch_time=0.01)
    assert isinstance(s, MLServerSettings)
    assert (s.parallel_workers, s.max_batch_size, s.max_batch_time_s, s.cpus) == (2, 8, 0.01, (0,))


def test_triton_with_its_knobs() -> None:
    s = embedded_settings("triton", {"demo_model": "digits-mlp"}, None, max_batch_size=16, max_queue_delay_us=500)
    assert isinstance(s, TritonSettings)
    assert s.demo_model == "digits-mlp"
    assert s.knobs()["max_batch_size"] == 16 and s.knobs()["max_queue_delay_us"] == 500


@pytest.mark.parametrize(
    "server, options, named",
    [
        ("mlserver", {"max_queue_delay_us": 100, "instances": 2}, "--max-queue-delay-us, --instances"),
        ("triton", {"workers": 2}, "--workers"),
        ("triton", {"max_batch_time": 0.01, "mlserver_debug": True}, "--max-batch-time, --mlserver-debug"),
    ],
)
def test_the_other_servers_options_are_refused_by_name(server: str, options: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=f"^{named}: not for the embedded {server}$"):
        embedded_settings(server, {}, None, **options)  # type: ignore[arg-type]


def test_an_unknown_server_and_what_triton_cannot_serve_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="--server: mlserver or triton"):
        embedded_settings("torchserve", {}, None)
    with pytest.raises(ConfigError, match="--runtime: the embedded Triton serves the demo models only"):
        embedded_settings("triton", {"runtime": "onnx"}, None)
