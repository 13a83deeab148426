"""A results folder as tables: every request, every streamed gap, every stage, every second.

The run clock of each segment starts at its own zero; every table also gives wall-clock (unix) times,
``*_unix``, so rows join with the server's logs and dashboards.  A segment's clock origin in unix time is
``started_unix`` plus the generator's start lead (``engine.lead``), the convention the server-side analysis
uses when the observer has no monotonic clock to match (within a few milliseconds).

``rows``: one row per request: ``segment``, ``row`` (its index within its segment), ``intended``, ``sent``,
``done`` (seconds on the run clock), the same as ``*_unix``, ``latency_ms`` (from the intended time),
``outcome`` (its name: ``ok``, ``http_error``, ``timeout``...), ``status``, ``waited``, ``retried``, ``model``
(the model's index in a mix, 0 otherwise) and ``model_name``; a streamed run adds ``stream_first``,
``stream_last`` (run clock), ``stream_chunks``, ``stream_max_gap``, ``stream_gaps`` and ``stream_coalesced``.
``stream_gaps``: one row per gap between two chunks: ``segment``, ``row``, ``gap`` (its rank in the stream),
``gap_ms``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from satpoint.engine.lead import start_lead_s
from satpoint.errors import ConfigError
from satpoint.metrics.records import Outcome
from satpoint.metrics.results import Segment
from satpoint.metrics.stream_records import StreamRecords

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped,unused-ignore]

Columns = dict[str, npt.NDArray[Any]]
#: the outcome codes' names, as the ``outcome`` column spells them
OUTCOME_NAMES = [o.name.lower() for o in Outcome]
TABLES = ("rows", "stream_gaps")


def origin_unix(seg: Segment) -> float:
    """The wall-clock (unix) time of ``seg``'s run-clock zero."""
    return seg.started_unix + start_lead_s(int(seg.generator.get("procs", 1) or 1))


def model_names(header: dict[str, Any]) -> list[str]:
    """Row model ``i``'s name (a mix's models, else the one target model)."""
    mix = header.get("mix") or {}
    if mix.get("models"):
        return [str(m) for m in mix["models"]]
    return [str((header.get("target") or {}).get("model") or "")]


def row_columns(segments: Sequence[Segment], header: dict[str, Any]) -> Columns:
    """The ``rows`` table as numpy columns (``outcome`` as its names)."""
    parts: dict[str, list[npt.NDArray[Any]]] = {}
    names = model_names(header)
    streamed = any(seg.records.stream is not None for seg in segments)
    for seg in segments:
        rec, n, origin = seg.records, len(seg.records), origin_unix(seg)
        # a segment whose rows all went to model 0 stores no ``model`` column: its rows are model 0
        model = rec.model if len(rec.model) == n else np.zeros(n, dtype=np.int16)
        cols: Columns = {
            "segment": np.full(n, seg.index, dtype=np.int32),
            "row": np.arange(n, dtype=np.int64),
            "intended": rec.intended,
            "sent": rec.sent,
            "done": rec.done,
            "intended_unix": rec.intended + origin,
            "sent_unix": rec.sent + origin,
            "done_unix": rec.done + origin,
            "latency_ms": (rec.done - rec.intended) * 1000.0,
            "outcome": np.asarray(OUTCOME_NAMES, dtype=object)[rec.outcome.astype(np.int64)],
            "status": rec.status,
            "waited": rec.waited,
            "retried": rec.retried if len(rec.retried) == n else np.zeros(n, dtype=np.bool_),
            "model": model,
            "model_name": np.asarray(names, dtype=object)[np.minimum(model, len(names) - 1)],
        }
        if streamed:
            st = rec.stream or StreamRecords.empty(n)
            sc = st.columns()
            cols |= {
                "stream_first": sc["stream_first"],
                "stream_last": sc["stream_last"],
                "stream_chunks": sc["stream_chunks"],
                "stream_max_gap": sc["stream_max_gap"],
                "stream_gaps": sc["stream_gap_count"],
                "stream_coalesced": sc.get("stream_coalesced", np.zeros(n, dtype=np.int32)),
            }
        for k, v in cols.items():
            parts.setdefault(k, []).append(np.asarray(v))
    if not parts:
        return {}
    return {k: np.concatenate(v) for k, v in parts.items()}


def gap_columns(segments: Sequence[Segment]) -> Columns:
    """The ``stream_gaps`` table: every gap between two chunks of a stream, with its request's segment and row
    (empty columns when nothing streamed)."""
    seg_i, row_i, rank, gap_ms = [], [], [], []
    for seg in segments:
        st = seg.records.stream
        if st is None:
            continue
        sc = st.columns()
        counts = np.asarray(sc["stream_gap_count"], dtype=np.int64)
        starts = np.asarray(sc["stream_gap_start"], dtype=np.int64)
        flat = np.asarray(sc["stream_gaps_us"], dtype=np.float64)
        rows = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        first = np.repeat(starts, counts)
        within = np.arange(len(rows), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        seg_i.append(np.full(len(rows), seg.index, dtype=np.int32))
        row_i.append(rows)
        rank.append(within)
        gap_ms.append(flat[first + within] / 1000.0)

    def cat(xs: list[npt.NDArray[Any]], dtype: type) -> npt.NDArray[Any]:
        return np.concatenate(xs) if xs else np.zeros(0, dtype=dtype)

    return {
        "segment": cat(seg_i, np.int32),
        "row": cat(row_i, np.int64),
        "gap": cat(rank, np.int64),
        "gap_ms": cat(gap_ms, np.float64),
    }


def pandas() -> Any:
    """The pandas module, imported on first use; refused in one line when it is not installed."""
    try:
        import pandas as pd  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise ConfigError("tables need pandas, which is not installed: pip install 'satpoint[export]'") from None
    return pd


def to_pandas(segments: Sequence[Segment], header: dict[str, Any], table: str = "rows") -> pd.DataFrame:
    """One table of the folder as a pandas DataFrame (``rows`` or ``stream_gaps``)."""
    pd = pandas()

    if table == "rows":
        frame = pd.DataFrame(row_columns(segments, header))
        if "outcome" in frame:
            frame["outcome"] = pd.Categorical(frame["outcome"], categories=OUTCOME_NAMES)
        return frame
    if table == "stream_gaps":
        return pd.DataFrame(gap_columns(segments))
    raise ValueError(f"table: one of {', '.join(TABLES)}, got {table!r}")
