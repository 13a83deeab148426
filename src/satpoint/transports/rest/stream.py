"""Open Inference Protocol streams over REST: ``POST /v2/models/{m}/infer_stream``, server-sent events.

The same raw HTTP/1.1 pool as :mod:`satpoint.transports.rest.pool` (keep-alive connections, pre-encoded
requests, one request per connection at a time, the same retries and keep-alive hygiene); only the
answer is read differently.  The answer is ``text/event-stream`` (chunked transfer encoding), one event
``data: <json>\\n\\n`` per chunk of the model's answer (MLServer 1.7.1, Triton's ``generate_stream``);
every event with a ``data`` field is a chunk, stamped through
:class:`~satpoint.metrics.stream_records.StreamStamper` at the read that completed it (the events of one
read share that time, and all but the first of a stream count as ``coalesced``).  The request is
done (``Records.done``) when the chunked body ends (its terminator), or when the server closes a
close-delimited answer.

How a stream can end, and its outcome (``metrics.records.Outcome``):

* the body's terminator (or the close that ends a close-delimited answer) after a 2xx head -> ``OK``;
* a non-2xx head -> ``HTTP_ERROR`` (its events, if any, are not chunks);
* the connection closed cleanly (EOF) after a 2xx head but before the terminator -> ``STREAM_BROKEN``
  (MLServer's answer to a model failing mid-stream: it has already sent 200 and can only hang up);
* the connection reset or failed after a 2xx head -> ``STREAM_CUT``; before any answer it is
  ``CONN_RESET`` (or a retry on a reused connection), as for unary requests;
* an event carrying ``"error"`` (Triton reports a failure after the first response that way, under
  status 200) -> ``STREAM_ERROR``, at that event; the connection is dropped (the rest of that stream
  is not read);
* no end within the request timeout (a stream that never ends) -> ``TIMEOUT``; the gap since its last
  chunk is kept as a lower bound (see ``metrics.stream_records``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from satpoint.metrics.records import Outcome
from satpoint.metrics.stream_records import StreamStamper, attach
from satpoint.transports.rest.answer import AnswerHead
from satpoint.transports.rest.pool import RestPool, _Conn

perf = time.perf_counter
_OK, _HTTP_ERROR = int(Outcome.OK), int(Outcome.HTTP_ERROR)
_OPEN_ENDS = (int(Outcome.TIMEOUT), int(Outcome.UNFINISHED))
#: the header a stream request adds (servers that pick their answer's type by it)
ACCEPT_EVENT_STREAM = ("Accept", "text/event-stream")


def stream_path(model: str, version: str | None = None, route: str = "infer_stream") -> str:
    """``/v2/models/{model}[/versions/{version}]/{route}`` (``route``: ``infer_stream`` or ``generate_stream``)."""
    path = f"/v2/models/{model}"
    if version:
        path += f"/versions/{version}"
    return f"{path}/{route}"


def split_events(buf: bytearray) -> list[bytes]:
    """Take the complete events (each ended by a blank line) off the front of ``buf``; the rest stays.

    ``\\r\\n`` line ends are read as ``\\n`` (the SSE grammar allows both)."""
    if b"\r" in buf:
        buf[:] = buf.replace(b"\r\n", b"\n")
    end = buf.rfind(b"\n\n")
    if end < 0:
        return []
    events = bytes(buf[:end]).split(b"\n\n")
    del buf[: end + 2]
    return events


def is_chunk(event: bytes) -> bool:
    """An event with a ``data`` field (comments and empty events are not chunks)."""
    return event.startswith(b"data") or b"\ndata" in event


def is_error_event(event: bytes) -> bool:
    """An event whose data is a JSON object with an ``"error"`` key (Triton's failure after the first response)."""
    if b'"error"' not in event:
        return False
    data = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
    try:
        doc = json.loads(data)
    except ValueError:
        return False
    return isinstance(doc, dict) and "error" in doc


class _StreamConn(_Conn):
    __slots__ = ("buf", "gave_up", "read_at", "stream_ok")

    pool: RestStreamPool

    def __init__(self, pool: RestPool) -> None:
        super().__init__(pool)
        self.buf = bytearray()
        self.stream_ok = False  # a 2xx head arrived: the stream began
        self.gave_up = False  # the answer was given up on (an error event): the rest of it is not read
        self.read_at = 0.0  # when the read being parsed was taken (every chunk of it is stamped then)

    def data_received(self, data: bytes) -> None:
        self.read_at = perf()  # one time per read: events of one read, in several HTTP chunks, share it
        super().data_received(data)

    # httptools callbacks (the parser finds them on the protocol object) ---------------------------------------
    def on_message_begin(self) -> None:
        self.stream_ok = self.gave_up = False
        self.buf.clear()

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        self.stream_ok = 200 <= status < 300

    def on_body(self, body: bytes) -> None:
        idx = self.busy_idx
        if not self.stream_ok or idx < 0:
            return
        buf = self.buf
        buf += body
        if b"\n\n" not in buf and b"\r\n\r\n" not in buf:
            return
        now = self.read_at
        stamp = self.pool._stamp
        for event in split_events(buf):
            if is_chunk(event):
                if is_error_event(event):
                    self.gave_up = True
                    self._finish(int(Outcome.STREAM_ERROR), self.parser.get_status_code())
                    self._drop()
                    return
                stamp.chunk(idx, now)

    def on_message_complete(self) -> None:
        parser = self.parser
        status = parser.get_status_code()
        idx = self.busy_idx
        if self.gave_up:
            return
        if idx < 0 or status < 200:
            self._not_final(idx, status)
            return
        outcome = _OK if status < 300 else _HTTP_ERROR
        last = bytes(self.buf).strip()  # a last event the body ended without its blank line
        if self.stream_ok and is_chunk(last):
            if is_error_event(last):
                outcome = int(Outcome.STREAM_ERROR)
            else:
                self.pool._stamp.chunk(idx, self.read_at)
        self._finish(outcome, status)
        self.idle_since = perf()
        if parser.should_keep_alive():
            self.pool._release(self)
        else:
            self._drop()

    # asyncio.Protocol ----------------------------------------------------------------------------------------
    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy_idx >= 0 and self.stream_ok and self.head is not None:
            if exc is not None:
                self._finish(int(Outcome.STREAM_CUT), 0)
            elif AnswerHead(self.head).ends_at_close:  # a close-delimited answer: the close ends it
                self._finish(_OK, self.parser.get_status_code())
            else:
                self._finish(int(Outcome.STREAM_BROKEN), self.parser.get_status_code())
        super().connection_lost(exc)

    def _finish(self, outcome: int, status: int) -> None:
        idx = self.busy_idx
        if idx >= 0:
            self.pool._stamp.end(idx, perf(), open_gap=outcome in _OPEN_ENDS)
        super()._finish(outcome, status)


class RestStreamPool(RestPool):
    """The REST pool reading server-sent event streams (a :class:`~satpoint.transports.base.HotTransport`);
    it gives ``rec`` stream columns (``Records.stream``) and stamps them."""

    conn_type = _StreamConn

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stamp: StreamStamper = attach(self.rec)

    def rebind(self) -> None:
        super().rebind()
        stamp = getattr(self, "_stamp", None)
        if stamp is not None:
            stamp.rebind()

    def stats(self) -> dict[str, object]:
        return {**super().stats(), "kind": "rest_stream"}
