"""``--grpc-connections`` from the command line to the pool, and what results.json records about it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import satpoint
from satpoint.cli.main import app
from satpoint.config import LoadOptions, RunConfig
from satpoint.endpoints.prepare import prepare
from satpoint.endpoints.spec import Target
from satpoint.servers.sim.process import SimServer


@pytest.fixture(scope="module")
def grpc_sim() -> Iterator[str]:
    with SimServer(slots=8, service_ms=2, protocol="grpc") as server:
        yield f"grpc://127.0.0.1:{server.port}"


@pytest.fixture(scope="module")
def rest_sim() -> Iterator[str]:
    with SimServer(slots=8, service_ms=2) as server:
        yield server.url


def test_the_option_is_on_run_and_find() -> None:
    runner = CliRunner()
    for command in ("run", "find"):
        out = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"})
        assert out.exit_code == 0 and "--grpc-connections" in out.output, out.output


def test_load_options_carry_it_and_validate_it() -> None:
    assert LoadOptions().grpc_connections is None
    assert LoadOptions(grpc_connections=4).describe()["grpc_connections"] == 4
    back = RunConfig.from_header({"config": RunConfig(load=LoadOptions(grpc_connections=4)).to_header()})
    assert back.load.grpc_connections == 4
    with pytest.raises(ValueError, match="grpc_connections"):
        LoadOptions(grpc_connections=0).validate()


def test_prepare_passes_it_to_the_grpc_builder(grpc_sim: str) -> None:
    target = Target(url=grpc_sim, model="sim", protocol="grpc")
    assert prepare(target, 64).builder.connections is None  # automatic
    assert prepare(target, 64, grpc_connections=3).builder.connections == 3


def test_results_record_the_connections_and_the_effective_cap(tmp_path: Path, grpc_sim: str) -> None:
    target = Target(url=grpc_sim, model="sim", protocol="grpc")
    load = LoadOptions(max_inflight=64, grpc_connections=3, drain_s=2.0)
    satpoint.run(target, ["100:0:1"], load=load, out=tmp_path, html=False)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["config"]["load"]["grpc_connections"] == 3
    transport = doc["segments"][0]["generator"]["transport"]
    assert transport["kind"] == "grpc" and transport["connections_mode"] == "fixed"
    assert transport["connections"] == 3
    # the gRPC sim sets no MAX_CONCURRENT_STREAMS: the in-flight cap is the generator's own
    assert transport["server_max_concurrent_streams"] is None and transport["effective_cap"] == 64
    assert transport["retries"] == 0


def test_rest_results_record_the_pool(tmp_path: Path, rest_sim: str) -> None:
    satpoint.run(
        Target(url=rest_sim, model="sim"), ["100:0:1"], load=LoadOptions(drain_s=2.0), out=tmp_path, html=False
    )
    doc = json.loads((tmp_path / "results.json").read_text())
    transport = doc["segments"][0]["generator"]["transport"]
    assert transport["kind"] == "rest" and transport["retries"] == 0 and transport["connections_opened"] >= 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stages"][0]["retries"] == 0
