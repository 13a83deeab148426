"""gRPC ModelStreamInfer: the message decoders and every way a stream ends, frame by frame.

The server's frames are fed straight into a connection of the stream pool (a fake asyncio transport
records what the client writes), so each case is exact and takes milliseconds: no socket, no server.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hpack import Encoder

from satpoint.metrics.records import Outcome, Records
from satpoint.transports.grpc import wire as gw
from satpoint.transports.grpc.codec import encode_infer_request, grpc_frame
from satpoint.transports.grpc.grpc_proto import message, method_path
from satpoint.transports.grpc.stream import (
    GrpcStreamPool,
    TritonMessage,
    _StreamConn,
    stream_outcome,
    triton_stream_message,
)

MSG = encode_infer_request({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}, "m")


def _response(text: str = "a", final: bool | None = None) -> bytes:
    resp = message("ModelInferResponse")(model_name="m", id="1")
    if text:
        out = resp.outputs.add(name="text", datatype="BYTES", shape=[1])
        out.contents.bytes_contents.append(text.encode())
    if final is not None:
        resp.parameters["triton_final_response"].bool_param = final
    data: bytes = resp.SerializeToString()
    return data


def _triton(error: str = "", response: bytes | None = None) -> bytes:
    """A ModelStreamInferResponse, encoded by hand (field 1: error_message, field 2: infer_response)."""
    out = b""
    if error:
        raw = error.encode()
        out += b"\x0a" + bytes([len(raw)]) + raw
    if response is not None:
        out += b"\x12" + _len(len(response)) + response
    return out


def _len(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Wire:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return None


class _Server:
    """The server side of one connection: HPACK state and frame builders."""

    def __init__(self, conn: _StreamConn) -> None:
        self.conn = conn
        self.enc = Encoder()

    def send(self, *frames: bytes) -> None:
        self.conn.data_received(b"".join(frames))

    def head(self, sid: int) -> bytes:
        return gw.frame(gw.HEADERS, gw.END_HEADERS, sid, self.enc.encode([(":status", "200")]))

    def trailers(self, sid: int, status: int = 0) -> bytes:
        block = self.enc.encode([("grpc-status", str(status)), ("grpc-message", "boom" if status else "")])
        return gw.frame(gw.HEADERS, gw.END_HEADERS | gw.END_STREAM, sid, block)


def _run(
    body: Callable[[GrpcStreamPool, _Server], None], *, decoder: str = "mlserver", n: int = 1
) -> tuple[Records, GrpcStreamPool]:
    async def main() -> tuple[Records, GrpcStreamPool]:
        rec = Records.empty(np.zeros(n))
        pool = GrpcStreamPool(rec, lambda: None, "127.0.0.1", 1, [MSG], 8, decoder=decoder, connections=1)  # type: ignore[arg-type]
        conn = _StreamConn(pool)
        conn.transport = _Wire()  # type: ignore[assignment]
        conn.connected = True
        pool._conns.append(conn)
        for i in range(n):
            assert pool.try_send(i, 0)
        body(pool, _Server(conn))
        return rec, pool

    return asyncio.run(main())


def _stream(rec: Records) -> Any:
    assert rec.stream is not None
    return rec.stream


# decoders ------------------------------------------------------------------------------------------------------
def test_triton_messages_decode_error_outputs_and_the_final_flag() -> None:
    assert triton_stream_message(_triton(response=_response("x", final=False))) == TritonMessage("", True, False)
    assert triton_stream_message(_triton(response=_response("", final=True))) == TritonMessage("", False, True)
    assert triton_stream_message(_triton(response=_response("x"))) == TritonMessage("", True, None)
    assert triton_stream_message(_triton(error="model gone")) == TritonMessage("model gone", False, None)
    with pytest.raises(ValueError):
        triton_stream_message(b"\x12\x05ab")  # a length beyond the message


def test_the_request_goes_to_model_stream_infer_and_half_closes() -> None:
    def body(pool: GrpcStreamPool, server: _Server) -> None:
        wire = b"".join(server.conn.transport.written)  # type: ignore[union-attr]
        assert method_path("ModelStreamInfer").encode() in wire
        assert wire.endswith(grpc_frame(MSG))
        assert wire[-len(grpc_frame(MSG)) - 9 + 4] & gw.END_STREAM  # DATA flags: END_STREAM

    _run(body)


def test_mlserver_messages_are_chunks_whatever_the_frames_cut() -> None:
    def body(pool: GrpcStreamPool, server: _Server) -> None:
        one, two, three = (grpc_frame(_response(c)) for c in "abc")
        server.send(server.head(1), gw.frame(gw.DATA, 0, 1, one[:3]))  # a message cut inside its prefix
        server.send(gw.frame(gw.DATA, 0, 1, one[3:] + two[:-2]))
        server.send(gw.frame(gw.DATA, 0, 1, two[-2:] + three), server.trailers(1))

    rec, pool = _run(body)
    s = _stream(rec)
    assert rec.outcome[0] == Outcome.OK and s.chunks[0] == 3
    assert rec.sent[0] <= s.first_s[0] <= s.last_s[0] <= rec.done[0]
    assert len(s.row_gaps(0)) == 2 and pool.stats()["kind"] == "grpc_stream"


def test_a_non_ok_status_after_chunks_is_a_stream_error_and_before_them_a_grpc_error() -> None:
    def body(pool: GrpcStreamPool, server: _Server) -> None:
        server.send(server.head(1), gw.frame(gw.DATA, 0, 1, grpc_frame(_response())), server.trailers(1, 13))
        server.send(server.head(3), server.trailers(3, 5))

    rec, _ = _run(body, n=2)
    assert rec.outcome.tolist() == [Outcome.STREAM_ERROR, Outcome.GRPC_ERROR]
    assert rec.status.tolist() == [13, 5]
    assert _stream(rec).chunks.tolist() == [1, 0]


def test_a_reset_stream_or_a_lost_connection_after_chunks_is_a_cut_stream() -> None:
    def body(pool: GrpcStreamPool, server: _Server) -> None:
        chunk = grpc_frame(_response())
        server.send(server.head(1), gw.frame(gw.DATA, 0, 1, chunk), gw.frame(gw.RST_STREAM, 0, 1, struct.pack(">I", 2)))
        server.send(server.head(3), gw.frame(gw.DATA, 0, 3, chunk))
        server.conn.connection_lost(ConnectionResetError())

    rec, _ = _run(body, n=3)
    assert rec.outcome.tolist() == [Outcome.STREAM_CUT, Outcome.STREAM_CUT, Outcome.CONN_RESET]
    assert _stream(rec).chunks.tolist() == [1, 1, 0]


def test_a_stream_ended_without_trailers_or_inside_a_message_is_broken() -> None:
    def body(pool: GrpcStreamPool, server: _Server) -> None:
        chunk = grpc_frame(_response())
        server.send(server.head(1), gw.frame(gw.DATA, gw.END_STREAM, 1, chunk))
        server.send(server.head(3), gw.frame(gw.DATA, 0, 3, chunk + chunk[:4]), server.trailers(3))

    rec, _ = _run(body, n=2)
    assert rec.outcome.tolist() == [Outcome.STREAM_BROKEN, Outcome.STREAM_BROKEN]


def test_a_stream_that_never_ends_times_out_with_its_chunks_and_the_gap_under_way() -> None:
    def body(pool: GrpcStreamPool, server: _Server) -> None:
        server.send(server.head(1), gw.frame(gw.DATA, 0, 1, grpc_frame(_response()) * 2))
        pool.expire(float(pool.rec.sent[0]) + 5.0, 1.0)
        assert b"".join(server.conn.transport.written).endswith(  # type: ignore[union-attr]
            gw.frame(gw.RST_STREAM, 0, 1, struct.pack(">I", gw.RST_CANCEL))
        )

    rec, _ = _run(body)
    s = _stream(rec)
    assert rec.outcome[0] == Outcome.TIMEOUT and s.chunks[0] == 2
    gaps = s.row_gaps(0)
    assert len(gaps) == 2 and gaps[-1] >= 4_000_000  # the open gap: ~5 s after the last chunk


def test_triton_errors_empty_final_responses_and_missing_finals() -> None:
    def body(pool: GrpcStreamPool, server: _Server) -> None:
        chunk = grpc_frame(_triton(response=_response("a", final=False)))
        final = grpc_frame(_triton(response=_response("", final=True)))
        err = grpc_frame(_triton(error="out of memory"))
        server.send(server.head(1), gw.frame(gw.DATA, 0, 1, chunk * 2 + final), server.trailers(1))
        server.send(server.head(3), gw.frame(gw.DATA, 0, 3, chunk + err), server.trailers(3))
        server.send(server.head(5), gw.frame(gw.DATA, 0, 5, err), server.trailers(5))
        server.send(server.head(7), gw.frame(gw.DATA, 0, 7, chunk), server.trailers(7))

    rec, pool = _run(body, decoder="triton", n=4)
    assert rec.outcome.tolist() == [Outcome.OK, Outcome.STREAM_ERROR, Outcome.GRPC_ERROR, Outcome.STREAM_BROKEN]
    assert _stream(rec).chunks.tolist() == [2, 1, 0, 1]
    assert rec.status[2] == 2 and pool.stats()["decoder"] == "triton"


def test_the_run_giving_up_keeps_the_gap_under_way_and_is_not_a_cut() -> None:
    def body(pool: GrpcStreamPool, server: _Server) -> None:
        server.send(server.head(1), gw.frame(gw.DATA, 0, 1, grpc_frame(_response())))
        pool.abort_all(Outcome.UNFINISHED)

    rec, _ = _run(body)
    assert rec.outcome[0] == Outcome.UNFINISHED and len(_stream(rec).row_gaps(0)) == 1


def test_outcome_rules() -> None:
    assert stream_outcome(Outcome.OK, 0, 3) == (Outcome.OK, 0)
    assert stream_outcome(Outcome.TIMEOUT, 0, 3) == (Outcome.TIMEOUT, 0)
    assert stream_outcome(Outcome.CONN_RESET, 0, 0) == (Outcome.CONN_RESET, 0)
    assert stream_outcome(Outcome.CONN_RESET, 0, 2) == (Outcome.STREAM_CUT, 0)
    assert stream_outcome(Outcome.OK, 0, 0, error="x") == (Outcome.GRPC_ERROR, 2)


# the gRPC sim's ModelStreamInfer, in process -------------------------------------------------------------------
def _sim_streams(error_rate: float, models: list[str]) -> tuple[Records, list[float]]:
    from satpoint.servers.sim.grpc_server import SimConfig, serve

    config = SimConfig(
        port=0, slots=4, model="sim", error_rate=error_rate, stream_first_ms=4.0, stream_gap_ms=2.0, stream_chunks=3
    )

    async def main() -> tuple[Records, list[float]]:
        stop = asyncio.Event()
        listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        server = asyncio.create_task(
            serve(config, stop=stop, handle_signals=False, on_listening=lambda h, p: listening.set_result(p))
        )
        port = await asyncio.wait_for(listening, 10)
        msgs = [
            encode_infer_request(
                {"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}, m
            )
            for m in models
        ]
        rec = Records.empty(np.zeros(len(models)))
        pool = GrpcStreamPool(rec, lambda: None, "127.0.0.1", port, msgs, 8, connections=1)
        await pool.prepare(1)
        for i in range(len(models)):
            assert pool.try_send(i, i)
        end = asyncio.get_running_loop().time() + 5
        while pool.inflight() and asyncio.get_running_loop().time() < end:
            await asyncio.sleep(0.002)
        await pool.close()
        stop.set()
        await server
        stream = rec.stream
        assert stream is not None
        return rec, (stream.first_s - rec.sent).tolist()

    return asyncio.run(main())


def test_the_sim_streams_its_chunks_at_the_shared_offsets_and_fails_mid_stream() -> None:
    rec, ttfc = _sim_streams(0.0, ["sim", "other"])
    assert rec.outcome.tolist() == [Outcome.OK, Outcome.GRPC_ERROR] and rec.status[1] == 5  # NOT_FOUND
    assert _stream(rec).chunks.tolist() == [3, 0]
    assert ttfc[0] >= 0.004 and _stream(rec).last_s[0] - rec.sent[0] >= 0.008  # never early (4 ms + 2 x 2 ms)
    failed, _ = _sim_streams(1.0, ["sim"])
    assert failed.outcome[0] == Outcome.STREAM_ERROR and failed.status[0] == 13
    assert _stream(failed).chunks[0] == 2  # the last chunk's place taken by INTERNAL


@pytest.mark.slow
def test_mlserver_streams_textgen_over_model_stream_infer_one_request_per_stream() -> None:
    from satpoint.servers.mlserver.server import MLServerSettings, MLServerTarget
    from satpoint.transports.grpc.stream import stream_once

    with MLServerTarget(MLServerSettings(demo_model="textgen", max_tokens=6, input_len=5)) as server:
        host, port = server.grpc_address.rsplit(":", 1)
        doc = {"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 5], "data": [0.1, 0.2, 0.3, 0.4, 0.5]}]}
        answer = stream_once(host, int(port), encode_infer_request(doc, "textgen"), timeout_s=10)
        missing = stream_once(host, int(port), encode_infer_request(doc, "nope"), timeout_s=10)
    assert (answer.outcome, answer.chunks) == (Outcome.OK, 6)  # bare ModelInferResponse messages, one per character
    assert answer.first_s is not None and answer.done_s is not None and answer.first_s <= answer.done_s
    assert missing.outcome == Outcome.GRPC_ERROR and missing.chunks == 0


def test_a_stream_target_probes_its_service_time_with_whole_streams() -> None:
    import threading

    from satpoint.endpoints.grpc import GrpcFactoryBuilder
    from satpoint.servers.sim.grpc_server import SimConfig, serve
    from satpoint.transports.grpc.grpc_control import GrpcTarget

    config = SimConfig(port=0, slots=2, model="sim", stream_first_ms=4.0, stream_gap_ms=2.0, stream_chunks=3)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ports: list[int] = []
    ready = threading.Event()

    def on_listening(host: str, port: int) -> None:
        ports.append(port)
        ready.set()

    thread = threading.Thread(
        target=loop.run_until_complete,
        args=(serve(config, stop=stop, handle_signals=False, on_listening=on_listening),),
    )
    thread.start()
    try:
        assert ready.wait(10)
        doc = {"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}
        builder = GrpcFactoryBuilder(
            GrpcTarget("127.0.0.1", ports[0]), (encode_infer_request(doc, "sim"),), 4, (), stream=True
        )
        took = builder.probe_service_s(3)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
    assert took is not None and 0.008 <= took < 1.0  # the whole stream: 4 ms + 2 x 2 ms, never less


def test_a_message_over_many_frames_is_reassembled_in_one_growing_buffer() -> None:
    """A 300 KB message in 1 000-byte DATA frames (a frame holding the end of one message and the start of
    the next): both messages come out whole, and the incomplete one waits in the same buffer from frame to
    frame, grown in place (copying it at every frame cost O(frames x size): quadratic)."""
    big, small = _response("x" * 300_000), _response("tail")
    wire = grpc_frame(big) + grpc_frame(small)
    seen: list[bytes] = []
    buffers: list[bytearray] = []  # kept alive: a freed buffer's id could come back

    def body(pool: GrpcStreamPool, server: _Server) -> None:
        conn = server.conn
        on_message = conn._on_message

        def record(sid: int, idx: int, chunk: bytes | bytearray, start: int, end: int) -> None:
            seen.append(bytes(chunk[start:end]))
            on_message(sid, idx, chunk, start, end)

        conn._on_message = record  # type: ignore[method-assign]
        server.send(server.head(1))
        for at in range(0, len(wire), 1000):
            server.send(gw.frame(gw.DATA, 0, 1, wire[at : at + 1000]))
            if not seen:
                buffers.append(conn.partial[1])
        server.send(server.trailers(1))

    rec, _ = _run(body)
    assert seen == [big, small]
    assert rec.outcome[0] == Outcome.OK and _stream(rec).chunks[0] == 2
    assert len(buffers) > 250 and all(b is buffers[0] for b in buffers)  # one buffer, frame after frame


def test_messages_that_one_read_carries_are_counted_as_coalesced() -> None:
    def body(pool: GrpcStreamPool, server: _Server) -> None:
        one = grpc_frame(_response())
        server.send(server.head(1), gw.frame(gw.DATA, 0, 1, one))
        server.send(gw.frame(gw.DATA, 0, 1, one * 2), gw.frame(gw.DATA, 0, 1, one))  # one read, three messages
        server.send(gw.frame(gw.DATA, 0, 1, one), server.trailers(1))

    rec, _ = _run(body)
    s = _stream(rec)
    assert rec.outcome[0] == Outcome.OK and s.chunks[0] == 5
    assert s.coalesced[0] == 2  # the second and third of the read that carried three
