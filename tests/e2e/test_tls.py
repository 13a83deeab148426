"""End-to-end: `satpoint run/find/compare` against `satpoint sim` behind TLS (https:// and grpcs://).

Certificates are made at test time (tests/certs.py): a CA that signed the server's certificate
(127.0.0.1/localhost) and a client certificate, and a second CA that signed nothing the server knows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from satpoint.servers.sim.process import SimServer
from tests.certs import Pki, make_pki

pytestmark = pytest.mark.slow
PROTOCOLS = ["rest", "grpc"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def satpoint(*args: str | Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "satpoint", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def said(r: subprocess.CompletedProcess[str]) -> str:
    """stdout + stderr with the terminal's line wrapping undone."""
    return " ".join((r.stdout + " " + r.stderr).split())


def results_of(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return json.loads((out / "results.json").read_text()), json.loads((out / "summary.json").read_text())


def tls_sim(pki: Pki, protocol: str, *, mtls: bool = False) -> SimServer:
    return SimServer(
        slots=50,
        service_ms=2,
        protocol=protocol,
        tls_cert=pki.server_cert,
        tls_key=pki.server_key,
        tls_client_ca=pki.ca if mtls else None,
    )


def _run(sim: SimServer, protocol: str, out: Path, *extra: str | Path) -> subprocess.CompletedProcess[str]:
    return satpoint(
        "run", "--url", sim.url, "--model", "sim", "--protocol", protocol, "--stage", "50:0:1", "--no-html",
        "--out", out, *extra,
    )  # fmt: skip


def _served_everything(out: Path) -> None:
    _, summary = results_of(out)
    (stage,) = summary["stages"]
    assert stage["error_rate"] == 0 and stage["errors"] == {}, stage
    assert summary["generator"]["requests"] == 50


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_certificates_are_verified_by_default(pki: Pki, tmp_path: Path, protocol: str) -> None:
    with tls_sim(pki, protocol) as sim:
        assert sim.url.startswith("https://" if protocol == "rest" else "grpcs://")
        untrusted = _run(sim, protocol, tmp_path / "untrusted")
        wrong_ca = _run(sim, protocol, tmp_path / "wrong", "--ca-cert", pki.other_ca)
        trusted = _run(sim, protocol, tmp_path / "trusted", "--ca-cert", pki.ca, "--procs", "2")
    # an untrusted certificate fails the pre-flight with a clear error, before any load or results
    for r in (untrusted, wrong_ca):
        assert r.returncode == 2, said(r)
        assert "TLS certificate verification failed" in said(r) and "--ca-cert FILE" in said(r), said(r)
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "untrusted" / "results.json").exists()
    # the CA that signed it makes it work, on the hot path too (two generator processes, each with TLS)
    assert trusted.returncode == 0, said(trusted)
    _served_everything(tmp_path / "trusted")
    header, summary = results_of(tmp_path / "trusted")
    assert header["target"]["tls"] == {"verify": True, "ca_cert": str(pki.ca), "client_cert": None, "client_key": None}
    assert not any("INSECURE" in w for w in summary["warnings"])
    assert "INSECURE" not in said(trusted)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_insecure_skips_verification_warns_and_is_recorded(pki: Pki, tmp_path: Path, protocol: str) -> None:
    with tls_sim(pki, protocol) as sim:
        r = _run(sim, protocol, tmp_path, "--insecure")
    assert r.returncode == 0, said(r)
    _served_everything(tmp_path)
    assert "WARNING: INSECURE: TLS certificate verification is off" in said(r)
    header, summary = results_of(tmp_path)
    assert header["target"]["tls"]["verify"] is False
    assert any(w.startswith("INSECURE: TLS certificate verification is off") for w in summary["warnings"])
    # the offline report says it again
    again = satpoint("report", tmp_path)
    assert again.returncode == 0 and "INSECURE" in said(again)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mutual_tls(pki: Pki, tmp_path: Path, protocol: str) -> None:
    with tls_sim(pki, protocol, mtls=True) as sim:
        ca = ("--ca-cert", pki.ca)
        without = _run(sim, protocol, tmp_path / "without", *ca)
        stranger = _run(sim, protocol, tmp_path / "stranger", *ca, "--client-cert", pki.other_client_cert,
                        "--client-key", pki.other_client_key)  # fmt: skip
        with_cert = _run(sim, protocol, tmp_path / "with", *ca, "--client-cert", pki.client_cert,
                         "--client-key", pki.client_key)  # fmt: skip
    assert without.returncode == 2, said(without)
    assert "client certificates, give --client-cert FILE and --client-key FILE" in said(without), said(without)
    assert stranger.returncode == 2, said(stranger)
    assert "the server may not trust --client-cert" in said(stranger), said(stranger)
    for r in (without, stranger):
        assert "Traceback" not in r.stderr
    assert with_cert.returncode == 0, said(with_cert)
    _served_everything(tmp_path / "with")
    header, _ = results_of(tmp_path / "with")
    assert header["target"]["tls"]["client_cert"] == str(pki.client_cert)


def test_tls_options_reach_find_and_compare(pki: Pki, tmp_path: Path) -> None:
    # --budget-s 9: one stage each (the budget counts a stage as its 0.5 s ramp and 1 s hold plus about
    # 5.7 s of segment overhead, so a second never fits); only the first stage is examined
    short = ["--budget-s", "9", "--ramp", "0.5", "--min-hold", "1", "--max-hold", "1", "--min-requests", "20"]
    with tls_sim(pki, "rest", mtls=True) as sim:
        client = ["--client-cert", pki.client_cert, "--client-key", pki.client_key]
        found = satpoint(
            "find", "--url", sim.url, "--model", "sim", *short, "--start-rps", "50", "--no-profile", "--no-html",
            "--out", tmp_path / "find", "--insecure", *client,
        )  # fmt: skip
        compared = satpoint(
            "compare", "--protocols", "rest", "--url", sim.url, "--model", "sim", *short,
            "--out", tmp_path / "compare", "--ca-cert", pki.ca, *client,
        )  # fmt: skip
        refused = satpoint("compare", "--protocols", "rest", "--url", sim.url, "--model", "sim", "--ca-cert", pki.ca)
    assert found.returncode == 0, said(found)
    assert "WARNING: INSECURE" in said(found)
    header, summary = results_of(tmp_path / "find")
    assert header["target"]["tls"]["verify"] is False and summary["stages"]
    assert summary["stages"][0]["error_rate"] == 0
    assert compared.returncode == 0, said(compared)
    _, summary = results_of(tmp_path / "compare" / "rest")
    assert summary["stages"] and summary["stages"][0]["error_rate"] == 0
    assert refused.returncode == 2 and "--client-cert FILE" in said(refused)


def test_tls_options_need_a_tls_url(tmp_path: Path, pki: Pki) -> None:
    plain = satpoint("run", "--url", "http://127.0.0.1:9", "--model", "m", "--stage", "1:0:1", "--insecure")
    assert plain.returncode == 2 and "need an https:// or grpcs:// URL" in said(plain)
    key_only = satpoint(
        "run", "--url", "https://127.0.0.1:9", "--model", "m", "--stage", "1:0:1", "--client-key", pki.client_key
    )
    assert key_only.returncode == 2 and "--client-key needs --client-cert" in said(key_only)
