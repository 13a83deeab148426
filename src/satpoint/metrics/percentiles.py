"""Percentiles of per-request times in milliseconds: the one implementation behind the stage figures
(``metrics.stats``) and the stream figures (``metrics.stream_stats``)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: the percentiles a stage reports (``max`` besides)
PCTS = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def pct_ms(values_s: npt.NDArray[np.float64], keys: dict[str, float] = PCTS) -> dict[str, float | None]:
    """``keys``' percentiles and the maximum of ``values_s`` (seconds, NaN ignored) in ms to 4 decimals;
    every key None when no value is left."""
    v = values_s[~np.isnan(values_s)]
    if len(v) == 0:
        return {k: None for k in [*keys, "max"]}
    qs = np.percentile(v, list(keys.values()))
    out: dict[str, float | None] = {k: round(float(q) * 1000, 4) for k, q in zip(keys, qs, strict=True)}
    out["max"] = round(float(v.max()) * 1000, 4)
    return out
