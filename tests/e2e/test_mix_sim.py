"""A zipf mix over the sim's models from its repository index, on two generator processes: every request
answered (its path named a model the sim serves), and the merged rows' models exactly the single-process plan's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from satpoint import api
from satpoint.config import LoadOptions
from satpoint.endpoints.spec import Target
from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Outcome
from satpoint.payloads.mix import ModelMix, ResolvedMix
from satpoint.plan import Stage
from satpoint.servers.sim.process import SimServer


@pytest.mark.slow
def test_a_zipf_mix_from_the_index_is_exact_across_two_processes(tmp_path: Path) -> None:
    stages = [Stage(300, 0.0, 1.5)]
    with SimServer(slots=8, service_ms=2.0, extra_args=("--models", "6")) as sim:
        target = Target(sim.url, "", mix=ModelMix(from_server=True, weights="zipf:1.2"))
        result = api.run(target, ["300:0:1.5"], load=LoadOptions(procs=2, seed=9), out=tmp_path / "run", html=False)
    loaded = api.load(tmp_path / "run")
    mix = ResolvedMix.from_header(loaded.header)
    assert mix is not None and mix.names == tuple(f"sim-{i}" for i in range(1, 7)) and mix.spec == "zipf:1.2"
    rows = loaded.rows()
    assert (rows["outcome"] == Outcome.OK).all()  # each request's path named a model the sim serves
    seg = loaded.segments[0]
    due = due_times(stages, "constant", seg.seed)
    _, planned = mix.rows(len(due), seg.seed)
    assert np.array_equal(rows["intended"], due)
    assert np.array_equal(rows["model"], planned)  # row by row, merged from the two processes
    block = result.summary.model_dump()["models"]
    assert block["counts"]["requests"] == np.bincount(planned, minlength=6).tolist()
    assert block["names"] == list(mix.names)
