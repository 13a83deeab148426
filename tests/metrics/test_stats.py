"""Stage metrics, percentiles and per-second intervals on hand-built rows with known answers."""

import math

import numpy as np
import pytest

from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.stats import LATE_S, PCTS, intervals, pct_ms, queue_growth_rps, settle_s, stage_metrics
from satpoint.plan import Stage, spans
from satpoint.servers.sim.model import SimConfig
from satpoint.servers.sim.offline import simulate

# --- pct_ms ---------------------------------------------------------------------------------


def test_pct_ms_is_numpys_linear_order_statistic_in_ms() -> None:
    values = np.arange(1, 101) / 1000.0  # 1 ms .. 100 ms
    rng = np.random.default_rng(3)
    shuffled = rng.permutation(values)
    out = pct_ms(shuffled)
    assert list(out) == [*PCTS, "max"]
    # linear interpolation between closest ranks: p at rank p/100 * (n - 1)
    assert out == {"p50": 50.5, "p90": 90.1, "p95": 95.05, "p99": 99.01, "p999": 99.901, "max": 100.0}
    for key, q in PCTS.items():
        assert out[key] == pytest.approx(float(np.percentile(values, q)) * 1000, abs=1e-4)


def test_pct_ms_hits_exact_ranks() -> None:
    values = np.array([0.005, 0.001, 0.004, 0.002, 0.003])
    assert pct_ms(values, {"min": 0.0, "q1": 25.0, "med": 50.0, "q3": 75.0, "top": 100.0}) == {
        "min": 1.0,
        "q1": 2.0,
        "med": 3.0,
        "q3": 4.0,
        "top": 5.0,
        "max": 5.0,
    }


def test_pct_ms_matches_numpy_on_random_data() -> None:
    rng = np.random.default_rng(7)
    values = rng.lognormal(-4.0, 1.0, 10_001)
    out = pct_ms(values)
    for key, q in PCTS.items():
        assert out[key] == round(float(np.percentile(values, q)) * 1000, 4)
    assert out["max"] == round(float(values.max()) * 1000, 4)


def test_pct_ms_ignores_nan_and_rounds_to_a_tenth_of_a_microsecond() -> None:
    values = np.array([np.nan, 0.0123456789, np.nan, 0.0123456789])
    assert pct_ms(values, {"p50": 50.0}) == {"p50": 12.3457, "max": 12.3457}


@pytest.mark.parametrize("values", [np.empty(0), np.array([np.nan, np.nan])], ids=["empty", "all-nan"])
def test_pct_ms_of_nothing_is_none(values: np.ndarray) -> None:
    assert pct_ms(values) == {"p50": None, "p90": None, "p95": None, "p99": None, "p999": None, "max": None}
    assert pct_ms(values, {"p99": 99.0}) == {"p99": None, "max": None}


# --- settle_s -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hold_s", "expected"),
    [
        (0.4, 0.2),  # half the hold: a short hold keeps half of itself as its window
        (0.6, 0.3),
        (1.0, 0.5),
        (2.0, 0.5),  # floor: 0.5 s
        (2.5, 0.5),
        (10.0, 2.0),  # 20 % of the hold
        (25.0, 5.0),
        (100.0, 5.0),  # cap: 5 s
    ],
)
def test_settle_s_values(hold_s: float, expected: float) -> None:
    assert settle_s(hold_s) == pytest.approx(expected)


def test_settle_s_bounds() -> None:
    for hold in np.geomspace(0.01, 10_000, 400).tolist():
        s = settle_s(hold)
        assert 0 < s <= 5.0
        assert s <= 0.5 * hold  # the steady window keeps at least half the hold
        assert s >= min(0.5, 0.5 * hold)
        if 2.5 <= hold <= 25.0:
            assert s == pytest.approx(0.2 * hold)


# --- hand-built stages ----------------------------------------------------------------------

HOLD = [Stage(100, 0, 10)]  # 1000 requests due at 0.005, 0.015, ..., 9.995; window [2, 10)


def constant_rows(latency_s: float = 0.010) -> Records:
    """A perfect generator at a constant 100 rps against a server answering every request OK in ``latency_s``."""
    due = due_times(HOLD)
    rec = Records.empty(due)
    rec.sent[:] = due
    rec.done[:] = due + latency_s
    rec.outcome[:] = Outcome.OK
    rec.status[:] = 200
    return rec


def test_constant_stage_below_capacity() -> None:
    rec = constant_rows()
    assert len(rec) == 1000
    m = stage_metrics(rec, spans(HOLD)[0])
    assert (m.index, m.target_rps, m.ramp_s, m.hold_s) == (0, 100, 0, 10)
    assert (m.window_start_s, m.window_end_s) == (2.0, 10.0)
    assert m.requests == 800
    assert m.offered_rps == pytest.approx(100.0)
    assert m.throughput_rps == pytest.approx(100.0)
    assert m.completed_rps == pytest.approx(100.0)
    assert m.error_rate == 0.0
    assert m.errors == {}
    assert m.latency_ms == {"p50": 10.0, "p90": 10.0, "p95": 10.0, "p99": 10.0, "p999": 10.0, "max": 10.0}
    assert m.service_ms["p99"] == 10.0
    assert m.send_lag_ms == {"p50": 0.0, "p99": 0.0, "max": 0.0}
    assert m.generator_lag_ms == {"p50": 0.0, "p99": 0.0, "max": 0.0}
    assert (m.late_fraction, m.waited_fraction, m.censored) == (0.0, 0.0, 0)
    assert abs(m.queue_growth_rps) < 0.5  # at most one request outstanding at any time
    assert m.latency_trend_ms_per_s == pytest.approx(0.0, abs=1e-6)
    assert (m.verdict, m.reasons) == ("", [])


def test_linearly_growing_latency_means_a_growing_queue() -> None:
    # latency 10 ms + 0.25 s per second: request due at t finishes at 1.25 t + 0.01, so completions run at
    # 100 / 1.25 = 80 rps and the queue grows at 100 - 80 = 20 requests per second
    rec = constant_rows()
    rec.done[:] = rec.intended + 0.010 + 0.25 * rec.intended
    m = stage_metrics(rec, spans(HOLD)[0])
    assert m.offered_rps == pytest.approx(100.0)
    assert m.throughput_rps == pytest.approx(80.0, abs=0.2)
    assert m.queue_growth_rps == pytest.approx(20.0, rel=0.05)
    assert m.latency_trend_ms_per_s == pytest.approx(250.0)
    assert m.latency_ms["p50"] == pytest.approx(10 + 250 * 6.0, abs=2)  # the median due time is ~6 s
    assert m.latency_ms["max"] == pytest.approx(10 + 250 * 9.995)


def test_overloaded_c_slot_server_queues_at_offered_minus_capacity() -> None:
    # one slot, 10 ms: capacity 100 rps; offered 200 rps.  Request k (due 0.0025 + 0.005 k) finishes at
    # 0.0025 + 0.01 (k + 1): its latency is 0.01 + 0.005 k, i.e. it grows by 1 s per second of due time
    stages = [Stage(200, 0, 10)]
    rec = simulate(due_times(stages), SimConfig(slots=1, service_ms=10))
    m = stage_metrics(rec, spans(stages)[0])
    # the hold's p50 latency is ~2.5 s, so the window starts 60 % into the hold (the longest settle)
    assert m.window_start_s == pytest.approx(6.0)
    assert m.requests == 800
    assert m.offered_rps == pytest.approx(200.0)
    assert m.throughput_rps == pytest.approx(100.0, abs=0.2)
    assert m.queue_growth_rps == pytest.approx(100.0, rel=0.03)
    assert m.latency_trend_ms_per_s == pytest.approx(1000.0, rel=1e-6)
    assert m.service_ms["p50"] == pytest.approx(10.0 + 1000 * (m.window_start_s + 2.0), rel=0.01)  # sent = due


def test_below_capacity_c_slot_server_has_no_queue() -> None:
    stages = [Stage(150, 0, 10)]
    m = stage_metrics(simulate(due_times(stages), SimConfig(slots=2, service_ms=10)), spans(stages)[0])
    assert m.throughput_rps == pytest.approx(150.0, abs=0.2)
    assert abs(m.queue_growth_rps) < 1.0
    assert m.latency_ms["p99"] == pytest.approx(10.0)


def mixed_rows() -> Records:
    """Constant 100 rps; run ended (aborted) at 10.5 s.  Rows 200..999 are due in the window [2, 10)."""
    rec = constant_rows()
    rec.status[:] = 200
    for rows, outcome, status in (
        ([300, 301, 302], Outcome.HTTP_ERROR, 500),
        ([400], Outcome.HTTP_ERROR, 503),
        ([500, 501], Outcome.GRPC_ERROR, 14),
        ([700], Outcome.CONN_REFUSED, 0),
        ([50], Outcome.MALFORMED, 200),  # due before the window: not counted
    ):
        rec.outcome[rows] = outcome
        rec.status[rows] = status
        rec.done[rows] = rec.intended[rows] + 2.0  # answered errors take 2 s: they must stay out of latency
    rec.outcome[600], rec.status[600] = Outcome.TIMEOUT, 0
    rec.done[600] = rec.intended[600] + 1.0  # the timeout fired after 1 s
    rec.outcome[990:995] = Outcome.UNFINISHED
    rec.status[990:995] = 0
    rec.done[990:995] = 10.5
    rec.outcome[995:] = Outcome.NOT_SENT
    rec.status[995:] = 0
    rec.sent[995:] = np.nan
    rec.done[995:] = 10.5
    rec.waited[995:] = True
    # rows 800..809 left 5 ms late because they waited for a free slot, then took the usual 10 ms
    rec.sent[800:810] += 0.005
    rec.done[800:810] += 0.005
    rec.waited[800:810] = True
    return rec


def test_errors_censored_and_late_rows_of_a_stage() -> None:
    rec = mixed_rows()
    m = stage_metrics(rec, spans(HOLD)[0])
    assert m.requests == 800
    assert m.errors == {"http_500": 3, "http_503": 1, "grpc_14": 2, "timeout": 1, "conn_refused": 1}
    assert m.error_rate == pytest.approx(8 / 800)  # unfinished and never-sent rows are not errors
    assert m.censored == 11  # 1 timeout + 5 unfinished + 5 never sent
    assert m.late_fraction == pytest.approx(15 / 800)  # 10 sent > 1 ms late + 5 never sent
    assert m.waited_fraction == pytest.approx(15 / 800)
    # OK completions in [2, 10): rows 199..989 finish in the window (row 199: due 1.995, done 2.005),
    # less the 8 error rows among them
    assert m.throughput_rps == pytest.approx(783 / 8)
    # finished (OK or error) completions in the window, by done time: the 8 errors, and the malformed
    # answer due before the window (0.505 s) that came back inside it (2.505 s)
    assert m.completed_rps == pytest.approx((783 + 8 + 1) / 8)
    # latency: OK rows and censored rows at the time waited so far; answered errors left out
    lat = np.concatenate(
        [
            np.full(772, 0.010),
            np.full(10, 0.015),  # late rows: 5 ms lag + 10 ms service
            [1.0],  # the timeout
            10.5 - rec.intended[990:1000],  # unfinished and never sent: waited until the abort
        ]
    )
    assert m.latency_ms == pct_ms(lat)
    assert m.latency_ms["max"] == 1000.0  # not 2 000 ms: answered errors are not in latency
    assert m.latency_ms["p50"] == 10.0
    # p99 at rank 0.99 * 792 = 784.08: between the 3rd and 4th censored values (525 ms and 535 ms)
    assert m.latency_ms["p99"] == pytest.approx(525.8)
    assert m.service_ms == {"p50": 10.0, "p90": 10.0, "p95": 10.0, "p99": 10.0, "p999": 10.0, "max": 10.0}
    # send lag: 10 of 795 sent rows are 5 ms late; the generator's own lag (rows with a free slot) is nil
    assert m.send_lag_ms == {"p50": 0.0, "p99": 5.0, "max": 5.0}
    assert m.generator_lag_ms == {"p50": 0.0, "p99": 0.0, "max": 0.0}


def test_late_threshold_is_strict() -> None:
    rec = constant_rows()
    rec.sent[200:300] += LATE_S  # exactly at the threshold: on time
    rec.sent[300:310] += LATE_S * 1.5
    m = stage_metrics(rec, spans(HOLD)[0])
    assert m.late_fraction == pytest.approx(10 / 800)


def test_queue_growth_never_counts_rows_the_run_gave_up_on_as_finished() -> None:
    # the second half of the window never left; even with a done time set they stay outstanding
    rec = constant_rows()
    rec.outcome[600:] = Outcome.NOT_SENT
    rec.done[600:] = rec.intended[600:]
    assert queue_growth_rps(rec, 6.0, 10.0) == pytest.approx(100.0, rel=0.02)
    assert abs(queue_growth_rps(rec, 2.0, 5.9)) < 0.5


def test_queue_growth_counts_errors_and_timeouts_as_finished() -> None:
    rec = constant_rows()
    rec.outcome[::2] = Outcome.HTTP_ERROR
    rec.outcome[1::4] = Outcome.TIMEOUT
    assert abs(queue_growth_rps(rec, 2.0, 10.0)) < 0.5


def test_settle_override_and_early_stop_move_the_window() -> None:
    rec = constant_rows()
    sp = spans(HOLD)[0]
    m = stage_metrics(rec, sp, settle=0.0)
    assert (m.window_start_s, m.window_end_s, m.requests) == (0.0, 10.0, 1000)
    m = stage_metrics(rec, sp, until_s=5.0)  # stopped at 5 s: the window is [2, 5)
    assert (m.window_start_s, m.window_end_s, m.requests) == (2.0, 5.0, 300)
    m = stage_metrics(rec, sp, until_s=1.0)  # stopped before the settle ended: the last 2 s, not before the start
    assert (m.window_start_s, m.window_end_s, m.requests) == (0.0, 1.0, 100)
    m = stage_metrics(rec, sp, until_s=20.0)  # a stop after the end changes nothing
    assert (m.window_start_s, m.window_end_s) == (2.0, 10.0)


def test_early_stop_in_a_later_stage_ramp() -> None:
    stages = [Stage(100, 0, 10), Stage(200, 5, 10)]  # stage 1: ramp [10, 15), hold [15, 25)
    sp = spans(stages)[1]
    rec = simulate(due_times(stages), SimConfig(slots=4, service_ms=10))
    m = stage_metrics(rec, sp, until_s=12.0)
    assert (m.window_start_s, m.window_end_s) == (10.0, 12.0)
    # the ramp from 100 to 200 rps over 5 s: 100 t + 10 t^2 requests in its first t seconds
    assert m.requests == pytest.approx(100 * 2 + 10 * 4, abs=1)
    full = stage_metrics(rec, sp)
    assert (full.window_start_s, full.window_end_s) == (17.0, 25.0)
    assert full.offered_rps == pytest.approx(200.0)


def test_stage_without_rows() -> None:
    m = stage_metrics(Records.empty(np.empty(0)), spans(HOLD)[0])
    assert m.requests == 0
    assert (m.offered_rps, m.throughput_rps, m.error_rate, m.late_fraction) == (0.0, 0.0, 0.0, 0.0)
    assert m.latency_ms["p99"] is None
    assert m.queue_growth_rps == 0.0


def test_to_dict_is_plain_data() -> None:
    d = stage_metrics(mixed_rows(), spans(HOLD)[0]).to_dict()
    assert d["errors"]["http_500"] == 3
    assert d["latency_ms"]["max"] == 1000.0
    assert set(d) >= {"offered_rps", "throughput_rps", "queue_growth_rps", "verdict", "reasons"}


# --- intervals ------------------------------------------------------------------------------


def interval_rows() -> Records:
    """10 rps for 3 s (due 0.05, 0.15, ..., 2.95), 1 ms send lag, 20 ms latency, and three odd rows."""
    due = due_times([Stage(10, 0, 3)])
    rec = Records.empty(due)
    rec.sent[:] = due + 0.001
    rec.done[:] = due + 0.020
    rec.outcome[:] = Outcome.OK
    rec.outcome[5], rec.status[5] = Outcome.HTTP_ERROR, 500  # due 0.55, done 0.57
    rec.outcome[12], rec.done[12] = Outcome.TIMEOUT, 1.25 + 1.0  # due 1.25, timed out at 2.25
    rec.outcome[29], rec.done[29] = Outcome.UNFINISHED, 3.5  # due 2.95, aborted at 3.5
    return rec


def test_intervals_count_by_second() -> None:
    rec = interval_rows()
    assert len(rec) == 30
    out = intervals(rec, spans([Stage(10, 0, 3)]))
    # the run clock runs to the last done time (3.5 s): four seconds
    assert [iv.second for iv in out] == [0, 1, 2, 3]
    assert [iv.stage for iv in out] == [0, 0, 0, -1]
    assert [iv.offered for iv in out] == [10, 10, 10, 0]
    assert [iv.throughput for iv in out] == [9, 9, 9, 0]  # OK completions by done time
    assert [iv.errors for iv in out] == [1, 0, 1, 0]  # the 500 at 0.57 s, the timeout at 2.25 s
    # due so far - finished so far, at each second's end: the timeout is outstanding until 2.25 s,
    # the unfinished row forever
    assert [iv.inflight_end for iv in out] == [0, 1, 1, 1]
    assert [iv.send_lag_p99_ms for iv in out] == [pytest.approx(1.0), pytest.approx(1.0), pytest.approx(1.0), None]
    lat = [iv.latency_ms for iv in out]
    assert lat[0] == {"p50": 20.0, "p90": 20.0, "p99": 20.0, "max": 20.0}  # the error row is left out
    assert lat[1]["p50"] == 20.0 and lat[1]["max"] == 1000.0  # the timeout counts at 1 s
    assert lat[2]["p50"] == 20.0 and lat[2]["max"] == pytest.approx(550.0)  # unfinished: 3.5 - 2.95
    assert lat[3] == {"p50": None, "p90": None, "p99": None, "max": None}


def test_intervals_add_up_to_the_totals() -> None:
    stages = [Stage(100, 2, 3), Stage(300, 1, 3)]
    rec = simulate(due_times(stages), SimConfig(slots=2, service_ms=10))  # capacity 200: the end is overloaded
    out = intervals(rec, spans(stages))
    assert sum(iv.offered for iv in out) == len(rec)
    assert sum(iv.throughput for iv in out) == int(np.count_nonzero(rec.ok_mask()))
    assert out[-1].inflight_end == 0
    assert max(iv.inflight_end for iv in out) > 50  # the overloaded stage builds a queue
    # stage 0 covers [0, 5), stage 1 [5, 9); the backlog drains after the plan ended (stage -1)
    assert [iv.stage for iv in out[:10]] == [0] * 5 + [1] * 4 + [-1]
    assert {iv.stage for iv in out[9:]} == {-1}
    assert math.ceil(float(np.nanmax(rec.done))) == len(out)


def test_intervals_keep_a_completion_at_the_last_whole_second() -> None:
    rec = Records.empty(np.array([0.5, 1.5]))
    rec.sent[:] = rec.intended
    rec.done[:] = [0.6, 2.0]  # the second answer lands exactly at the end of the plan
    rec.outcome[:] = Outcome.OK
    out = intervals(rec, spans([Stage(1, 0, 2)]))
    assert sum(iv.throughput for iv in out) == 2
    assert out[-1].inflight_end == 0


def test_intervals_of_no_rows() -> None:
    assert intervals(Records.empty(np.empty(0)), spans(HOLD)) == []
