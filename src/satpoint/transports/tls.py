"""TLS for every connection satpoint opens to a target: the client context, and errors a user can act on.

``https://`` and ``grpcs://`` targets verify the server's certificate against the system's CA store
(plus ``ca_file``) and its host name, by default.  ``verify=False`` (``--insecure``) turns both checks
off, for self-signed test clusters; ``cert_file``/``key_file`` present a client certificate (mTLS).
The same :class:`TlsOptions` builds the context of the pre-flight control calls and of the hot path, so
what the pre-flight accepts is what the test uses.  ``TlsOptions`` holds paths, not an
``ssl.SSLContext``, so it pickles into generator processes, which build their own context.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: what to do about a failed handshake, by what OpenSSL says
_HINT_VERIFY = (
    "give the CA that signed the server's certificate with --ca-cert FILE, "
    "or --insecure to skip verification (test clusters only)"
)
_HINT_CLIENT_CERT = "the server asks for a client certificate: give --client-cert FILE and --client-key FILE"
_HINT_REFUSED = (
    "if the server requires client certificates, give --client-cert FILE and --client-key FILE "
    "(signed by a CA the server trusts)"
)
_REQUIRED_MARKERS = ("CERTIFICATE_REQUIRED", "certificate required")
_CLIENT_CERT_MARKERS = (
    "BAD_CERTIFICATE",
    "bad certificate",
    "UNKNOWN_CA",
    "unknown ca",
    "HANDSHAKE_FAILURE",
    "handshake failure",
)


@dataclass(frozen=True)
class TlsOptions:
    """How to open a TLS connection: extra CA bundle, client certificate, whether to verify the server."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    server_hostname: str | None = None  # the name to verify and send as SNI, if not the URL's host

    def context(self, alpn: Sequence[str] = ("http/1.1",)) -> ssl.SSLContext:
        """A client context; raises ``ssl.SSLError``/``OSError`` on unreadable or mismatched files."""
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        if alpn:
            ctx.set_alpn_protocols(list(alpn))
        return ctx

    def describe(self) -> dict[str, Any]:
        """What results.json records under ``target.tls`` (paths, never key material)."""
        return {
            "verify": self.verify,
            "ca_cert": self.ca_file,
            "client_cert": self.cert_file,
            "client_key": self.key_file,
        }


def explain_tls_error(exc: BaseException, tls: TlsOptions | None = None) -> str | None:
    """A sentence for a TLS failure (``exc`` or the error it wraps), with what to do; None if not TLS.

    With ``tls`` (the connection was TLS), a connection the server closed or reset during or right
    after the handshake counts too: that is how servers refuse a missing or untrusted client
    certificate under TLS 1.3."""
    err: BaseException | None = exc
    for _ in range(4):  # urllib wraps the ssl error in URLError.reason
        if err is None or isinstance(err, ssl.SSLError | ssl.CertificateError | ConnectionError | EOFError):
            break
        err = getattr(err, "reason", None) or err.__cause__ or err.__context__
    if isinstance(err, ssl.SSLCertVerificationError):
        why = err.verify_message or err.reason or str(err)
        return f"TLS certificate verification failed ({why}): {_HINT_VERIFY}"
    closed = isinstance(err, ConnectionError | EOFError) and not isinstance(err, ConnectionRefusedError)
    if isinstance(err, ssl.SSLEOFError) or (tls is not None and closed):
        return f"the server closed the TLS connection before answering ({err}){client_cert_hint(tls)}"
    if isinstance(err, ssl.SSLError):
        text = str(err)
        if any(m in text for m in _REQUIRED_MARKERS):
            return f"TLS handshake refused ({err.reason or text}): {_HINT_CLIENT_CERT}"
        if any(m in text for m in _CLIENT_CERT_MARKERS):
            return f"TLS handshake refused ({err.reason or text}): {_HINT_REFUSED}"
        if "WRONG_VERSION_NUMBER" in text or "wrong version number" in text:
            return f"TLS handshake failed ({err.reason or text}): does the server speak TLS on this port?"
        return f"TLS error: {err.reason or text}"
    return None


def client_cert_hint(tls: TlsOptions | None) -> str:
    """What a TLS connection the server closed right away most likely means."""
    if tls is not None and tls.cert_file:
        return "; the server may not trust --client-cert (is it signed by a CA the server accepts?)"
    return "; if the server requires client certificates, give --client-cert FILE and --client-key FILE"
