"""Control calls (readiness, metadata, the test inference) go to the target only: a 3xx answer is an error
naming its Location and is never followed, and proxy variables are ignored, as for the load."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from satpoint.errors import TargetUnreachable
from satpoint.transports.rest import rest_control
from tests.http_stub import QuietHandler, serving

TOKEN = "sk-REDIRECT-SECRET-1"


class _Recorder:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []


@contextmanager
def _server(status: int, location: str | None = None) -> Iterator[tuple[str, _Recorder]]:
    """A server answering every request with ``status`` (and ``Location``), recording what it got."""
    rec = _Recorder()

    class Handler(QuietHandler):
        def _answer(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            rec.requests.append((self.command, self.path, dict(self.headers.items())))
            body = b'{"name": "m", "inputs": []}' if status == 200 else b""
            self.reply(status, body, {"Location": location} if location is not None else None)

        do_GET = do_POST = _answer

    with serving(Handler) as url:
        yield url, rec


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_an_error_naming_the_location_and_nothing_goes_there(status: int) -> None:
    with _server(200) as (elsewhere, seen), _server(status, f"{elsewhere}/v2/models/m?token=tok-LOC-9") as (url, _):
        headers = [("Authorization", f"Bearer {TOKEN}")]
        with pytest.raises(TargetUnreachable) as e:
            rest_control.model_metadata(url, "m", headers=headers)
        with pytest.raises(TargetUnreachable):
            rest_control.infer_once(url, "m", b"{}", headers=headers)
        with pytest.raises(TargetUnreachable):
            rest_control.server_ready(url, headers)
    text = str(e.value)
    assert f"HTTP {status}" in text and f"{elsewhere}/v2/models/m?token=***" in text, text
    assert "tok-LOC-9" not in text and TOKEN not in text
    assert seen.requests == []  # the Authorization header went nowhere else


def test_proxy_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    with _server(200) as (proxy, through_proxy), _server(200) as (url, target):
        for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        urllib.request.install_opener(None)  # urlopen's default opener reads the variables when first built
        assert rest_control.model_metadata(url, "m", headers=[("Authorization", f"Bearer {TOKEN}")])["name"] == "m"
    assert through_proxy.requests == []
    assert [(m, p) for m, p, _ in target.requests] == [("GET", "/v2/models/m")]
    assert target.requests[0][2]["Authorization"] == f"Bearer {TOKEN}"
