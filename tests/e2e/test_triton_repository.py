"""End-to-end: a plain ``tritonserver`` (the one PyTriton's wheel carries) in ``--model-control-mode
explicit`` with a Python-backend model in a repository on disk, reconfigured the way a sweep does it on a
remote Triton: the knobs sent as a configuration override of the repository API's load, then read back;
and satpoint's Triton awareness on it (detection, configuration, statistics) through ``prepare``.

Skipped when PyTriton cannot be imported (the ``triton`` extra is not installed)."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import threading
from collections.abc import Iterator

import pytest

from satpoint.endpoints import triton
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.errors import ConfigError
from satpoint.experiments.sweep_servers import BaseServer, point_server
from satpoint.servers.process import ManagedProcess, free_ports
from satpoint.servers.triton.server import python_backend_env, pytriton_available, triton_env
from satpoint.transports.rest import rest_control

pytestmark = [
    pytest.mark.slow,
    pytest.mark.triton,
    pytest.mark.skipif(not pytriton_available(), reason="PyTriton is not installed (pip install 'satpoint[triton]')"),
]

MODEL_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "input-0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("sum", x.sum(axis=1, keepdims=True))]))
        return out
"""
CONFIG = """\
backend: "python"
max_batch_size: 8
input [ { name: "input-0", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "sum", data_type: TYPE_FP32, dims: [ 1 ] } ]
dynamic_batching { }
instance_group [ { kind: KIND_CPU, count: 1 } ]
"""


@pytest.fixture(scope="module")
def explicit_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from pytriton.utils.distribution import get_libs_path, get_root_module_path, get_stub_path

    root = tmp_path_factory.mktemp("triton")
    server = get_root_module_path() / "tritonserver"
    backend = root / "backends" / "python"
    backend.mkdir(parents=True)
    for f in ("libtriton_python.so", "triton_python_backend_utils.py"):
        (backend / f).symlink_to(server / "backends" / "python" / f)
    shutil.copy(get_stub_path(f"{sys.version_info.major}.{sys.version_info.minor}"), backend)
    model = root / "repo" / "sum"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(MODEL_PY)
    (model / "config.pbtxt").write_text(CONFIG)
    http, grpc, metrics = free_ports(3)
    env = triton_env(dict(os.environ), sysconfig.get_config_var("LIBDIR"))
    env["LD_LIBRARY_PATH"] += f":{get_libs_path()}"
    env = python_backend_env(env)  # the stub imports this environment's numpy, activated or not
    argv = [str(server / "bin" / "tritonserver"), "--model-repository", str(root / "repo"),
            "--model-control-mode", "explicit", "--load-model", "sum", "--backend-directory", str(root / "backends"),
            "--http-address", "127.0.0.1", "--http-port", str(http), "--grpc-address", "127.0.0.1",
            "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--allow-gpu-metrics", "false"]  # fmt: skip
    url = f"http://127.0.0.1:{http}"
    with ManagedProcess(argv, log_path=root / "triton.log", env=env, name="tritonserver") as proc:
        proc.wait_ready(lambda: rest_control.model_ready(url, "sum"), 60, "tritonserver model 'sum'")
        yield url


def test_knobs_are_applied_through_the_repository_api_and_read_back(explicit_triton: str) -> None:
    url = explicit_triton
    knobs = {"max_batch_size": 4, "max_queue_delay_us": 700, "preferred_batch_size": 2, "instances": 2}
    done = triton.apply_knobs(url, "sum", knobs)
    assert done["read_back"] == knobs
    status, cfg = rest_control.call_json(url, "/v2/models/sum/config")
    assert status == 200 and triton.knob_values(cfg) == knobs
    body = b'{"inputs":[{"name":"input-0","datatype":"FP32","shape":[2,4],"data":[1,2,3,4,1,1,1,1]}]}'
    status, answer = rest_control.infer_once(url, "sum", body)
    assert status == 200 and b"[10.0,4.0]" in answer.replace(b" ", b"")


def test_knobs_triton_refuses_are_a_clear_error(explicit_triton: str) -> None:
    with pytest.raises(ConfigError, match="Triton refused to load sum"):
        triton.apply_knobs(explicit_triton, "sum", {"max_batch_size": 4, "preferred_batch_size": 9})


def test_a_remote_sweep_point_reloads_the_model_and_watches_its_statistics(explicit_triton: str) -> None:
    status, cfg = rest_control.call_json(explicit_triton, "/v2/models/sum/config")
    found = triton.knob_values(cfg)
    delay = (found["max_queue_delay_us"] or 0) + 300
    base = BaseServer(kind="remote", url=explicit_triton, model="sum", ready_timeout_s=30)
    with point_server(base, {"max_queue_delay_us": delay, "max_batch_size": 8}, stop=threading.Event()) as srv:
        assert srv.actions["triton_config"]["read_back"]["max_queue_delay_us"] == delay
        assert srv.actions["triton_config"]["before"] == found  # recorded in sweep.json
        assert f"{explicit_triton}/v2/models/sum/stats" in srv.metrics_urls
    # the point's end loads the model back as it was found: a shared Triton is not left reconfigured
    status, cfg = rest_control.call_json(explicit_triton, "/v2/models/sum/config")
    assert status == 200 and triton.knob_values(cfg) == found
    assert rest_control.model_ready(explicit_triton, "sum")


def test_prepare_knows_the_triton_and_refuses_a_batch_it_would_reject(explicit_triton: str) -> None:
    apply = triton.apply_knobs(explicit_triton, "sum", {"max_batch_size": 8})
    assert apply["read_back"]["max_batch_size"] == 8
    prepared = prepare(Target(explicit_triton, "sum", batch_size=4, binary_data=True))
    assert prepared.triton is not None and prepared.triton["model_config"]["max_batch_size"] == 8
    with pytest.raises(Exception, match="exceeds the model's max_batch_size 8"):
        prepare(Target(explicit_triton, "sum", batch_size=9))
