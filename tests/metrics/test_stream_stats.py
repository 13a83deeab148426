"""Stream statistics (time to first chunk, gaps, chunks/s), their thresholds, SLOs and verdicts, on the offline
twin of ``sim --stream`` (exact chunk times) and on rows written by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from satpoint.analysis.search.thresholds import ThresholdError, evaluate, parse_slo, parse_threshold, parse_thresholds
from satpoint.analysis.search.verdicts import apply
from satpoint.config import VerdictRules
from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.stats import stage_metrics
from satpoint.metrics.stream_records import attach
from satpoint.metrics.stream_stats import ttfc_s
from satpoint.plan import Stage, spans
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline_stream import simulate_stream

# 4 slots, each stream 20 ms to its first chunk then 9 gaps of 5 ms: 65 ms a slot, capacity 61.5 streams/s
SIM = SimConfig(slots=4, stream=True, stream_first_ms=20, stream_gap_ms=5, stream_chunks=10)


RULES = VerdictRules()


def judged(rate: float, rules: VerdictRules = RULES, config: SimConfig = SIM):  # type: ignore[no-untyped-def]
    stages = [Stage(rate, 1, 10)]
    return apply(stage_metrics(simulate_stream(due_times(stages), config), spans(stages)[0]), rules)


def test_under_capacity_ttfc_and_gaps_are_the_servers_and_the_stage_is_stable() -> None:
    assert SIM.stream_capacity_rps == pytest.approx(61.538, rel=1e-3)
    m = judged(30)
    s = m.stream
    assert m.verdict == "stable", m.reasons
    assert s is not None
    assert s["ttfc_ms"]["p50"] == pytest.approx(20, abs=1e-3) and s["ttfc_ms"]["p99"] == pytest.approx(20, abs=1e-3)
    assert s["gap_ms"]["p50"] == pytest.approx(5, abs=1e-3) and s["gap_ms"]["max"] == pytest.approx(5, abs=1e-3)
    assert s["requests_per_s"] == pytest.approx(30, rel=0.02)
    assert s["chunks_per_s"] == pytest.approx(300, rel=0.02)
    assert s["chunks_per_request"] == 10
    assert m.latency_ms["p50"] == pytest.approx(65, abs=1e-3)  # end to end: the last chunk


def test_over_capacity_ttfc_grows_with_the_queue_and_the_stage_is_saturated() -> None:
    m = judged(80)
    s = m.stream
    assert m.verdict == "saturated", m.reasons
    assert s is not None
    assert s["ttfc_ms"]["p99"] > s["ttfc_ms"]["p50"] > 500  # the growing queue delays the first chunk ...
    assert s["gap_ms"]["p99"] == pytest.approx(5, abs=1e-3)  # ... not to the gaps
    assert s["requests_per_s"] == pytest.approx(SIM.stream_capacity_rps, rel=0.03)


def test_a_ttfc_slo_fails_a_stage_the_queue_does_not() -> None:
    strict = VerdictRules(slo_ms=parse_slo(["ttfc_p99<15ms"]))
    m = judged(30, strict)
    assert m.verdict == "slo_violated" and "ttfc_p99" in m.reasons[0]
    assert judged(30, VerdictRules(slo_ms=parse_slo(["ttfc_p99<300ms", "gap_p99<50ms"]))).verdict == "stable"
    slow_gaps = SimConfig(slots=4, stream=True, stream_first_ms=20, stream_gap_ms=60, stream_chunks=3)
    assert judged(10, VerdictRules(slo_ms=parse_slo(["gap_p99<50ms"])), slow_gaps).verdict == "slo_violated"


def test_censored_rows_count_at_their_wait_and_errors_not_at_all() -> None:
    rec = Records.empty(np.array([0.0, 1.0, 2.0, 3.0]))
    stamp = attach(rec)
    rec.sent[:] = rec.intended
    stamp.chunk(0, 0.010)  # OK: first chunk after 10 ms
    stamp.chunk(0, 0.015)
    stamp.end(0, 0.015)
    rec.done[0], rec.outcome[0] = 0.015, Outcome.OK
    rec.done[1], rec.outcome[1] = 1.5, Outcome.TIMEOUT  # no chunk within 500 ms: counts at 500 ms (a lower bound)
    stamp.chunk(2, 2.001)  # broken after one chunk: an error, left out
    stamp.end(2, 2.002)
    rec.done[2], rec.outcome[2] = 2.002, Outcome.STREAM_BROKEN
    ttfc = ttfc_s(rec)
    assert ttfc[0] == pytest.approx(0.010) and ttfc[1] == pytest.approx(0.5) and ttfc[2] == pytest.approx(0.001)
    assert math.isnan(ttfc[3])  # never sent, not censored yet here (outcome NOT_SENT has no done)
    m = stage_metrics(rec, spans([Stage(1, 0, 4)])[0], settle=0.0)
    assert m.stream is not None
    assert m.stream["ttfc_ms"]["max"] == pytest.approx(500)  # the timed-out row
    assert m.stream["gap_ms"]["max"] == pytest.approx(5)  # the broken row's gap is not counted
    assert m.errors == {"stream_broken": 1, "timeout": 1}


def test_rows_without_stream_columns_have_no_stream_figures() -> None:
    stages = [Stage(10, 0, 2)]
    rec = Records.empty(due_times(stages))
    assert stage_metrics(rec, spans(stages)[0]).stream is None


def test_stream_thresholds_parse_and_judge_the_stage_figures() -> None:
    t = parse_threshold("TTFC_p99.9 < 0.3s")
    assert (t.metric, t.limit, t.unit) == ("ttfc_p999", 300.0, "ms")
    assert parse_threshold("gap_p99<50ms").metric == "gap_p99"
    assert parse_threshold("chunks_per_s>100").unit == "chunks/s"
    with pytest.raises(ThresholdError):
        parse_threshold("ttfc_p42<1ms")
    with pytest.raises(ThresholdError):
        parse_slo(["chunks_per_s<5"])  # an SLO is an upper limit on a percentile
    assert parse_slo(["ttfc_p99=300ms", "gap_p99<50ms"]) == {"ttfc_p99": 300.0, "gap_p99": 50.0}
    summary = {
        "kind": "run",
        "stages": [
            {"stream": {"ttfc_ms": {"p99": 20.0}, "gap_ms": {"p99": 5.0}, "chunks_per_s": 300.0}},
            {"stream": {"ttfc_ms": {"p99": 400.0}, "gap_ms": {"p99": 5.5}, "chunks_per_s": 615.0}},
            {"latency_ms": {"p99": 1.0}},  # a stage without streams is not judged on them
        ],
    }
    got = evaluate(parse_thresholds(["ttfc_p99<300ms", "gap_p99<50ms", "chunks_per_s>600"]), summary)
    assert [(r.passed, r.actual, r.stage) for r in got] == [(False, 400.0, 2), (True, 5.5, 2), (True, 615.0, 2)]
