"""What satpoint attaches to: a target's description, and the same target once prepared for a test.

A ``Target`` holds what the server needs (the URL with its credentials, the headers with their tokens)
and sends it on the wire unchanged; what it *describes* for results files is redacted
(``satpoint.redact``).  TLS: ``https://`` and ``grpcs://`` verify the server's certificate unless
``insecure``; ``ca_cert`` adds a CA, ``client_cert``/``client_key`` present a client certificate (mTLS).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from satpoint.errors import ConfigError
from satpoint.payloads.mix import ModelMix, ResolvedMix
from satpoint.redact import redact_header_line, redact_headers, redact_url, secret_values
from satpoint.transports.tls import TlsOptions

if TYPE_CHECKING:
    from satpoint.transports.control import ControlClient

TLS_SCHEMES = ("https", "grpcs")
PROTOCOLS = ("rest", "grpc")


def resolve_protocol(url: str | None, protocol: str | None) -> str:
    """The protocol to speak: ``protocol`` if given, else gRPC for a ``grpc://``/``grpcs://`` URL and REST
    otherwise (no URL: REST).  A gRPC URL with ``rest``, or an ``http(s)://`` one with ``grpc``, is refused."""
    scheme = url.split("://", 1)[0].lower() if url and "://" in url else ""
    if protocol is None:
        return "grpc" if scheme in ("grpc", "grpcs") else "rest"
    if protocol not in PROTOCOLS:
        raise ConfigError(f"--protocol: rest or grpc, got {protocol!r}")
    if protocol == "rest" and scheme in ("grpc", "grpcs"):
        raise ConfigError(f"{redact_url(url or '')} is a gRPC URL: leave --protocol out or give --protocol grpc")
    if protocol == "grpc" and scheme in ("http", "https"):
        raise ConfigError(
            f"--protocol grpc needs a gRPC address (grpc://host:port, grpcs://host:port), not {redact_url(url or '')}"
        )
    return protocol


#: the line ``--insecure`` prints and summary.json repeats as a warning
INSECURE_WARNING = (
    "INSECURE: TLS certificate verification is off (--insecure): the server's identity is not checked; "
    "use this against test clusters only"
)


@dataclass(frozen=True)
class Target:
    url: str
    model: str
    version: str | None = None
    protocol: str = "rest"
    headers: tuple[tuple[str, str], ...] = ()
    payload_file: Path | None = None
    batch_size: int = 1
    grpc_raw: bool = False
    ca_cert: Path | None = None  # PEM CA bundle to trust besides the system's (https://, grpcs://)
    insecure: bool = False  # skip certificate and host-name verification (self-signed test clusters)
    client_cert: Path | None = None  # PEM client certificate (chain) for mTLS
    client_key: Path | None = None  # its private key (if not in client_cert)
    binary_data: bool = False  # REST: tensors as raw bytes after a JSON header (Triton's binary tensor extension)
    #: stream every answer (``--stream``): REST ``infer_stream`` server-sent events, gRPC ``ModelStreamInfer``
    stream: bool = False
    #: several models on the server, each request drawn for its model (``payloads.mix``); None: ``model`` only
    mix: ModelMix | None = None

    def __repr__(self) -> str:  # redacted: a repr ends up in logs, notebooks and tracebacks
        shown = {"url": redact_url(self.url), "headers": redact_headers(self.headers)}
        fields = ", ".join(f"{k}={shown.get(k, getattr(self, k))!r}" for k in self.__dataclass_fields__)
        return f"Target({fields})"

    @property
    def uses_tls(self) -> bool:
        return urlsplit(self.url).scheme.lower() in TLS_SCHEMES if "://" in self.url else False

    @property
    def has_tls_options(self) -> bool:
        return self.insecure or any(p is not None for p in (self.ca_cert, self.client_cert, self.client_key))

    def tls_options(self) -> TlsOptions | None:
        """How to open TLS connections to this target (None for ``http://`` and ``grpc://``)."""
        if not self.uses_tls:
            return None
        return TlsOptions(
            ca_file=str(self.ca_cert) if self.ca_cert else None,
            cert_file=str(self.client_cert) if self.client_cert else None,
            key_file=str(self.client_key) if self.client_key else None,
            verify=not self.insecure,
        )

    @property
    def wire_headers(self) -> tuple[tuple[str, str], ...]:
        """The headers sent: the user's, plus ``Authorization: Basic`` from the URL's ``user:pass@`` unless
        the user gave an Authorization header."""
        netloc = urlsplit(self.url).netloc if "://" in self.url else ""
        if "@" not in netloc or any(k.strip().lower() == "authorization" for k, _ in self.headers):
            return self.headers
        user, _, password = netloc.rpartition("@")[0].partition(":")
        token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
        return (*self.headers, ("Authorization", f"Basic {token}"))

    def secret_values(self) -> tuple[str, ...]:
        """The literal secrets this target carries, for scrubbing free text (error messages)."""
        return secret_values(self.url, self.wire_headers)

    def validate(self) -> Target:
        """Raise ``ConfigError`` for TLS options that cannot work; returns self."""
        if self.has_tls_options and not self.uses_tls:
            raise ConfigError(
                f"--ca-cert/--insecure/--client-cert/--client-key need an https:// or grpcs:// URL, "
                f"not {redact_url(self.url)}"
            )
        if self.client_key is not None and self.client_cert is None:
            raise ConfigError("--client-key needs --client-cert")
        for what, path in (("--ca-cert", self.ca_cert), ("--client-cert", self.client_cert)):
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{what} {path}: no such file")
        if self.client_key is not None and not Path(self.client_key).is_file():
            raise ConfigError(f"--client-key {self.client_key}: no such file")
        return self

    def describe(self) -> dict[str, Any]:
        """The results header's ``target``: URL and headers redacted, TLS settings (paths only)."""
        tls = self.tls_options()
        return {
            "url": redact_url(self.url),
            "model": self.model,
            "version": self.version,
            "protocol": self.protocol,
            "headers": [redact_header_line(f"{k}: {v}") for k, v in self.headers],
            "payload_file": str(self.payload_file) if self.payload_file else None,
            "batch_size": self.batch_size,
            "binary_data": self.binary_data,
            "stream": self.stream,
            "tls": tls.describe() if tls is not None else None,
        } | ({"mix": self.mix.describe()} if self.mix is not None else {})


@dataclass
class PreparedTarget:
    spec: Target
    metadata: dict[str, Any]
    payload_docs: list[dict[str, Any]]
    builder: Any  # FactoryBuilder
    payload_bytes: int
    notes: list[str] = field(default_factory=list)
    #: how long a request took before the run (the pre-flight test request, or a probe): sizes the
    #: automatic in-flight cap for slow servers
    latency_hint_s: float | None = None
    #: a Triton target: what ``GET /v2`` and the model's configuration say (``endpoints.triton``)
    triton: dict[str, Any] | None = None
    #: a model mix: its models and weights; ``payload_docs`` then hold ``mix.per_model`` requests per model
    mix: ResolvedMix | None = None
    #: the target's control-plane client (``transports.control``), the pre-flight's: the probes and the
    #: cool-downs use it too (None: one is built from ``spec``)
    control: ControlClient | None = field(default=None, repr=False, compare=False)
