"""Throw-away PKI for TLS tests: a CA, a server certificate for 127.0.0.1/localhost, a client certificate,
and a second, untrusted CA.  Made at test time with ``cryptography`` (or the ``openssl`` command)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA that signed server and client
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here
    other_client_cert: Path  # a client certificate the other CA signed (the server does not trust it)
    other_client_key: Path


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return _with_cryptography(folder)
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("needs the cryptography package or the openssl command")
        return _with_openssl(folder)


def _with_cryptography(folder: Path) -> Pki:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    def ca(cn: str, stem: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(name(cn))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        path = folder / f"{stem}.pem"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cert, key, path

    def leaf(
        issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey, Path], cn: str, stem: str, server: bool
    ) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(issuer[0].subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(issuer[1], hashes.SHA256())
        cert_path, key_path = folder / f"{stem}.pem", folder / f"{stem}-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_key(key_path, key)
        return cert_path, key_path

    main = ca("satpoint test CA", "ca")
    other = ca("satpoint other CA", "other-ca")
    server_cert, server_key = leaf(main, "localhost", "server", server=True)
    client_cert, client_key = leaf(main, "satpoint client", "client", server=False)
    other_cert, other_key = leaf(other, "stranger", "other-client", server=False)
    return Pki(main[2], server_cert, server_key, client_cert, client_key, other[2], other_cert, other_key)


def _with_openssl(folder: Path) -> Pki:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60, cwd=folder)

    def ca(stem: str, cn: str) -> None:
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{stem}-key.pem", "-out", f"{stem}.pem", "-days", "1", "-subj", f"/CN={cn}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip

    def leaf(ca_stem: str, stem: str, cn: str, ext: str) -> None:
        (folder / f"{stem}.ext").write_text(ext)
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{stem}-key.pem", "-out", f"{stem}.csr", "-subj", f"/CN={cn}")  # fmt: skip
        run("x509", "-req", "-in", f"{stem}.csr", "-CA", f"{ca_stem}.pem", "-CAkey", f"{ca_stem}-key.pem",
            "-CAcreateserial", "-out", f"{stem}.pem", "-days", "1", "-extfile", f"{stem}.ext")  # fmt: skip

    ca("ca", "satpoint test CA")
    ca("other-ca", "satpoint other CA")
    leaf("ca", "server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    leaf("ca", "client", "satpoint client", "extendedKeyUsage=clientAuth\n")
    leaf("other-ca", "other-client", "stranger", "extendedKeyUsage=clientAuth\n")
    f = folder
    return Pki(
        f / "ca.pem", f / "server.pem", f / "server-key.pem", f / "client.pem", f / "client-key.pem",
        f / "other-ca.pem", f / "other-client.pem", f / "other-client-key.pem",
    )  # fmt: skip
