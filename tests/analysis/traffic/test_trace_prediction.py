"""The simple queue's prediction beside a replay (``analysis.traffic.prediction``), on records written by a
known server: 4 slots x 10 ms, with 0.5 ms of network overhead outside the slots, optionally pausing."""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import pytest

from satpoint.analysis.traffic.prediction import prediction_block, verdict
from satpoint.metrics.records import F64, Outcome, Records

SLOT_S, IN_S, OUT_S, SLOTS = 0.010, 0.0002, 0.0003, 4


def _arrivals(seed: int = 3, burst_rps: float = 700.0) -> F64:
    """30 s: 200 rps with 0.5 s bursts of ``burst_rps`` every 5 s (at 700 the server queues in each burst)."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, 30.0, 0.001)
    rate = np.where((t % 5.0) < 0.5, burst_rps, 200.0)
    keep = rng.random(len(t)) < rate * 0.001
    return np.sort(t[keep] + rng.random(int(keep.sum())) * 0.001)


def _server(arrivals: F64, contended_s: float | None = None) -> Records:
    """Records of a FIFO server with SLOTS slots of SLOT_S; with ``contended_s``, a request that starts while
    two or more other slots are busy holds its slot that long instead (contention under load)."""
    sent = arrivals + 0.00002
    heap = [0.0] * SLOTS
    done = np.empty(len(arrivals))
    for i, a in enumerate((sent + IN_S).tolist()):
        start = max(a, heap[0])
        busy = sum(1 for f in heap if f > start)
        s = contended_s if contended_s is not None and busy >= 2 else SLOT_S
        heapq.heapreplace(heap, start + s)
        done[i] = start + s + OUT_S
    n = len(arrivals)
    return Records(
        arrivals, sent, done, np.full(n, Outcome.OK, dtype=np.int8), np.zeros(n, np.int32), np.zeros(n, bool)
    )


def _stages(rec: Records) -> list[dict[str, Any]]:
    """Three stages of 10 s, each judged over its last 8 s, with the measured percentiles."""
    lat = rec.latency_s()
    out = []
    for k in range(3):
        w0, w1 = 10.0 * k + 2.0, 10.0 * (k + 1)
        lo, hi = np.searchsorted(rec.intended, [w0, w1])
        p50, p99 = np.percentile(lat[lo:hi], [50, 99]) * 1e3
        out.append(
            {
                "index": k,
                "segment": 0,
                "target_rps": 250.0 + k,
                "window_start_s": w0,
                "window_end_s": w1,
                "latency_ms": {"p50": float(p50), "p99": float(p99)},
            }
        )
    return out


def test_a_simple_queue_is_predicted_and_its_concurrency_estimated() -> None:
    rec = _server(_arrivals())
    stages = _stages(rec)
    block = prediction_block(rec, stages, slots=None)
    assert block is not None
    assert block["slots"] == SLOTS and block["slots_source"] == "busy_throughput"
    assert block["busy_rps"] == pytest.approx(SLOTS / SLOT_S, rel=0.03)
    assert block["overhead_ms"] == pytest.approx((IN_S + OUT_S) * 1e3, abs=0.1)
    assert block["service_source"] == "idle_server" and block["service_samples"] >= 50
    for row in block["stages"]:
        assert row["verdict"] == "simple_queue", row
        assert row["text"] == "behaves as a simple queue"
        for q in ("p50", "p99"):
            m, p = row["measured_ms"][q], row["predicted_ms"][q]
            assert abs(m - p) <= max(0.15 * p, 1.0)
        assert row["measured_ms"]["p99"] > 20  # the bursts did queue: the agreement is not trivial
    assert block["simple_queue_stages"] == 3


def test_given_slots_are_used_and_a_wrong_count_shows() -> None:
    rec = _server(_arrivals())
    block = prediction_block(rec, _stages(rec), slots=8)
    assert block is not None and block["slots"] == 8 and block["slots_source"] == "given"
    assert {r["verdict"] for r in block["stages"]} & {"much_worse", "worse"}  # 8 slots queue far less than 4


def test_contention_makes_the_measurement_much_worse_than_the_queue() -> None:
    rec = _server(_arrivals(burst_rps=300.0), contended_s=0.015)  # 15 ms a request with 2+ others in service
    block = prediction_block(rec, _stages(rec), slots=SLOTS)
    assert block is not None
    rows = block["stages"]
    assert all(r["verdict"] == "much_worse" for r in rows), rows
    assert all(r["ratio"] >= 1.5 for r in rows)
    assert "something else is at work (GC, batching, contention)" in rows[0]["text"]


def test_a_server_never_full_is_given_its_peak_concurrency() -> None:
    rng = np.random.default_rng(1)
    arrivals = np.sort(rng.uniform(0.0, 30.0, 1500))  # 50 rps: 0.5 slots busy on average
    rec = _server(arrivals)
    block = prediction_block(rec, _stages(rec), slots=None)
    assert block is not None
    assert block["slots_source"] == "peak_concurrency" and 1 <= block["slots"] <= SLOTS
    assert block["overhead_ms"] == 0.0
    assert all(r["verdict"] == "simple_queue" for r in block["stages"])


def test_verdict_bounds() -> None:
    code, ratio = verdict({"p50": 10.5, "p99": 12.0}, {"p50": 10.0, "p99": 11.5})
    assert code == "simple_queue" and ratio == pytest.approx(1.05)
    assert verdict({"p50": 10.0, "p99": 400.0}, {"p50": 10.0, "p99": 100.0})[0] == "much_worse"
    assert verdict({"p50": 10.0, "p99": 130.0}, {"p50": 10.0, "p99": 100.0})[0] == "worse"
    assert verdict({"p50": 10.0, "p99": 50.0}, {"p50": 10.0, "p99": 100.0})[0] == "better"
    assert verdict({"p50": None, "p99": 50.0}, {"p50": 10.0, "p99": 100.0}) == ("unknown", None)
