"""The tolerances ``satpoint diff`` judges a change against: what size of change matters, per metric."""

from __future__ import annotations

#: the default tolerance: a change smaller than 5 % does not matter
DEFAULT_TOLERANCE = 0.05
#: the default tolerance of tail latency (p90, p99 of latency and service time): on a shared machine the tails
#: of two runs of one server differ by 15-20 % at low load (A/A pairs on the sim, benchmarks/RESULTS.md)
#: while p50 and the saturation point hold within 5 %
DEFAULT_TAIL_TOLERANCE = 0.20
#: the metrics ``--tail-tolerance`` applies to (the rest use ``--tolerance``; the error rate its own)
TAIL_METRICS = ("latency_p90_ms", "latency_p99_ms", "service_p90_ms", "service_p99_ms")
#: the tails of streamed answers (``--stream``: time to first chunk, gaps between chunks), judged as ``TAIL_METRICS``
STREAM_TAIL_METRICS = ("ttfc_p99_ms", "gap_p99_ms")
ALL_TAIL_METRICS = (*TAIL_METRICS, *STREAM_TAIL_METRICS)
#: error rates are compared in absolute terms: a change of less than 0.5 percentage points does not matter
DEFAULT_ERROR_TOLERANCE = 0.005


def tolerance_for(metric: str, tolerance: float, tail_tolerance: float) -> float:
    """The tolerance a relative metric is judged with: ``tail_tolerance`` for ``TAIL_METRICS`` and
    ``STREAM_TAIL_METRICS``."""
    return tail_tolerance if metric in ALL_TAIL_METRICS else tolerance
