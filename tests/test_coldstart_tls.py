"""``satpoint coldstart`` against an https repository-API stub signed by a private CA that wants a client
certificate: with ``--ca-cert``/``--client-cert``/``--client-key`` every call (index, load, unload,
readiness, inferences, the stream during a load, the overcommit run) goes over TLS and the loads are
measured; without them it stops with one line, exit code 2, naming the option that helps, as ``run`` does;
``--insecure`` prints its warning."""

from __future__ import annotations

import http.server
import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from tests.certs import Pki, make_pki
from tests.http_stub import serving
from tests.test_coldstart_secrets import _handler


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # refused handshakes are what the failing cases are about


@contextmanager
def _serving_tls(pki: Pki, seen: list[str]) -> Iterator[str]:
    """The repository stub over TLS (mTLS: a client certificate of ``pki.ca`` required)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    with serving(_handler({"a", "c"}, seen), tls=ctx, server_type=_QuietServer) as url:
        yield url


@pytest.mark.slow
def test_coldstart_over_https_with_a_private_ca_and_a_client_certificate(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    seen: list[str] = []
    out = tmp_path / "cold"
    small = ["--repeats", "1", "--during-rps", "20", "--warm", "1"]
    client = ["--client-cert", str(pki.client_cert), "--client-key", str(pki.client_key)]
    with _serving_tls(pki, seen) as url:
        ok = CliRunner().invoke(
            app,
            ["coldstart", "--url", url, "--ca-cert", str(pki.ca), *client, *small,
             "--resident", "1", "--rate", "20", "--duration", "0.3", "--out", str(out)],
        )  # fmt: skip
        untrusted = CliRunner().invoke(app, ["coldstart", "-u", url, *client, *small, "--out", str(tmp_path / "u")])
        no_cert = CliRunner().invoke(app, ["coldstart", "-u", url, "--insecure", *small, "--out", str(tmp_path / "n")])
    assert ok.exit_code == 0, ok.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["coldstart"]["load_ms"]["n"] == 2 and summary["coldstart"]["first_infer_ms"]["n"] == 2
    assert summary["coldstart"]["during_load"]["requests"] > 0
    assert summary["overcommit"][0]["loads"] >= 1 and summary["overcommit"][0]["errors"] == 0
    assert summary["target"]["tls"] == {
        "verify": True, "ca_cert": str(pki.ca), "client_cert": str(pki.client_cert), "client_key": str(pki.client_key)
    }  # fmt: skip
    assert summary["warnings"] == [] and "INSECURE" not in ok.output
    paths = [s.split()[-1] for s in seen]
    assert any(p.endswith("/load") for p in paths) and any(p.endswith("/ready") for p in paths)
    assert any(p.endswith("/infer") for p in paths) and "/v2/repository/index" in paths

    assert untrusted.exit_code == 2, untrusted.output
    said = " ".join(untrusted.output.split())  # one error line, wrapped at the console's width
    assert "TLS certificate verification failed" in said and "--ca-cert FILE" in said, said
    assert untrusted.output.count("error:") == 1 and "Traceback" not in untrusted.output
    assert not (tmp_path / "u" / "summary.json").exists()

    assert no_cert.exit_code == 2, no_cert.output
    said = " ".join(no_cert.output.split())
    assert "WARNING: INSECURE: TLS certificate verification is off" in said, said
    assert "--client-cert FILE and --client-key FILE" in said, said


def test_coldstart_tls_options_are_checked_as_run_checks_them(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"  # never read: the options are refused first
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    embedded = CliRunner().invoke(app, ["coldstart", "--insecure"])
    assert embedded.exit_code == 2 and "need an https:// URL" in embedded.output, embedded.output
    plain = CliRunner().invoke(app, ["coldstart", "--url", "http://127.0.0.1:9", "--ca-cert", str(pem)])
    assert plain.exit_code == 2 and "need an https:// or grpcs:// URL" in plain.output, plain.output
    key_only = CliRunner().invoke(app, ["coldstart", "--url", "https://127.0.0.1:9", "--client-key", str(pem)])
    assert key_only.exit_code == 2 and "--client-key needs --client-cert" in key_only.output, key_only.output
