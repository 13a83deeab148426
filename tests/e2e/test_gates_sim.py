"""``sweep`` and ``compare`` as gates, end to end against ``satpoint sim``: ``--threshold``/``--slo`` exit 3
when the recommended point (sweep) or a protocol (compare) fails them, 0 when it meets them, and a server
that holds no rate is no answer (exit 4), whatever the gates; ``sweep --report DIR --threshold`` judges a
finished sweep again without measuring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.cli.opts.gate_opts import compare_exit
from satpoint.servers.sim.process import SimServer

pytestmark = pytest.mark.slow

QUICK = ["--precision", "0.5", "--ramp", "0.3", "--min-hold", "1", "--max-hold", "1.5", "--min-requests", "100"]


def _sweep(url: str, out: Path, *gates: str) -> tuple[int, str]:
    args = ["sweep", "--url", url, "--model", "sim", "--set", "protocol=rest", "--remeasure-top", "0"]
    r = CliRunner().invoke(app, [*args, *QUICK, "--find-budget-s", "9", "--out", str(out), *gates])
    return r.exit_code, " ".join(r.output.split())


def test_sweep_gates_the_recommended_point(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    with SimServer(slots=1, service_ms=5.0) as sim:  # capacity 200 rps
        code, said = _sweep(sim.url, out, "--threshold", "p99<1us")
    assert code == 3, said
    assert "✗ p99<1us" in said and "protocol=rest" in said  # the recommended point's line, failed
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["best"][doc["objective"]]["point"] == "p01"
    # the same sweep judged again, nothing measured: a met gate passes, an unmet one fails
    report = ["sweep", "--report", str(out), "--threshold"]
    met = CliRunner().invoke(app, [*report, "saturation_rps>1", "--threshold", "p99<30s"])
    assert met.exit_code == 0 and "✓ saturation_rps>1" in met.output, met.output
    unmet = CliRunner().invoke(app, [*report, "saturation_rps>1000000"])
    assert unmet.exit_code == 3 and "✗ saturation_rps>1000000" in unmet.output, unmet.output


def test_a_sweep_without_a_recommended_point_has_no_answer_and_a_broken_server_fails(tmp_path: Path) -> None:
    """No rate meets ``--slo p99<1us``: no point is recommended, exit 4 (not a pass of its --threshold); a
    server that fails every request fails every measurement: exit 1."""
    with SimServer(slots=1, service_ms=5.0) as sim:
        code, said = _sweep(sim.url, tmp_path / "slo", "--slo", "p99<1us", "--threshold", "saturation_rps>0")
    assert code == 4 and "no answer: no point has a figure" in said, said
    (m,) = json.loads((tmp_path / "slo" / "sweep.json").read_text())["measurements"]
    # the same search as one protocol of a compare: no saturation point, no answer
    assert compare_exit({"rest": tmp_path / "slo" / m["dir"]}, ["saturation_rps>0"], False) == 4
    with SimServer(slots=1, service_ms=5.0, error_rate=1.0) as sim:
        code, said = _sweep(sim.url, tmp_path / "broken", "--threshold", "saturation_rps>0")
    assert code == 1 and "measurement failed" in said, said


def test_compare_gates_every_protocol(tmp_path: Path) -> None:
    out = tmp_path / "compare"
    with SimServer(slots=1, service_ms=5.0) as sim:
        args = ["compare", "--url", sim.url, "--model", "sim", "--protocols", "rest", *QUICK, "--budget-s", "20"]
        r = CliRunner().invoke(app, [*args, "--out", str(out), "--slo", "p99<1us"])
    assert r.exit_code == 3, r.output
    assert "rest: ✗ p99<=0.001ms" in " ".join(r.output.split())
    assert compare_exit({"rest": out / "rest"}, ["saturation_rps>1", "p99<30s"], False) == 0


def test_compare_of_a_server_that_fails_every_request_does_not_pass(tmp_path: Path) -> None:
    with SimServer(slots=1, service_ms=5.0, error_rate=1.0) as sim:
        args = ["compare", "--url", sim.url, "--model", "sim", "--protocols", "rest", *QUICK, "--budget-s", "20"]
        r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "c"), "--threshold", "saturation_rps>0"])
    assert r.exit_code == 2 and "failed before the run" in r.output, r.output  # refused before any load
