"""The generator's own descriptors: a connect that fails with EMFILE/ENFILE/ENOBUFS is the generator's limit
(``generator_resources``, the stage ``generator_limited``), never the server failing nor the target lost;
an in-flight cap lowered by a process's open-files limit is the generator's limit too."""

from __future__ import annotations

import errno

import pytest

from satpoint.analysis.search.target_lost import stopped_answering_at
from satpoint.analysis.search.verdicts import apply, judge_fd_limit
from satpoint.config import VerdictRules
from satpoint.engine.inflight import SHARD_FD_RESERVE, fit_to_fd_limit
from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Outcome, Records, connect_failure
from satpoint.metrics.stats import stage_metrics
from satpoint.plan import Stage, spans
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate

RULES = VerdictRules()
STAGES = [Stage(200, 0, 6)]


def test_connect_errors_are_classed_by_whose_limit_they_are() -> None:
    assert connect_failure(OSError(errno.EMFILE, "Too many open files")) is Outcome.GENERATOR_RESOURCES
    assert connect_failure(OSError(errno.ENFILE, "Too many open files in system")) is Outcome.GENERATOR_RESOURCES
    assert connect_failure(OSError(errno.ENOBUFS, "No buffer space available")) is Outcome.GENERATOR_RESOURCES
    assert connect_failure(ConnectionRefusedError(errno.ECONNREFUSED, "refused")) is Outcome.CONN_REFUSED
    assert connect_failure(OSError(errno.EHOSTUNREACH, "No route to host")) is Outcome.CONN_ERROR
    assert connect_failure(TimeoutError()) is Outcome.CONN_ERROR


def _starved(from_s: float) -> Records:
    """A server that answers everything, and a generator that cannot open a connection from ``from_s`` on."""
    rec = simulate(due_times(STAGES), SimConfig(slots=8, service_ms=5))
    late = rec.intended >= from_s
    rec.outcome[late] = Outcome.GENERATOR_RESOURCES
    rec.done[late] = rec.sent[late]
    return rec


def test_descriptor_exhaustion_is_generator_limited_not_failing() -> None:
    m = apply(stage_metrics(_starved(3.0), spans(STAGES)[0]), RULES)
    assert m.error_rate > RULES.max_error_rate  # counted, by class, with the errors ...
    assert m.errors["generator_resources"] > 0
    assert m.verdict == "generator_limited", m.reasons  # ... but judged as the generator's limit
    assert "file descriptors" in m.reasons[0] and "ulimit -n" in m.reasons[0]


def test_descriptor_exhaustion_is_not_the_target_lost() -> None:
    rec = _starved(2.0)  # 4 s of nothing but failed connects, and no answer after them
    assert stopped_answering_at(rec) is None
    gone = Records.from_columns({k: v.copy() for k, v in rec.columns().items()})
    gone.outcome[gone.outcome == Outcome.GENERATOR_RESOURCES] = Outcome.CONN_ERROR
    assert stopped_answering_at(gone) == pytest.approx(2.0, abs=0.01)  # the same rows as connect errors: lost


def test_a_cap_lowered_by_the_fd_limit_is_the_generators_limit_when_requests_waited() -> None:
    rec = simulate(due_times(STAGES), SimConfig(slots=8, service_ms=5))
    m = apply(stage_metrics(rec, spans(STAGES)[0]), RULES)
    assert m.verdict == "stable"
    limited = {"fd_limit": 64, "asked_per_proc": 200, "kept_per_proc": 30}
    assert judge_fd_limit(m, {"max_inflight_fd_limited": limited}, RULES).verdict == "stable"  # nothing waited
    m.waited_fraction = 0.4
    m.verdict, m.reasons = "client_limited", ["raise --max-inflight"]
    assert judge_fd_limit(m, {}, RULES).verdict == "client_limited"  # the cap was the user's: their advice holds
    out = judge_fd_limit(m, {"max_inflight_fd_limited": limited}, RULES)
    assert out.verdict == "generator_limited"
    assert "lowered from 200 by its open-files limit (64)" in out.reasons[0]


def test_the_cap_fits_what_the_fd_limit_leaves() -> None:
    assert fit_to_fd_limit(200, 1 << 20, open_now=30) == 200
    assert fit_to_fd_limit(200, 64, open_now=20) == 64 - 20 - SHARD_FD_RESERVE
    assert fit_to_fd_limit(200, 16, open_now=20) == 1  # never nothing: one connection, EMFILE classed if it fails
    assert 1 <= fit_to_fd_limit(10_000, 256) <= 256 - SHARD_FD_RESERVE  # this process's own open count
