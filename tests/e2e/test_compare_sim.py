"""``satpoint compare`` against two synthetic servers (REST and gRPC), kept short: a coarse search each, then the
folder's documents checked against their schemas and rewritten offline by ``satpoint report``."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.config import FindOptions, LoadOptions
from satpoint.experiments.compare import CompareConfig, run_compare
from satpoint.procedures.progress import Event, Message
from satpoint.servers.sim.process import SimServer
from tests.documents import assert_documents_valid

pytestmark = pytest.mark.slow
#: a coarse search from just under the capacity (100 rps): two or three short stages per protocol
COARSE = FindOptions(
    start_rps=60.0, precision=0.5, ramp_s=0.3, min_hold_s=1.0, max_hold_s=1.5, min_requests=50, cooldown_s=0,
    profile=False, confirm=False, retest=False, budget_s=6.0, budget_given=True,
)  # fmt: skip


def test_compare_writes_documents_its_schemas_describe_and_report_rewrites_them(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    stop = threading.Event()

    def on_event(e: Event) -> None:  # the latency profile at equal loads is not what this test is about
        if isinstance(e, Message) and "latency at equal offered loads" in e.text:
            stop.set()

    with SimServer(slots=1, service_ms=10) as rest, SimServer(slots=1, service_ms=10, protocol="grpc") as grpc:
        cfg = CompareConfig(url=rest.url, grpc_url=grpc.url, model="sim", find=COARSE, load=LoadOptions(drain_s=0.5))
        outcome = run_compare(cfg, out, stop=stop, on_event=on_event)
    assert set(outcome.doc["protocols"]) == {"rest", "grpc"}
    typed = outcome.document.protocols
    assert typed["grpc"].saturation_rps == outcome.doc["protocols"]["grpc"]["saturation_rps"]
    kinds = assert_documents_valid(out)
    assert kinds["compare.json"] == "compare" and kinds["grpc/summary.json"] == "find-summary"
    before = json.loads((out / "compare.json").read_text())
    r = CliRunner().invoke(app, ["report", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "compare.json").read_text())["protocols"] == before["protocols"]
    assert assert_documents_valid(out) == kinds
