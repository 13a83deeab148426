"""End-to-end: ``satpoint scale-test`` against ``satpoint sim --autoscale`` with a known delay, checked against the
sim's own event log; a failing server; sources that cannot be read (one line, exit 2, no load sent)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from satpoint import api
from satpoint.servers.sim.process import SimServer
from tests.http_stub import QuietHandler, serving

pytestmark = pytest.mark.slow

#: 50 rps per replica (1 slot x 20 ms); 1 to 4 replicas, each ready 3 s after the decision; a decision a second
SCALED = ["--autoscale", "1:4", "--scale-delay-s", "3", "--scale-sync-s", "1", "--scale-down-window-s", "2",
          "--scale-target", "0.5"]  # fmt: skip
SHAPE = ["--from", "20", "--to", "100", "--base-s", "4", "--hold-s", "10", "--down-hold-s", "6", "--slo", "p99<200ms"]
BASE_S = 4.0


def satpoint(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "satpoint", *args], capture_output=True, text=True, timeout=timeout)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _replicas_cmd(url: str) -> str:
    code = f"import urllib.request as u;print(u.urlopen('{url}/replicas/ready').read().decode(), " \
           f"u.urlopen('{url}/replicas/desired').read().decode())"  # fmt: skip
    return f'{sys.executable} -c "{code}"'


def _truth(out: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The sim's events, in seconds from the step on the run clock (the same CLOCK_MONOTONIC)."""
    header = json.loads((out / "results.json").read_text())
    step = header["segments"][0]["generator"]["t0_monotonic"] + BASE_S
    after = [e for e in events if e["mono_s"] >= step]
    return {
        "desired": next(e["mono_s"] - step for e in after if e["kind"] == "desired"),
        "ready": sorted(e["mono_s"] - step for e in after if e["kind"] == "ready"),
    }


def _over_from_rows(out: Path, limit_s: float) -> tuple[int, int]:
    """Seconds over the objective and requests over it, recomputed from the recorded rows."""
    rows = api.load(out).rows()
    ok = rows["outcome"] == 0
    lat = np.where(ok, rows["done"] - rows["intended"], np.inf)
    seconds = 0
    for s in np.unique(np.floor(rows["intended"])):
        sel = lat[np.floor(rows["intended"]) == s]
        seconds += int(np.quantile(sel, 0.99, method="higher") > limit_s)
    return seconds, int(np.count_nonzero(lat > limit_s))


def test_times_match_the_sims_event_log(tmp_path: Path) -> None:
    with SimServer(slots=1, service_ms=20.0, extra_args=SCALED) as sim:
        r = satpoint("scale-test", "--url", sim.url, "-m", "sim", *SHAPE, "--replicas-cmd", _replicas_cmd(sim.url),
                     "--capacity-rps", "50", "--out", str(tmp_path))  # fmt: skip
        events = _get(f"{sim.url}/events")["events"]
    assert r.returncode == 0, r.stderr + r.stdout
    block = json.loads((tmp_path / "summary.json").read_text())["scale"]
    truth = _truth(tmp_path, events)
    assert len(truth["ready"]) == 3  # 100 rps at 0.5 of 50 rps per replica: 4 replicas
    assert block["scaled"] and block["replicas_before"] == 1 and block["replicas_peak"] == 4
    assert abs(block["time_to_desired_s"] - truth["desired"]) <= 1.0, (block["events"], truth)
    assert abs(block["time_to_replicas_s"] - truth["ready"][-1]) <= 1.0, (block["events"], truth)
    for seen, real in zip(block["replica_ready_s"], truth["ready"], strict=True):
        assert abs(seen - real) <= 1.0
    # capacity 200 rps once the replicas serve: a request due after that waits for nothing
    assert block["recovered"] is True
    assert abs(block["time_to_recover_s"] - truth["ready"][-1]) <= 1.0, (block["timeline"], truth)
    seconds, requests = _over_from_rows(tmp_path, 0.2)
    assert block["seconds_over_slo"] == seconds and block["requests_over_slo"] == requests
    assert abs(block["seconds_over_slo_peak"] - truth["ready"][-1]) <= 1.0
    assert block["requests_failed"] == 0
    assert block["scale_down"]["time_to_scale_down_s"] is not None  # back to 1 within the 6 s at the base
    # one replica of 50 rps at 20 rps keeps 60 % headroom; a step of 80 rps before the replicas serve needs 160 %
    margin = block["margin"]
    assert margin["enough"] is False and margin["needed"] == pytest.approx(1.6) and margin["in_use"] == 0.6
    assert "too tight" in r.stdout


def test_the_margin_check_says_enough_when_the_objective_held(tmp_path: Path) -> None:
    find = tmp_path / "find"
    find.mkdir()
    (find / "summary.json").write_text(json.dumps({"kind": "find", "saturation_rps": 50.0}))
    args = ["--autoscale", "2:4", *SCALED[2:]]  # two replicas (100 rps) at the base: 30 -> 60 rps fits before a third
    with SimServer(slots=1, service_ms=20.0, extra_args=args) as sim:
        r = satpoint("scale-test", "--url", sim.url, "-m", "sim", "--from", "30", "--to", "60", "--base-s", "3",
                     "--hold-s", "8", "--down-hold-s", "2", "--slo", "p99<200ms", "--replicas-cmd",
                     _replicas_cmd(sim.url), "--capacity", str(find), "--settle-s", "1",
                     "--out", str(tmp_path / "out"))  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    assert "waiting for the replica count to hold 1 s" in r.stdout
    block = json.loads((tmp_path / "out" / "summary.json").read_text())["scale"]
    assert block["notes"] == []
    assert block["scaled"] and block["replicas_peak"] == 3
    assert block["seconds_over_slo"] == 0 and block["time_to_recover_s"] == 0.0
    margin = block["margin"]
    assert (
        margin["enough"] is True and margin["needed"] == pytest.approx(0.3) and margin["in_use"] == pytest.approx(0.7)
    )


def test_a_server_that_fails_is_never_fine(tmp_path: Path) -> None:
    # every inference request after the first 20 (the checks before the run take a few) answers 503
    with SimServer(
        slots=1, service_ms=5.0, fault="error-body", fault_after=20, extra_args=["--autoscale", "1:1"]
    ) as sim:
        r = satpoint("scale-test", "--url", sim.url, "-m", "sim", "--from", "20", "--to", "40", "--base-s", "2",
                     "--hold-s", "3", "--down-hold-s", "1", "--slo", "p99<200ms", "--replicas-cmd",
                     _replicas_cmd(sim.url), "--out", str(tmp_path))  # fmt: skip
    assert r.returncode == 3, r.stderr + r.stdout
    block = json.loads((tmp_path / "summary.json").read_text())["scale"]
    assert block["recovered"] is False and block["time_to_recover_s"] is None
    assert block["requests_failed"] >= block["requests"] - 20 and block["requests_over_slo"] == block["requests_failed"]
    assert block["seconds_over_slo"] >= 5 and block["seconds_over_slo_peak"] == 3 and not block["scaled"]
    assert "not recovered" in r.stdout and "never rose" in r.stdout


class _NoSeries(QuietHandler):
    def do_GET(self) -> None:
        body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
        self.reply(200, body, {"Content-Type": "application/json"})


@pytest.mark.parametrize(
    ("source", "says"),
    [
        (["--replicas-prom", "http://127.0.0.1:9", "--replicas-query", "up"], "cannot reach Prometheus"),
        (["--replicas-prom", "NOSERIES", "--replicas-query", "nothing"], "returned no series"),
        (["--replicas-cmd", "echo none"], "printed no number"),
        (["--replicas-cmd", "exit 7"], "failed (exit 7)"),
    ],
)
def test_a_source_that_cannot_be_read_is_one_line_before_any_load(source: list[str], says: str) -> None:
    with serving(_NoSeries) as prom, SimServer(slots=1, service_ms=5.0, extra_args=["--autoscale", "1:2"]) as sim:
        source = [prom if s == "NOSERIES" else s for s in source]
        r = satpoint("scale-test", "--url", sim.url, "-m", "sim", "--from", "10", "--to", "20", *source)
        admitted = urllib.request.urlopen(f"{sim.url}/metrics", timeout=5).read().decode()
    assert r.returncode == 2, r.stderr + r.stdout
    lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
    assert len(lines) == 1 and says in lines[0], lines
    assert "satpoint_sim_requests_total 0" in admitted


@pytest.mark.parametrize(
    ("target", "delay"), [("0.5", "3"), ("0.8", "2")], ids=["target-0.5-delay-3s", "target-0.8-delay-2s"]
)
def test_the_prediction_holds_the_measurement_for_two_policies(tmp_path: Path, target: str, delay: str) -> None:
    policy = ["--autoscale", "1:4", "--scale-delay-s", delay, "--scale-sync-s", "1", "--scale-down-window-s", "2",
              "--scale-target", target]  # fmt: skip
    with SimServer(slots=1, service_ms=20.0, extra_args=policy) as sim:
        r = satpoint("scale-test", "--url", sim.url, "-m", "sim", *SHAPE, "--replicas-cmd", _replicas_cmd(sim.url),
                     "--capacity-rps", "50", "--predict", target, "--predict-sync-s", "1", "--predict-window-s", "2",
                     "--out", str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    block = json.loads((tmp_path / "summary.json").read_text())["scale"]
    pred = block["predict"]
    assert pred["delay_s"] == pytest.approx(float(delay), abs=1.0)  # measured: desired to ready, seen once a second
    assert pred["measured_seconds_over_slo"] == block["seconds_over_slo"] >= 2
    # the sync ticks' phase against the step decides whether the first tick sees the step: the model's range over
    # phases holds the measurement
    low, high = pred["seconds_over_slo_range"]
    assert low <= block["seconds_over_slo"] <= high, pred
    assert low <= pred["seconds_over_slo"] <= high
    assert "prediction (target" in r.stdout


def test_replicas_through_a_stub_of_the_kubernetes_api(tmp_path: Path) -> None:
    with SimServer(slots=1, service_ms=20.0, extra_args=SCALED) as sim:

        class Api(QuietHandler):
            def do_GET(self) -> None:  # a Deployment whose counts are the sim's
                if self.path != "/apis/apps/v1/namespaces/prod/deployments/sim":
                    self.reply(404, b"{}")
                    return
                counts = _get(f"{sim.url}/replicas")
                doc = {"spec": {"replicas": counts["desired"]}, "status": {"readyReplicas": counts["ready"]}}
                self.reply(200, json.dumps(doc).encode(), {"Content-Type": "application/json"})

        with serving(Api) as api:
            r = satpoint("scale-test", "--url", sim.url, "-m", "sim", *SHAPE, "--replicas-k8s", "prod/deployment/sim",
                         "--replicas-k8s-url", api, "--out", str(tmp_path))  # fmt: skip
        events = _get(f"{sim.url}/events")["events"]
    assert r.returncode == 0, r.stderr + r.stdout
    block = json.loads((tmp_path / "summary.json").read_text())["scale"]
    truth = _truth(tmp_path, events)
    assert block["source"] == "--replicas-k8s prod/deployment/sim" and block["replicas_peak"] == 4
    assert abs(block["time_to_desired_s"] - truth["desired"]) <= 1.0
    assert abs(block["time_to_replicas_s"] - truth["ready"][-1]) <= 1.0
