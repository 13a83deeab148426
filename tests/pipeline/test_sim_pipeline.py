"""``satpoint sim --pipeline``: each step's model its own slots; the pipeline runs the DAG on them."""

from __future__ import annotations

import asyncio
import http.client
import re
import threading
import time
from pathlib import Path

import pytest

from satpoint.errors import ConfigError
from satpoint.servers.sim.metastable import Ticket
from satpoint.servers.sim.pipeline import PipelineRunner, SimPipeline
from satpoint.servers.sim.process import SimServer
from satpoint.servers.sim.server import SimConfig, pipeline_from_options

DIAMOND_YAML = """\
apiVersion: mlops.seldon.io/v1alpha1
kind: Pipeline
metadata: {name: diamond}
spec:
  steps:
  - name: pre
  - name: left
    inputs: [pre]
  - name: right
    inputs: [pre.outputs]
  - name: post
    inputs: [left.outputs.Y, right.outputs.Y]
  output:
    steps: [post]
"""


def _finishes(pipeline: SimPipeline, arrivals_s: list[float], direct: list[tuple[str, float]] = ()) -> list[float]:
    """Run pipeline requests arriving at ``arrivals_s`` (and ``direct`` calls of one step's model) through a
    runner on a real loop; each request's answer time after its arrival, in virtual time."""

    async def go() -> list[float]:
        loop = asyncio.get_running_loop()
        origin_s = time.perf_counter()
        answered: list[Ticket] = []
        runner = PipelineRunner(pipeline, SimConfig(), loop, origin_s, answered.append)
        for model, at_s in direct:
            queue = runner.queue(model.encode())
            assert queue is not None
            queue.admit(origin_s + at_s)
        tickets = [runner.run(origin_s + a) for a in arrivals_s]
        while len(answered) < len(tickets):
            await asyncio.sleep(0.005)
        return [round((t.finish_s or 0.0) - t.arrival_s, 6) for t in tickets]

    return asyncio.run(go())


def test_a_chain_queues_on_each_step_in_turn() -> None:
    pipeline = SimPipeline.from_options("a,b", ["a=1x10", "b=1x20"], slots=1, service_ms=5, name="p")
    # a serves at 10, 20, 30 ms; b (20 ms) starts each when a has answered and b is free: 30, 50, 70 ms
    assert _finishes(pipeline, [0.0, 0.0, 0.0]) == [0.03, 0.05, 0.07]
    assert pipeline.capacity_rps == 50.0 and pipeline.bottleneck == "b"


def test_the_branches_of_a_fan_out_run_at_the_same_time(tmp_path: Path) -> None:
    spec = tmp_path / "diamond.yaml"
    spec.write_text(DIAMOND_YAML)
    pipeline = SimPipeline.from_options(
        str(spec), ["pre=1x5", "left=1x10", "right=1x30", "post=1x4"], slots=1, service_ms=1
    )
    assert _finishes(pipeline, [0.0]) == [0.039]  # pre, then right (the slower branch), then post: 5 + 30 + 4
    assert pipeline.capacity_rps == pytest.approx(1000 / 30) and pipeline.bottleneck == "right"


def test_a_step_called_alone_shares_its_models_slots() -> None:
    pipeline = SimPipeline.from_options("a,b", ["a=1x10", "b=1x10"], slots=1, service_ms=5, name="p")
    # a called alone takes a's slot 0-10 ms: the pipeline's request waits for it, then a 10-20, b 20-30
    assert _finishes(pipeline, [0.0], direct=[("a", 0.0)]) == [0.03]
    assert _finishes(pipeline, [0.0]) == [0.02]


def test_a_model_called_by_two_steps_serves_both_on_its_slots(tmp_path: Path) -> None:
    config = (
        '{"name": "twice", "ensemble_scheduling": {"step": ['
        '{"model_name": "m", "input_map": {"X": "IN"}, "output_map": {"Y": "mid"}},'
        '{"model_name": "m", "input_map": {"X": "mid"}, "output_map": {"Y": "OUT"}}]}}'
    )
    path = tmp_path / "config.json"
    path.write_text(config)
    pipeline = SimPipeline.from_options(str(path), ["m=1x10"], slots=1, service_ms=1)
    assert [m for m, _ in pipeline.services] == ["m"]
    assert _finishes(pipeline, [0.0, 0.0]) == [0.03, 0.04]  # m: r1 0-10, r2 10-20, r1's second 20-30, r2's 30-40


@pytest.mark.parametrize(
    ("services", "said"),
    [
        (["a=1"], "MODEL=SLOTSxMS"),
        (["zz=1x10"], "no step calls model zz"),
        (["a=0x10"], "slots must be >= 1"),
    ],
)
def test_bad_step_services(services: list[str], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        SimPipeline.from_options("a,b", services, slots=1, service_ms=5, name="p")


def test_what_a_pipeline_sim_refuses() -> None:
    with pytest.raises(ConfigError, match="--step-service needs --pipeline"):
        pipeline_from_options(None, ["a=1x1"], SimConfig())
    pipeline = pipeline_from_options("a,b", [], SimConfig(model="p"))
    assert pipeline is not None and pipeline.served == ("a", "b", "p", "p.pipeline")
    with pytest.raises(ConfigError, match="does not mix"):
        pipeline.configure(SimConfig(metastable_high=5, metastable_factor=2.0))
    with pytest.raises(ConfigError, match="named like the pipeline"):
        SimPipeline.from_options("p,b", [], slots=1, service_ms=1, name="p").configure(SimConfig())


_LINE = re.compile(
    r"^satpoint sim pipeline diamond \(diamond or diamond\.pipeline\): .* capacity 50 rps \(bottleneck left\)$"
)


@pytest.mark.slow
def test_the_pipeline_sim_serves_steps_and_pipeline_over_http(tmp_path: Path) -> None:
    spec = tmp_path / "diamond.yaml"
    spec.write_text(DIAMOND_YAML)
    args = ["--pipeline", str(spec), "--step-service", "left=1x20", "--step-service", "right=2x20"]
    with SimServer(slots=4, service_ms=2, extra_args=args) as sim:
        assert any(_LINE.match(line) for line in sim.log_text().splitlines())
        assert "(capacity 50 rps)" in sim.log_text()
        host, port = sim.host, sim.port
        statuses: dict[str, int] = {}
        for model, header in (("diamond.pipeline", "diamond.pipeline"), ("diamond", None), ("left", "left")):
            conn = http.client.HTTPConnection(host, port, timeout=10)
            headers = {"content-type": "application/json"} | ({"Seldon-Model": header} if header else {})
            t0 = time.perf_counter()
            conn.request("POST", f"/v2/models/{model}/infer", body=b'{"inputs": []}', headers=headers)
            response = conn.getresponse()
            response.read()
            statuses[model] = response.status
            took_s = time.perf_counter() - t0
            assert took_s >= (0.024 if model != "left" else 0.020)  # pre 2 + left/right 20 + post 2 ms
            conn.close()
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/v2/models/nope")
        statuses["nope"] = conn.getresponse().status
        conn.close()
        # a burst of 40 pipeline requests: left (1 slot x 20 ms) paces them, 50 rps, about 0.8 s
        done: list[float] = []
        t0 = time.perf_counter()

        def one() -> None:
            c = http.client.HTTPConnection(host, port, timeout=30)
            c.request("POST", "/v2/models/diamond.pipeline/infer", body=b"{}")
            c.getresponse().read()
            done.append(time.perf_counter() - t0)
            c.close()

        threads = [threading.Thread(target=one) for _ in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert statuses == {"diamond.pipeline": 200, "diamond": 200, "left": 200, "nope": 404}
    assert len(done) == 40 and 0.80 <= max(done) <= 1.2
