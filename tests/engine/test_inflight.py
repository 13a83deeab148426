"""The automatic in-flight cap: enough for the plan's rate at slow latencies, within the fd limit."""

from __future__ import annotations

import resource

from satpoint.engine.inflight import AUTO_MIN, FD_RESERVE, auto_inflight, raise_fd_limit


def test_the_cap_covers_rate_times_a_latency_bound() -> None:
    assert auto_inflight(10, fd_limit=100_000) == AUTO_MIN
    assert auto_inflight(2000, fd_limit=100_000) == 4000  # 2 s bound: a 500 ms server needs 1000
    assert auto_inflight(50, latency_hint_s=8.0, fd_limit=100_000) == 1600  # slow server: 4 x 8 s
    assert auto_inflight(50_000, fd_limit=10_000) == 10_000 - FD_RESERVE


def test_the_soft_file_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY and hard > 256:
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        got = raise_fd_limit()
        now_soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert got == now_soft
        if hard != resource.RLIM_INFINITY:
            assert now_soft >= min(hard, 1 << 20)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
