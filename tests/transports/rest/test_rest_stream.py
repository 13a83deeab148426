"""Server-sent event streams over the raw HTTP/1.1 pool (transports/rest/stream.py), against the scripted
loopback server of test_rest: every way a stream can end gets its outcome, and the chunks that arrived are
stamped in the stream columns."""

from __future__ import annotations

import asyncio
import functools
import time

import numpy as np
import pytest

from satpoint.metrics.records import Outcome, Records
from satpoint.transports.rest.pool import encode_request
from satpoint.transports.rest.stream import (
    RestStreamPool,
    is_chunk,
    is_error_event,
    split_events,
    stream_path,
)
from tests.transports.rest.test_rest import HOST, Conn, on_uvloop, scripted, until

perf = time.perf_counter
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENT = b'data: {"model_name":"m","outputs":[{"name":"o","datatype":"BYTES","shape":[1],"data":["a"]}]}\n\n'
ERROR_EVENT = b'data: {"error": "model failed"}\n\n'
TERMINATOR = b"0\r\n\r\n"


def piece(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


# pure -------------------------------------------------------------------------------------------------------
def test_split_events_keeps_an_unfinished_event_for_later() -> None:
    buf = bytearray(b"data: 1\n\ndata: 2\n\nda")
    assert split_events(buf) == [b"data: 1", b"data: 2"]
    assert buf == bytearray(b"da")
    buf += b"ta: 3\r\n\r\n"  # CRLF line ends read as LF
    assert split_events(buf) == [b"data: 3"]
    assert buf == bytearray()
    assert split_events(bytearray(b"data: 4\n")) == []


def test_chunks_and_error_events() -> None:
    assert is_chunk(b"data: {}") and is_chunk(b"id: 1\ndata: {}")
    assert not is_chunk(b": heartbeat") and not is_chunk(b"event: end")
    assert is_error_event(ERROR_EVENT.strip())
    assert not is_error_event(b'data: {"outputs":[{"name":"error","data":[1]}]}')  # an output named error
    assert not is_error_event(b'data: "error"')  # not an object
    assert stream_path("m") == "/v2/models/m/infer_stream"
    assert stream_path("m", "2", "generate_stream") == "/v2/models/m/versions/2/generate_stream"


# against a scripted server ------------------------------------------------------------------------------------
class StreamClient:
    def __init__(self, port: int, n: int) -> None:
        reqs = [encode_request(HOST, port, stream_path("m"), b'{"inputs":[]}')]
        factory = functools.partial(RestStreamPool, host=HOST, port=port, requests=reqs, max_inflight=1)
        self.rec = Records.empty(np.zeros(n))
        self.pool: RestStreamPool = factory(self.rec, lambda: None)

    def outcome(self, idx: int) -> Outcome:
        return Outcome(int(self.rec.outcome[idx]))


def run_one(script: object, expire_after_s: float | None = None) -> StreamClient:
    """Send one stream request to a server running ``script(conn)`` once the request arrived."""

    def handler(conn: Conn) -> None:
        if conn.read_request() is not None:
            script(conn)  # type: ignore[operator]

    with scripted(handler) as server:

        async def main() -> StreamClient:
            c = StreamClient(server.port, 1)
            assert c.pool.try_send(0, 0)
            if expire_after_s is not None:
                await asyncio.sleep(expire_after_s)
                c.pool.expire(perf(), expire_after_s / 2)
            await until(lambda: c.pool.inflight() == 0)
            await c.pool.close()
            return c

        return on_uvloop(main())  # type: ignore[no-any-return]


def test_a_whole_stream_is_ok_with_every_chunk_and_gap() -> None:
    def script(conn: Conn) -> None:
        conn.send(HEAD + piece(EVENT))
        time.sleep(0.02)
        conn.send(piece(EVENT[:10]))  # an event split across reads is one chunk, stamped when it completes
        time.sleep(0.02)
        conn.send(piece(EVENT[10:] + EVENT) + TERMINATOR)

    c = run_one(script)
    s = c.rec.stream
    assert c.outcome(0) is Outcome.OK and int(c.rec.status[0]) == 200
    assert s is not None and int(s.chunks[0]) == 3
    gaps = s.row_gaps(0)
    assert len(gaps) == 2 and 35_000 <= int(gaps[0]) < 1_000_000 and int(gaps[1]) < 10_000
    assert s.first_s[0] < s.last_s[0] <= c.rec.done[0]


def test_a_last_event_without_its_blank_line_still_counts() -> None:
    c = run_one(lambda conn: conn.send(HEAD + piece(EVENT) + piece(EVENT.strip()) + TERMINATOR))
    assert c.outcome(0) is Outcome.OK
    assert c.rec.stream is not None and int(c.rec.stream.chunks[0]) == 2
    c = run_one(lambda conn: conn.send(HEAD + piece(EVENT) + piece(ERROR_EVENT.strip()) + TERMINATOR))
    assert c.outcome(0) is Outcome.STREAM_ERROR


def test_a_stream_closed_without_its_terminator_is_broken() -> None:
    c = run_one(lambda conn: (conn.send(HEAD + piece(EVENT) + piece(EVENT)), conn.close()))
    assert c.outcome(0) is Outcome.STREAM_BROKEN
    assert c.rec.stream is not None and int(c.rec.stream.chunks[0]) == 2  # what arrived is kept


def test_a_connection_reset_mid_stream_is_cut() -> None:
    def script(conn: Conn) -> None:
        conn.send(HEAD + piece(EVENT))
        time.sleep(0.05)
        conn.reset()

    c = run_one(script)
    assert c.outcome(0) is Outcome.STREAM_CUT
    assert c.rec.stream is not None and int(c.rec.stream.chunks[0]) == 1


def test_an_error_event_is_a_stream_error() -> None:
    c = run_one(lambda conn: conn.send(HEAD + piece(EVENT) + piece(ERROR_EVENT) + piece(EVENT) + TERMINATOR))
    assert c.outcome(0) is Outcome.STREAM_ERROR and int(c.rec.status[0]) == 200
    assert c.rec.stream is not None and int(c.rec.stream.chunks[0]) == 1


def test_a_stream_that_never_ends_times_out_with_its_open_gap() -> None:
    def script(conn: Conn) -> None:
        conn.send(HEAD + piece(EVENT))
        conn.wait_eof()

    c = run_one(script, expire_after_s=0.2)
    s = c.rec.stream
    assert c.outcome(0) is Outcome.TIMEOUT
    assert s is not None and int(s.chunks[0]) == 1
    assert len(s.row_gaps(0)) == 1 and int(s.row_gaps(0)[0]) >= 100_000  # lower bound of the gap under way


@pytest.mark.parametrize("status", [500, 404])
def test_an_error_head_is_an_http_error_without_chunks(status: int) -> None:
    body = b'data: {"error": "no"}\n\n'
    head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    c = run_one(lambda conn: conn.send(head + body))
    assert c.outcome(0) is Outcome.HTTP_ERROR and int(c.rec.status[0]) == status
    assert c.rec.stream is not None and int(c.rec.stream.chunks[0]) == 0


def test_events_that_one_read_carries_are_counted_as_coalesced() -> None:
    def script(conn: Conn) -> None:
        conn.send(HEAD + piece(EVENT))
        time.sleep(0.02)
        conn.send(piece(EVENT * 2) + piece(EVENT) + TERMINATOR)  # one read: their gaps are 0, not the server's

    c = run_one(script)
    s = c.rec.stream
    assert c.outcome(0) is Outcome.OK and s is not None and int(s.chunks[0]) == 4
    assert int(s.coalesced[0]) == 2 and s.row_gaps(0).tolist()[1:] == [0, 0]  # also across HTTP chunks
