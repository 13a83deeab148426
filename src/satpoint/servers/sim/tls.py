"""TLS for ``satpoint sim`` (REST and gRPC): a server certificate, and optionally required client certificates.

Tests and demos run the synthetic server behind TLS to exercise ``https://``/``grpcs://`` targets,
``--ca-cert``, ``--insecure`` and mTLS (``--tls-client-ca``: clients must present a certificate that
CA signed).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SimTls:
    cert_file: Path  # PEM certificate chain the server presents
    key_file: Path  # its private key
    client_ca_file: Path | None = None  # require client certificates signed by this CA (mTLS)

    @classmethod
    def from_paths(
        cls, cert: str | Path | None, key: str | Path | None, client_ca: str | Path | None = None
    ) -> SimTls | None:
        """None without a certificate; ``ValueError`` for a partial or unreadable set."""
        if cert is None and key is None:
            if client_ca is not None:
                raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
            return None
        if cert is None or key is None:
            raise ValueError("--tls-cert and --tls-key go together")
        tls = cls(Path(cert), Path(key), Path(client_ca) if client_ca is not None else None)
        for path in (tls.cert_file, tls.key_file, tls.client_ca_file):
            if path is not None and not path.is_file():
                raise ValueError(f"{path}: no such file")
        return tls

    def ssl_context(self, alpn: tuple[str, ...] = ("http/1.1",)) -> ssl.SSLContext:
        """A server context (REST sim)."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            ctx.load_verify_locations(cafile=self.client_ca_file)
            ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.set_alpn_protocols(list(alpn))
        return ctx

    def grpc_credentials(self) -> Any:
        """grpcio server credentials (gRPC sim)."""
        import grpc

        ca = self.client_ca_file.read_bytes() if self.client_ca_file is not None else None
        pair = [(self.key_file.read_bytes(), self.cert_file.read_bytes())]
        return grpc.ssl_server_credentials(pair, root_certificates=ca, require_client_auth=ca is not None)
