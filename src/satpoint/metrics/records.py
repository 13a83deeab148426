"""Per-request records: the three timestamps and the outcome of every scheduled request.

Every request the schedule contains gets a row, whether it was sent or not, so nothing is silently
skipped.  Times are seconds on the run's clock (0 = the schedule's origin).  Percentiles are computed
exactly from these rows (no binning), so shards merge exactly by concatenation.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from satpoint.metrics.stream_records import StreamRecords


class Outcome(IntEnum):
    """What became of one request: the ``outcome`` column of the rows (int8 codes; ``Outcome(code).name``, lower
    case, is how ``to_pandas()`` and ``satpoint export`` spell it)."""

    OK = 0
    HTTP_ERROR = 1  # a response with a non-2xx status (status column holds the code)
    TIMEOUT = 2  # no response within --timeout; the connection was dropped
    CONN_REFUSED = 3
    CONN_RESET = 4  # the connection closed or reset before a full response
    MALFORMED = 5  # the response could not be parsed
    UNFINISHED = 6  # still outstanding when the run ended (drain time exhausted)
    NOT_SENT = 7  # never left: still waiting for a free slot when the run ended
    GRPC_ERROR = 8  # a gRPC status other than OK (status column holds the code)
    CONN_ERROR = 9  # any other transport error
    #: the generator could not open a connection for want of its own resources (EMFILE, ENFILE, ENOBUFS:
    #: out of file descriptors or socket buffers): the generator's limit, never the server's
    GENERATOR_RESOURCES = 10
    #: streams (``--stream``; see ``metrics.stream_records``), once the stream began (a 2xx head, a first message):
    #: the server ended it before its end without saying why (REST: the connection closed cleanly without the
    #: chunk terminator, which is how MLServer ends a stream whose model failed mid-way)
    STREAM_BROKEN = 11
    #: the connection (REST) or the HTTP/2 stream (gRPC: RST_STREAM, connection lost) was cut mid-stream
    STREAM_CUT = 12
    #: the server reported an error inside the stream: an SSE event carrying ``"error"`` (Triton), a gRPC
    #: ``error_message`` (Triton) or a non-OK status after at least one message (MLServer)
    STREAM_ERROR = 13


#: outcomes whose latency is only known to be at least (end - intended): censored observations
CENSORED = (Outcome.TIMEOUT, Outcome.UNFINISHED, Outcome.NOT_SENT)
#: errno values of a connect that failed on the generator's side (``GENERATOR_RESOURCES``)
GENERATOR_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS})


def connect_failure(exc: BaseException) -> Outcome:
    """The outcome of a request whose connection could not be opened because of ``exc``."""
    if isinstance(exc, ConnectionRefusedError):
        return Outcome.CONN_REFUSED
    if isinstance(exc, OSError) and exc.errno in GENERATOR_ERRNOS:
        return Outcome.GENERATOR_RESOURCES
    return Outcome.CONN_ERROR


#: outcomes of requests that never got an answer or a failure before the run ended: neither finished nor errors
_UNANSWERED = (Outcome.UNFINISHED, Outcome.NOT_SENT)
ERROR_NAMES = {o: o.name.lower() for o in Outcome}

F64 = npt.NDArray[np.float64]
I8 = npt.NDArray[np.int8]
I32 = npt.NDArray[np.int32]
B1 = npt.NDArray[np.bool_]
I16 = npt.NDArray[np.int16]


@dataclass
class Records:
    """Column arrays, one row per scheduled request, sorted by intended time."""

    intended: F64
    sent: F64  # NaN if never sent
    done: F64  # NaN if never finished (timeout rows hold the time the timeout fired)
    outcome: I8
    status: I32  # HTTP status or gRPC status code; 0 if none
    waited: B1  # True if it had to wait for a free slot (in-flight cap reached)
    #: True if the transport sent it a second time, on a fresh connection or stream, because the first
    #: attempt failed before any byte of an answer arrived (a reused keep-alive connection the server had
    #: just closed, a refused or GOAWAY'd gRPC stream); its latency still counts from ``intended``.
    #: Optional when constructing (all False); folders written before it existed load as all False.
    retried: B1 = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    #: per-request stream columns (first/last chunk, chunks, gaps) when the run streamed (``--stream``), else None;
    #: a stream transport attaches them (``metrics.stream_records.attach``); folders without them load as None
    stream: StreamRecords | None = None

    #: each row's model in a model mix: an index into the results header's ``mix.models``
    #: (``payloads.mix``).  Optional when constructing (all 0); folders written before it existed load as all 0.
    model: I16 = field(default_factory=lambda: np.zeros(0, dtype=np.int16))

    def __post_init__(self) -> None:
        if len(self.model) != len(self.intended):
            if len(self.model):
                raise ValueError(f"model has {len(self.model)} rows, intended {len(self.intended)}")
            self.model = np.zeros(len(self.intended), dtype=np.int16)
        if len(self.retried) != len(self.intended):
            if len(self.retried):
                raise ValueError(f"retried has {len(self.retried)} rows, intended {len(self.intended)}")
            self.retried = np.zeros(len(self.intended), dtype=np.bool_)
        if self.stream is not None and len(self.stream) != len(self.intended):
            raise ValueError(f"stream columns have {len(self.stream)} rows, intended {len(self.intended)}")

    @classmethod
    def empty(cls, intended: F64) -> Records:
        n = len(intended)
        return cls(
            intended=np.asarray(intended, dtype=np.float64),
            sent=np.full(n, np.nan),
            done=np.full(n, np.nan),
            outcome=np.full(n, Outcome.NOT_SENT, dtype=np.int8),
            status=np.zeros(n, dtype=np.int32),
            waited=np.zeros(n, dtype=np.bool_),
            retried=np.zeros(n, dtype=np.bool_),
        )

    def __len__(self) -> int:
        return len(self.intended)

    def columns(self) -> dict[str, npt.NDArray[np.generic]]:
        cols: dict[str, npt.NDArray[np.generic]] = {
            "intended": self.intended,
            "sent": self.sent,
            "done": self.done,
            "outcome": self.outcome,
            "status": self.status,
            "waited": self.waited,
            "retried": self.retried,
        }
        if self.model.any():  # a model mix (a single model's rows are all 0: its folders keep their columns)
            cols["model"] = self.model
        if self.stream is not None:
            cols.update(self.stream.columns())
        return cols

    @classmethod
    def from_columns(cls, cols: dict[str, npt.NDArray[np.generic]]) -> Records:
        return cls(
            intended=np.asarray(cols["intended"], dtype=np.float64),
            sent=np.asarray(cols["sent"], dtype=np.float64),
            done=np.asarray(cols["done"], dtype=np.float64),
            outcome=np.asarray(cols["outcome"], dtype=np.int8),
            status=np.asarray(cols["status"], dtype=np.int32),
            waited=np.asarray(cols["waited"], dtype=np.bool_),
            retried=np.asarray(cols["retried"], dtype=np.bool_) if "retried" in cols else np.zeros(0, dtype=np.bool_),
            model=np.asarray(cols["model"], dtype=np.int16) if "model" in cols else np.zeros(0, dtype=np.int16),
            stream=StreamRecords.from_columns(cols),
        )

    def select(self, rows: npt.NDArray[np.bool_] | npt.NDArray[np.integer[Any]] | slice) -> Records:
        """The rows picked by a boolean mask, an index array (copies) or a slice (views, no copy)."""
        return Records(
            self.intended[rows],
            self.sent[rows],
            self.done[rows],
            self.outcome[rows],
            self.status[rows],
            self.waited[rows],
            self.retried[rows],
            None if self.stream is None else self.stream.select(rows),
            model=self.model[rows],
        )

    def shifted(self, offset_s: float) -> Records:
        """The same rows on a clock shifted by ``offset_s`` (used to lay segments end to end)."""
        return Records(
            self.intended + offset_s,
            self.sent + offset_s,
            self.done + offset_s,
            self.outcome,
            self.status,
            self.waited,
            self.retried,
            None if self.stream is None else self.stream.shifted(offset_s),
            model=self.model,
        )

    @staticmethod
    def merge(parts: list[Records]) -> Records:
        """Exact merge of shards (rows re-sorted by intended time)."""
        if len(parts) == 1:
            return parts[0]
        cat = Records(
            np.concatenate([p.intended for p in parts]),
            np.concatenate([p.sent for p in parts]),
            np.concatenate([p.done for p in parts]),
            np.concatenate([p.outcome for p in parts]),
            np.concatenate([p.status for p in parts]),
            np.concatenate([p.waited for p in parts]),
            np.concatenate([p.retried for p in parts]),
            _merged_streams(parts),
            model=np.concatenate([p.model for p in parts]),
        )
        order = np.argsort(cat.intended, kind="stable")
        return cat.select(order)

    # derived columns ---------------------------------------------------------------------------
    def latency_s(self) -> F64:
        """done - intended (coordinated-omission free)."""
        return self.done - self.intended

    def service_s(self) -> F64:
        return self.done - self.sent

    def send_lag_s(self) -> F64:
        return self.sent - self.intended

    # masks: what counts as OK, censored, finished, an error -----------------------------------
    def ok_mask(self) -> B1:
        """Rows answered successfully (``Outcome.OK``)."""
        ok: B1 = self.outcome == Outcome.OK
        return ok

    def censored_mask(self) -> B1:
        """Rows whose latency is only a lower bound (``CENSORED``: timed out, unfinished, never sent).

        Their ``done`` column holds the time they had waited until (the timeout, the abort or the
        end of the run), so ``latency_s()`` gives how long they had waited so far.
        """
        return np.isin(self.outcome, CENSORED)

    def finished_mask(self) -> B1:
        """Rows that finished, successfully or not: ``done`` is set and the outcome is neither
        ``UNFINISHED`` nor ``NOT_SENT`` (whose ``done`` only marks when the run gave up on them).

        Timeouts count as finished at the time the timeout fired.
        """
        return ~np.isnan(self.done) & ~np.isin(self.outcome, _UNANSWERED)

    def error_mask(self) -> B1:
        """Rows that count as errors: any outcome but ``OK``, ``UNFINISHED`` and ``NOT_SENT``.

        Timeouts are errors (and also censored in latency); requests the run ended before answering
        (unfinished, never sent) are not.
        """
        err: B1 = (self.outcome != Outcome.OK) & ~np.isin(self.outcome, _UNANSWERED)
        return err

    def latency_mask(self) -> B1:
        """Rows that count in latency percentiles: OK plus censored (``ok_mask() | censored_mask()``).

        Answered errors are left out: they are counted in the error rate and by class instead.
        """
        return self.ok_mask() | self.censored_mask()


def _merged_streams(parts: list[Records]) -> StreamRecords | None:
    """The stream columns of shards laid end to end (a shard without them gets empty ones), or None if none has any."""
    if all(p.stream is None for p in parts):
        return None
    return StreamRecords.concat([p.stream if p.stream is not None else StreamRecords.empty(len(p)) for p in parts])
