"""Stage metrics and verdicts against the offline twin of the simulator (known queueing behaviour)."""

import numpy as np
import pytest

from satpoint.analysis.search.holds import profile_stages
from satpoint.analysis.search.verdicts import apply
from satpoint.config import FindOptions, VerdictRules
from satpoint.engine.schedule import due_times
from satpoint.metrics.records import Outcome, Records
from satpoint.metrics.stats import stage_metrics
from satpoint.plan import Stage, spans
from satpoint.servers.sim.model import LOGNORMAL_SIGMA, SimConfig
from satpoint.servers.sim.offline import simulate

RULES = VerdictRules()


def judged(rec: Records, stages: list[Stage], i: int = -1, rules: VerdictRules = RULES):  # type: ignore[no-untyped-def]
    return apply(stage_metrics(rec, spans(stages)[i]), rules)


def test_below_capacity_is_stable_with_service_time_latency() -> None:
    cfg = SimConfig(slots=4, service_ms=10)  # capacity 400 rps
    stages = [Stage(300, 2, 10)]
    m = judged(simulate(due_times(stages), cfg), stages)
    assert m.verdict == "stable", m.reasons
    assert m.offered_rps == pytest.approx(300, rel=0.01)
    assert m.throughput_rps == pytest.approx(300, rel=0.01)
    assert m.latency_ms["p50"] == pytest.approx(10, abs=0.01)
    assert m.latency_ms["p99"] == pytest.approx(10, abs=0.01)
    assert abs(m.queue_growth_rps) < 1


def test_overload_is_saturated_and_throughput_is_capacity() -> None:
    cfg = SimConfig(slots=4, service_ms=10)
    stages = [Stage(600, 0, 10)]
    m = judged(simulate(due_times(stages), cfg), stages)
    assert m.verdict == "saturated"
    assert m.throughput_rps == pytest.approx(400, rel=0.02)
    assert m.queue_growth_rps == pytest.approx(200, rel=0.05)  # the queue grows at offered - capacity
    assert m.latency_trend_ms_per_s > 100  # latency grows with time


@pytest.mark.parametrize("dist", ["exp", "lognormal"])
def test_poisson_below_capacity_is_stable_and_above_is_saturated(dist: str) -> None:
    cfg = SimConfig(slots=8, service_ms=10, dist=dist, seed=3)  # type: ignore[arg-type]
    for rate, verdict in ((600, "stable"), (880, "saturated")):
        stages = [Stage(rate, 0, 30)]
        m = judged(simulate(due_times(stages, "poisson", seed=1), cfg), stages)
        assert m.verdict == verdict, (rate, m.reasons, m.queue_growth_rps)


def test_mm1_mean_wait_matches_queueing_theory() -> None:
    # M/M/1 at rho = 0.5: mean time in system = S / (1 - rho) = 2 S
    cfg = SimConfig(slots=1, service_ms=10, dist="exp", seed=11)
    stages = [Stage(50, 0, 400)]
    rec = simulate(due_times(stages, "poisson", seed=5), cfg)
    m = stage_metrics(rec, spans(stages)[0])
    lat = rec.latency_s()[rec.intended > m.window_start_s]
    assert float(np.mean(lat)) == pytest.approx(0.020, rel=0.08)


def test_pauses_show_in_intended_latency_not_service_time() -> None:
    cfg = SimConfig(slots=200, service_ms=5, pause_every_s=4, pause_s=1)
    stages = [Stage(200, 0, 40)]
    rec = simulate(due_times(stages), cfg)
    m = judged(rec, stages)
    assert 850 < m.latency_ms["p99"] < 1010
    assert m.latency_ms["p50"] == pytest.approx(5, abs=0.1)
    lat = rec.latency_s()
    assert 0.2 < np.mean(lat > 0.05) < 0.3  # about a quarter delayed


def test_errors_make_a_stage_failing() -> None:
    cfg = SimConfig(slots=4, service_ms=5, error_rate=0.05)
    stages = [Stage(100, 0, 10)]
    m = judged(simulate(due_times(stages), cfg), stages)
    assert m.verdict == "failing"
    assert m.errors == {"http_500": pytest.approx(m.requests * 0.05, rel=0.3)}
    assert m.error_rate == pytest.approx(0.05, rel=0.3)


def test_generator_lag_is_flagged_loudly() -> None:
    cfg = SimConfig(slots=50, service_ms=5)
    stages = [Stage(200, 0, 10)]
    rec = simulate(due_times(stages), cfg)
    rec.sent = rec.intended + 0.02  # the generator left every request 20 ms late with free slots
    rec.done = rec.done + 0.02
    m = judged(rec, stages)
    assert m.verdict == "generator_limited"
    assert "not the server's" in m.reasons[0]
    assert m.late_fraction == 1.0


def test_waiting_for_a_slot_counts_as_saturation_not_generator() -> None:
    cfg = SimConfig(slots=50, service_ms=5)
    stages = [Stage(200, 0, 10)]
    rec = simulate(due_times(stages), cfg)
    rec.waited[::10] = True
    rec.sent[::10] += 0.05
    m = judged(rec, stages)
    assert m.verdict == "saturated"
    assert any("in-flight cap" in r for r in m.reasons)


def test_censored_requests_count_in_latency() -> None:
    cfg = SimConfig(slots=50, service_ms=5)
    stages = [Stage(100, 0, 10)]
    rec = simulate(due_times(stages), cfg)
    last = len(rec) - 20
    rec.outcome[last:] = Outcome.UNFINISHED
    rec.done[last:] = rec.intended[-1] + 5.0  # aborted 5 s after the last due time
    m = stage_metrics(rec, spans(stages)[0])
    assert m.censored == 20
    assert m.latency_ms["max"] > 4000


def test_slo_violation() -> None:
    cfg = SimConfig(slots=4, service_ms=10)
    stages = [Stage(100, 0, 10)]
    m = judged(simulate(due_times(stages), cfg), stages, rules=VerdictRules(slo_ms={"p99": 5.0}))
    assert m.verdict == "slo_violated"


# the generator's own limits and slow servers ------------------------------------------------------------------
def test_waiting_for_connections_while_the_server_is_fast_is_client_limited() -> None:
    from satpoint.analysis.summary.build import with_service_baseline
    from satpoint.servers.sim.offline import simulate

    stages = [Stage(100, 2, 10), Stage(1500, 2, 10)]  # 1000 slots x 500 ms: capacity 2000 rps
    cfg = SimConfig(slots=1000, service_ms=500)
    rec = simulate(due_times(stages), cfg, max_inflight=256)
    ms = [stage_metrics(rec, sp) for sp in spans(stages)]
    rules = with_service_baseline(VerdictRules(), ms)
    assert rules.baseline_service_ms == pytest.approx(500.0)
    low, high = (apply(m, rules) for m in ms)
    assert low.verdict == "stable"
    assert high.verdict == "client_limited" and "about 750 requests in flight" in high.reasons[0]
    # a server that queues behind the same cap is saturated: its own answer time grew
    small = simulate(due_times([Stage(100, 2, 10), Stage(600, 2, 10)]), SimConfig(slots=4, service_ms=10), 0.0, 64)
    ms2 = [stage_metrics(small, sp) for sp in spans([Stage(100, 2, 10), Stage(600, 2, 10)])]
    rules2 = with_service_baseline(VerdictRules(), ms2)
    assert apply(ms2[1], rules2).verdict == "saturated"


@pytest.mark.parametrize("latency_ms", [2000.0, 4000.0, 8000.0])
@pytest.mark.parametrize("load", [0.2, 0.5, 0.9])
def test_slow_servers_below_capacity_are_stable(latency_ms: float, load: float) -> None:
    # capacity 50 rps whatever the latency; after a 2 s ramp the outstanding count takes one latency to
    # fill (Little's law), which an earlier window caught and read as a growing queue
    cfg = SimConfig(slots=int(50 * latency_ms / 1000), service_ms=latency_ms)
    stages = [Stage(50 * load, 2, max(12.0, 3 * latency_ms / 1000))]
    m = apply(stage_metrics(simulate(due_times(stages), cfg), spans(stages)[0]), VerdictRules())
    assert m.verdict == "stable", m.reasons
    assert m.window_start_s >= 2 + 1.5 * latency_ms / 1000 - 1e-9 or m.window_start_s >= 2 + 0.6 * stages[0].hold_s


@pytest.mark.parametrize("latency_ms", [2000.0, 8000.0])
def test_slow_servers_above_capacity_are_still_saturated(latency_ms: float) -> None:
    cfg = SimConfig(slots=int(50 * latency_ms / 1000), service_ms=latency_ms)
    stages = [Stage(60, 2, max(12.0, 3 * latency_ms / 1000))]
    m = apply(stage_metrics(simulate(due_times(stages), cfg), spans(stages)[0]), VerdictRules())
    assert m.verdict == "saturated", m


# slow servers: the requests due in a window, followed until they finish -------------------------------------
def profile_like(capacity_rps: float, slots: int, service_ms: float, dist: str, seed: int) -> list:  # type: ignore[type-arg]
    """The profile sequence ``find`` holds at 50/80/90/100 % of ``capacity_rps`` for a server whose probe
    saw its median latency, each stage judged."""
    median_s = service_ms / 1000 * (np.exp(-(LOGNORMAL_SIGMA**2) / 2) if dist == "lognormal" else 1.0)
    stages = profile_stages(FindOptions(), capacity_rps, median_s)
    cfg = SimConfig(slots=slots, service_ms=service_ms, dist=dist, seed=seed)  # type: ignore[arg-type]
    rec = simulate(due_times(stages, "constant", seed=seed), cfg)
    return [apply(stage_metrics(rec, sp), RULES) for sp in spans(stages)]


def test_a_slow_heavy_tailed_server_well_below_capacity_is_stable() -> None:
    # 40 slots x lognormal 2.5 s (16 rps): a profile at 50 % and 80 % of 16.8 rps.  Completions counted inside
    # a window a few latencies long lag the requests due in it by chance and by the tail (a 50 % stage was
    # judged saturated by "completions 7.8/s lag due requests 8.4/s"); the requests due in it all finish
    for seed in range(40):
        low, mid = profile_like(16.8, 40, 2500.0, "lognormal", seed)[:2]
        assert low.verdict == "stable" and mid.verdict == "stable", (seed, low.reasons, mid.reasons)
        assert low.due_finished_rps == pytest.approx(low.offered_rps)


def test_requests_the_run_gave_up_on_make_a_stage_saturated() -> None:
    # a 2.5 s server whose last requests were cut by a 1 s drain: the requests due in the window did not
    # all finish (those due in its last seconds were still unanswered when the run gave up on them)
    stages = [Stage(8.0, 2.0, 15.0)]
    rec = simulate(due_times(stages), SimConfig(slots=40, service_ms=2500.0))
    gave_up = rec.done > stages[0].duration_s + 1.0
    rec.outcome[gave_up] = Outcome.UNFINISHED
    rec.done[gave_up] = stages[0].duration_s + 1.0
    m = judged(rec, stages)
    assert m.verdict == "saturated" and any("still unanswered" in r for r in m.reasons), m.reasons
    assert m.due_finished_rps == pytest.approx(
        m.offered_rps * (1 - 1.5 / (m.window_end_s - m.window_start_s)), rel=0.05
    )


@pytest.mark.parametrize("load", [1.02, 1.05, 1.1])
def test_a_slow_server_just_past_capacity_is_saturated_by_its_latency_trend(load: float) -> None:
    # 8 slots x 8 s (1 rps): 2-10 % past capacity the queue grows by one or two requests in the window, too
    # few for the outstanding-count rule; the latency of the requests due in it rises steadily
    stages = [Stage(load, 2.0, 48.0)]
    m = judged(simulate(due_times(stages), SimConfig(slots=8, service_ms=8000.0)), stages)
    assert m.verdict == "saturated", m.reasons
    assert any("slower than" in r for r in m.reasons)
    assert m.latency_trend_ms_per_s == pytest.approx((load - 1) * 1000, rel=0.1)  # r/C - 1 s per s


@pytest.mark.parametrize("load", [0.5, 0.9, 0.95, 1.0])
def test_a_slow_server_at_or_below_capacity_has_no_latency_trend(load: float) -> None:
    stages = [Stage(load, 2.0, 48.0)]
    m = judged(simulate(due_times(stages), SimConfig(slots=8, service_ms=8000.0)), stages)
    assert m.verdict == "stable", m.reasons


def test_a_latency_trend_within_its_noise_is_not_a_queue() -> None:
    # the same rise, once steady and once as noise about a flat latency: only the first is a queue
    stages = [Stage(20.0, 0.0, 20.0)]
    due = due_times(stages)
    steady = Records.empty(due)
    steady.sent[:] = due
    steady.outcome[:] = Outcome.OK
    steady.status[:] = 200
    noisy = Records.empty(due)
    noisy.sent[:] = due
    noisy.outcome[:] = Outcome.OK
    noisy.status[:] = 200
    rng = np.random.default_rng(1)
    steady.done[:] = due + 1.0 + 0.05 * due
    noisy.done[:] = due + rng.lognormal(0.0, 1.5, len(due))
    s = stage_metrics(steady, spans(stages)[0])
    n = stage_metrics(noisy, spans(stages)[0])
    assert s.latency_trend_se_ms_per_s < 1.0 and n.latency_trend_se_ms_per_s > 5.0
    no_queue = VerdictRules(queue_growth_frac=1e9)  # judge the trend alone
    assert apply(s, no_queue).verdict == "saturated"
    n.latency_trend_ms_per_s = s.latency_trend_ms_per_s
    assert apply(n, no_queue).verdict == "stable", n.reasons


def test_a_send_a_few_tens_of_ms_late_is_nothing_to_a_slow_server() -> None:
    # a descheduled generator (80 ms late once in a while) made a 2.5 s server's stage generator_limited
    stages = [Stage(8.0, 2.0, 26.0)]
    slow = judged(simulate(due_times(stages), SimConfig(slots=40, service_ms=2500.0)), stages)
    fast_stages = [Stage(100.0, 2.0, 10.0)]
    fast = judged(simulate(due_times(fast_stages), SimConfig(slots=4, service_ms=10.0)), fast_stages)
    for m in (slow, fast):
        m.generator_lag_ms = {"p50": 0.1, "p99": 80.0, "max": 200.0}
    assert apply(slow, RULES).verdict == "stable", slow.reasons
    assert apply(fast, RULES).verdict == "generator_limited"
    slow.generator_lag_ms = {"p50": 0.1, "p99": 200.0, "max": 400.0}  # 8 % of its 2.5 s: too late
    assert apply(slow, RULES).verdict == "generator_limited"
