"""A tiny HTTP server on an ephemeral loopback port, in a thread, for tests that need a real peer
(metrics endpoints, control endpoints, recorders): the handler says what it answers, this runs it."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A handler that logs nothing and answers with one call."""

    def reply(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(
    handler: type[http.server.BaseHTTPRequestHandler],
    tls: ssl.SSLContext | None = None,
    server_type: type[http.server.ThreadingHTTPServer] = http.server.ThreadingHTTPServer,
) -> Iterator[str]:
    """Serve ``handler`` until the block ends; yields the base URL (``http://127.0.0.1:PORT``, or
    ``https://`` with a server-side ``tls`` context)."""
    server = server_type(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls is not None else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
