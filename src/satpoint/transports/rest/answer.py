"""HTTP/1.1 answers read carefully, off the hot path: framing, status and the server's Keep-Alive.

The REST pool parses answers with a callback-free ``httptools`` parser (the hot path).  When it needs
more than the status (an answer the server ended by closing the connection; how long the server keeps
an idle connection), it re-reads the first bytes of an answer it already received with this one.
"""

from __future__ import annotations

import contextlib
import math

import httptools


def keep_alive_idle_s(timeout_s: float) -> float:
    """How long to keep a connection idle when the server keeps it ``timeout_s``: a margin under it
    (the sweep runs every 0.25 s and the server's timer is not ours)."""
    return max(0.5 * timeout_s, timeout_s - 1.0)


class AnswerHead:
    """A careful parse of the first bytes of an answer (off the hot path): status, framing, Keep-Alive."""

    def __init__(self, data: bytes) -> None:
        self.status = 0
        self.headers_done = False
        self.complete = False
        self.framed = False  # Content-Length or Transfer-Encoding: the answer does not end at EOF
        self.keep_alive_timeout_s: float | None = None
        parser = httptools.HttpResponseParser(self)
        with contextlib.suppress(httptools.HttpParserError):
            parser.feed_data(data)
        if self.headers_done:
            self.status = parser.get_status_code()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.headers_done = self.complete = self.framed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.lower()
        if key in (b"content-length", b"transfer-encoding"):
            self.framed = True
        elif key == b"keep-alive":
            for part in value.split(b","):
                k, _, v = part.partition(b"=")
                if k.strip().lower() == b"timeout":
                    with contextlib.suppress(ValueError):
                        t = float(v.strip().strip(b'"'))
                        if math.isfinite(t) and t >= 0:
                            self.keep_alive_timeout_s = t

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_message_complete(self) -> None:
        self.complete = True

    @property
    def ends_at_close(self) -> bool:
        """The answer's body runs until the server closes (RFC 9112 §6.3 rule 8), so an EOF completes it."""
        body_allowed = self.status >= 200 and self.status not in (204, 304)
        return self.headers_done and not self.complete and not self.framed and body_allowed
