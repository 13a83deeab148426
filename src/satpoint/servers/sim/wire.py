"""What the REST sim writes: its HTTP/1.1 responses (bodies precomputed once per configuration) and, for
``--fault``, the faulty answers and what a connection does after writing one (see ``satpoint.servers.sim.server``).

Pure byte building, no I/O but ``send_reset``; ``sim_http`` decides when to write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from http import HTTPStatus

from satpoint.servers.sim.model import SimConfig

SERVER_NAME = "satpoint-sim"
SERVER_VERSION = "0.1.0"

_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    500: b"Internal Server Error",
}

# what a connection does after writing a response
AFTER_NOTHING = 0
AFTER_CLOSE = 1  # close (FIN) once written: Connection: close, a silent close, a truncated response
AFTER_RESET = 2  # reset (RST) RESET_AFTER_S after it was written: reset-mid-response
AFTER_SLOW = 3  # write the tail slow_headers_s later, nothing else on this connection meanwhile
AFTER_SLOW_CLOSE = 4  # the same, then close (the request asked for Connection: close)

#: reset-mid-response: the RST follows the partial answer this much later. A RST makes the peer's kernel
#: drop whatever it received and its application has not read yet: sent at once, the partial answer would
#: mostly be lost and the fault would look like a reset before any response byte.
RESET_AFTER_S = 0.05
#: SO_LINGER on, 0 s: close() then sends a TCP RST instead of a FIN
_LINGER_RST = struct.pack("ii", 1, 0)
#: what ``malformed`` answers: a status line and headers, but a Content-Length no HTTP parser accepts
MALFORMED = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2x\r\n\r\n{}"


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def reason(status: int) -> bytes:
    """The reason phrase of an HTTP status."""
    phrase = _REASONS.get(status)
    if phrase is None:
        try:
            phrase = HTTPStatus(status).phrase.encode()
        except ValueError:
            phrase = b"Error"
    return phrase


def response(status: int, body: bytes, *, close: bool = False, head: bool = False) -> bytes:
    """A complete HTTP/1.1 response (``head``: headers only, as HEAD requires)."""
    lines = [
        b"HTTP/1.1 %d %s" % (status, reason(status)),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
    ]
    if close:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + (b"" if head else body)


class Responses:
    """Precomputed response bodies for one configuration."""

    def __init__(self, config: SimConfig) -> None:
        model = config.model
        self.model = model
        self.model_b = model.encode()
        self.ok_empty = b""
        self.server_meta = _json({"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": []})
        self.model_meta = self._meta(model)
        #: every name served (a model mix: ``SimConfig.models``), its metadata, and the repository index
        self.served = frozenset(m.encode() for m in config.served_models)
        self.model_metas = {m.encode(): self._meta(m) for m in config.served_models}
        self.repository_index = _json(
            [{"name": m, "version": "", "state": "READY", "reason": ""} for m in config.served_models]
        )
        self.infer_head = b'{"model_name":' + _json(model) + b',"id":"'
        self.infer_tail = b'","outputs":[{"name":"output-0","datatype":"FP32","shape":[1,1],"data":[0.5]}]}'
        self.injected_error = _json({"error": f"{SERVER_NAME}: injected error (error_rate)"})
        status = config.fault_status
        self.fault_error = _json({"error": f"{SERVER_NAME}: injected {status} {reason(status).decode()} (fault)"})
        self.not_found = _json({"error": "Not Found"})
        self.bad_request = _json({"error": "Bad Request"})
        self.method_not_allowed = _json({"error": "Method Not Allowed"})

    @staticmethod
    def _meta(model: str) -> bytes:
        return _json(
            {
                "name": model,
                "versions": [],
                "platform": SERVER_NAME,
                "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}],
                "outputs": [{"name": "output-0", "datatype": "FP32", "shape": [-1, 1]}],
            }
        )

    @staticmethod
    def model_not_found(name: str) -> bytes:
        return _json({"error": f"Model {name} not found"})


def faulty_answer(
    fault: str, config: SimConfig, responses: Responses, infer_body: bytes, close: bool
) -> tuple[bytes, int, bytes]:
    """What to write when the answer to an inference request ``fault`` hits is due, what follows it
    (``AFTER_*``) and, for ``slow-headers``, the tail written later. ``infer_body`` is the normal answer's
    body; ``close``: the request asked for ``Connection: close``. Not for ``stall`` (nothing is written)."""
    if fault == "error-body":
        status, body = config.fault_status, responses.fault_error
        if config.error_framing == "eof":  # no content-length: the body ends with the connection
            head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
            return head % (status, reason(status)) + body, AFTER_CLOSE, b""
        return response(status, body, close=close), AFTER_CLOSE if close else AFTER_NOTHING, b""
    if fault == "connection-close":
        return response(200, infer_body, close=True), AFTER_CLOSE, b""
    if fault == "malformed":
        return MALFORMED, AFTER_CLOSE, b""
    full = response(200, infer_body, close=close)
    if fault == "slow-headers":  # the status line now, the rest of the headers and the body later
        split = full.index(b"\r\n") + 2
        return full[:split], AFTER_SLOW_CLOSE if close else AFTER_SLOW, full[split:]
    # truncated (then FIN) or reset-mid-response (then RST): the headers and half the body
    cut = len(full) - len(infer_body) + len(infer_body) // 2
    if fault == "truncated":
        return full[:cut], AFTER_CLOSE, b""
    if fault == "reset-mid-response":
        return full[:cut], AFTER_RESET, b""
    raise ValueError(f"sim: no faulty answer for fault {fault!r}")


def send_reset(transport: asyncio.Transport) -> None:
    """Close ``transport`` with a TCP RST (SO_LINGER 0) instead of a FIN."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    transport.abort()


# -- server-sent events (infer_stream) ---------------------------------------------------------------
STREAM_END = b"0\r\n\r\n"
STREAM_ERROR = b'data: {"error":"injected error"}\n\n'


def stream_head(close: bool) -> bytes:
    """The head of the sim's server-sent event answer (chunked, as MLServer's)."""
    lines = [
        b"HTTP/1.1 200 OK",
        b"content-type: text/event-stream; charset=utf-8",
        b"transfer-encoding: chunked",
    ]
    if close:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def sse_piece(event: bytes) -> bytes:
    """One server-sent event as one piece of a chunked body."""
    return b"%x\r\n" % len(event) + event + b"\r\n"
