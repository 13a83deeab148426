"""Redaction: secrets in URLs, headers and messages are hidden wherever satpoint writes or prints them,
while the wire keeps them (the server needs them)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from satpoint.analysis.summary.build import build_summary
from satpoint.endpoints.spec import Target
from satpoint.errors import ConfigError
from satpoint.metrics.results import Results
from satpoint.redact import (
    REDACTED,
    is_secret_name,
    redact_header_line,
    redact_headers,
    redact_text,
    redact_url,
    secret_values,
)
from satpoint.reports.html.tables import target_pairs

TOKEN = "sk-TEST-SECRET-123"


@pytest.mark.parametrize(
    "name",
    ["Authorization", "proxy-authorization", "Cookie", "Set-Cookie", "X-API-Key", "x-api_key", "apikey",
     "X-Auth-Token", "access_token", "Client-Secret", "DB-Password", "Ocp-Apim-Subscription-Key"],
)  # fmt: skip
def test_secret_header_names(name: str) -> None:
    assert is_secret_name(name)
    assert redact_header_line(f"{name}: abc123") == f"{name}: {REDACTED}"


@pytest.mark.parametrize("name", ["Seldon-Model", "Content-Type", "Host", "X-Request-Id", "Keep-Alive", "Accept"])
def test_ordinary_header_names_keep_their_values(name: str) -> None:
    assert not is_secret_name(name)
    assert redact_header_line(f"{name}: iris") == f"{name}: iris"


def test_authorization_keeps_its_scheme_and_names_stay() -> None:
    pairs = redact_headers([("Authorization", f"Bearer {TOKEN}"), ("Seldon-Model", "iris"), ("X-API-Key", "k9")])
    assert pairs == (("Authorization", f"Bearer {REDACTED}"), ("Seldon-Model", "iris"), ("X-API-Key", REDACTED))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("127.0.0.1:8081", "127.0.0.1:8081"),
        ("grpcs://h:443", "grpcs://h:443"),
        ("http://alice:pw-9@h:1/p", f"http://alice:{REDACTED}@h:1/p"),
        ("https://ghp_tokenonly@h/", f"https://{REDACTED}@h/"),
        ("http://h/x?token=t1&model=iris", f"http://h/x?token={REDACTED}&model=iris"),
        ("http://h/?access_token=a&api_key=b&key=c&sig=d&signature=e&password=f&secret=g&code=h&v=2",
         "http://h/?" + "&".join(f"{k}={REDACTED}" for k in
                                 ("access_token", "api_key", "key", "sig", "signature", "password", "secret", "code"))
         + "&v=2"),
        ("https://u:p@h:8443/a?X-Amz-Signature=s&X-Amz-Credential=c&X-Amz-Date=1",
         f"https://u:{REDACTED}@h:8443/a?X-Amz-Signature={REDACTED}&X-Amz-Credential={REDACTED}&X-Amz-Date=1"),
    ],
)  # fmt: skip
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_text_finds_urls_headers_and_known_values() -> None:
    text = (
        "cannot reach http://bob:hunter2@h:1/v2/health/ready?token=zz&x=1: refused; "
        f'sent Authorization: Bearer {TOKEN}, {{"api_key": "abc"}}, status code: 14; server said: bad key {TOKEN}!'
    )
    out = redact_text(text, secret_values(None, [("Authorization", f"Bearer {TOKEN}")]))
    for secret in ("hunter2", "zz", TOKEN, "abc"):
        assert secret not in out, out
    assert "http://bob:***@h:1/v2/health/ready?token=***&x=1" in out
    assert f"Authorization: Bearer {REDACTED}," in out and "code: 14" in out and f"bad key {REDACTED}!" in out


def test_secret_values() -> None:
    found = secret_values("http://u:p%40ss@h/?token=t%2B1&m=iris", [("Authorization", "Bearer abc"), ("A", "b")])
    assert set(found) == {"p%40ss", "p@ss", "t%2B1", "t+1", "Bearer abc", "abc"}


# the target: sent in full, described redacted -----------------------------------------------------------
def _target(**kw: object) -> Target:
    return Target(
        url="http://user:s3cr3t-PASS@127.0.0.1:8080/gw?token=tok-77&route=a",
        model="m",
        headers=(("Authorization", f"Bearer {TOKEN}"), ("Seldon-Model", "m")),
        **kw,  # type: ignore[arg-type]
    )


def test_target_describe_is_redacted_and_keeps_header_names() -> None:
    d = _target().describe()
    text = repr(d)
    for secret in (TOKEN, "s3cr3t-PASS", "tok-77"):
        assert secret not in text
    assert d["headers"] == [f"Authorization: Bearer {REDACTED}", "Seldon-Model: m"]
    assert d["url"] == f"http://user:{REDACTED}@127.0.0.1:8080/gw?token={REDACTED}&route=a"
    assert d["tls"] is None
    shown = repr(_target())  # reprs end up in notebooks, logs and tracebacks
    assert TOKEN not in shown and "s3cr3t-PASS" not in shown and "tok-77" not in shown
    assert "Authorization" in shown and "model='m'" in shown


def test_target_wire_headers_keep_secrets_and_add_basic_auth_from_the_url() -> None:
    t = Target(url="http://user:s3cr3t-PASS@127.0.0.1:8080", model="m", headers=(("Seldon-Model", "m"),))
    basic = base64.b64encode(b"user:s3cr3t-PASS").decode()
    assert t.wire_headers == (("Seldon-Model", "m"), ("Authorization", f"Basic {basic}"))
    # an explicit Authorization header wins over the URL's userinfo
    assert _target().wire_headers == _target().headers
    # both the password and the Basic credential made of it are scrubbed from free text (a server may echo
    # either back)
    assert {basic, f"Basic {basic}", "s3cr3t-PASS"} <= set(t.secret_values())
    echoed = redact_text(f"denied: Authorization: Basic {basic} (user:s3cr3t-PASS) {basic}", t.secret_values())
    assert basic not in echoed and "s3cr3t-PASS" not in echoed


def test_tls_options_need_a_tls_url_and_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="https:// or grpcs://"):
        Target(url="http://h:1", model="m", insecure=True).validate()
    with pytest.raises(ConfigError, match="--client-key needs --client-cert"):
        Target(url="https://h:1", model="m", client_key=tmp_path / "k.pem").validate()
    with pytest.raises(ConfigError, match="no such file"):
        Target(url="https://h:1", model="m", ca_cert=tmp_path / "missing.pem").validate()
    t = Target(url="grpcs://h:1", model="m", protocol="grpc", insecure=True).validate()
    assert t.describe()["tls"] == {"verify": False, "ca_cert": None, "client_cert": None, "client_key": None}


def test_old_results_folders_are_redacted_when_summarised_and_rendered() -> None:
    """A folder written before redaction holds the secrets in results.json: summary.json and report.html
    made from it again do not repeat them."""
    header = {
        "schema_version": 1,
        "kind": "run",
        "config": {},
        "target": {
            "url": "http://u:s3cr3t-PASS@h:1/?token=tok-77",
            "model": "m",
            "protocol": "rest",
            "headers": [f"Authorization: Bearer {TOKEN}", "Seldon-Model: m"],
        },
    }
    summary = build_summary(Results(header=header))
    assert summary["target"]["url"] == f"http://u:{REDACTED}@h:1/?token={REDACTED}"
    html = repr(target_pairs(header["target"]))  # type: ignore[arg-type]
    for secret in (TOKEN, "s3cr3t-PASS", "tok-77"):
        assert secret not in html
    assert "Authorization" in html and "Seldon-Model: m" in html
