"""The repository Triton (``--server triton --demo-models N``, ``coldstart --server triton``) keeps the
endpoints PyTriton's server restricts to its own token: any local process can reach its loopback port, and
without the token it registers no shared-memory region, changes no trace or log setting (files the server
writes) and loads nothing; inferences and the statistics stay open.

Skipped when PyTriton cannot be imported (the ``triton`` extra is not installed)."""

from __future__ import annotations

import json

import pytest

from satpoint.servers.triton.repo import TritonRepoSettings, TritonRepoTarget, restriction
from satpoint.servers.triton.server import ACCESS_HEADER, RESTRICTED_ENDPOINTS, pytriton_available
from satpoint.transports.rest import rest_control


def test_the_restriction_is_pytriton_s_list_with_the_token() -> None:
    assert restriction("t0k") == f"shared-memory,model-repository,trace,logging:{ACCESS_HEADER}=t0k"
    assert restriction("t0k").split(":")[0].split(",") == list(RESTRICTED_ENDPOINTS)


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.skipif(not pytriton_available(), reason="PyTriton is not installed (pip install 'satpoint[triton]')")
def test_shared_memory_trace_logging_and_repository_need_the_servers_token() -> None:
    with TritonRepoTarget(TritonRepoSettings("iris", 1)) as server:
        url, model = server.rest_url, server.model_name
        refused = [
            ("/v2/systemsharedmemory/region/x/register", {"key": "/satpoint-x", "offset": 0, "byte_size": 64}),
            ("/v2/systemsharedmemory/status", None),
            ("/v2/cudasharedmemory/status", None),
            ("/v2/trace/setting", {"trace_file": "/tmp/satpoint-trace-x.json"}),
            ("/v2/logging", {"log_file": "/tmp/satpoint-log-x.txt"}),
            ("/v2/repository/index", {}),
            (f"/v2/repository/models/{model}/unload", {}),
        ]
        for path, body in refused:
            status, answer = rest_control.call_json(url, path, body)
            assert status in (401, 403), (path, status, answer)
        assert rest_control.model_ready(url, model)  # nothing was unloaded
        status, stats = rest_control.call_json(url, server.stats_url.removeprefix(url))
        assert status == 200 and stats["model_stats"], stats  # statistics stay open to satpoint's scrapes
        headers = tuple(server.access_headers.items())
        status, shm = rest_control.call_json(url, "/v2/systemsharedmemory/status", None, headers)
        assert status == 200 and shm == [], (status, shm)  # with the token the endpoint answers
        assert server.access_headers[ACCESS_HEADER] not in json.dumps(server.info())
