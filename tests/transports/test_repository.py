"""The repository client against a stub that answers as MLServer 1.7.1 and Triton do: loads and unloads
change what the index and readiness say; a name the repository lacks, Triton outside explicit mode,
PyTriton's access restriction, a server without the API and a call that never answers are each one clear
error."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import pytest

from satpoint.errors import ModelNotFound
from satpoint.transports.repository import (
    RepositoryError,
    RepositoryRefused,
    RepositoryTimeout,
    classify,
    loaded_models,
    parse_index,
)
from satpoint.transports.rest.repository import RepositoryClient
from tests.http_stub import QuietHandler, serving


class _State:
    models: ClassVar[set[str]] = set()
    loaded: ClassVar[set[str]] = set()
    mode: ClassVar[str] = "mlserver"
    delay_s: ClassVar[float] = 0.0


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    """One stub for the module (each server's stop costs half a second); ``_repository`` sets its state."""
    lock = threading.Lock()
    st = _State

    class Handler(QuietHandler):
        def _json(self, status: int, doc: object) -> None:
            self.reply(status, b"" if doc is None else json.dumps(doc).encode(), {"Content-Type": "application/json"})

        def do_GET(self) -> None:
            parts = self.path.strip("/").split("/")
            if len(parts) == 4 and parts[3] == "ready":
                self._json(200 if parts[2] in st.loaded else 404, None)
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(n)
            time.sleep(st.delay_s)
            parts = self.path.strip("/").split("/")
            mode, models, loaded = st.mode, st.models, st.loaded
            if mode == "none" and parts[:2] == ["v2", "repository"] and len(parts) == 5:
                msg = "explicit model load / unload is not allowed if polling is enabled"
                return self._json(503, {"error": msg})
            if mode == "restricted":
                msg = "This API is restricted, expecting header 'triton-access-token'"
                return self._json(403, {"error": msg})
            if mode == "plain":
                return self._json(404, {"detail": "Not Found"})
            if parts == ["v2", "repository", "index"]:
                rows = [
                    {"name": m, "state": "READY" if m in loaded else "UNAVAILABLE", "reason": ""}
                    for m in sorted(models)
                ]
                return self._json(200, rows)
            if len(parts) == 5 and parts[:3] == ["v2", "repository", "models"]:
                name, op = parts[3], parts[4]
                with lock:
                    if name not in models:
                        if mode == "triton":
                            return self._json(
                                400, {"error": f"failed to load '{name}', failed to poll from model repository"}
                            )
                        return self._json(404, {"error": f"Model {name} not found"})
                    if op == "load":
                        loaded.add(name)
                        return self._json(200, None)
                    if name not in loaded and mode == "mlserver":
                        return self._json(404, {"error": f"Model {name} not found"})
                    loaded.discard(name)
                    return self._json(200, None)
            self._json(404, {"error": "no route"})

    with serving(Handler) as url:
        yield url


@contextmanager
def _repository(
    url: str, models: set[str], loaded: set[str], mode: str = "mlserver", delay_s: float = 0.0
) -> Iterator[str]:
    _State.models, _State.loaded, _State.mode, _State.delay_s = models, loaded, mode, delay_s
    yield url


def test_load_and_unload_change_the_index_and_readiness(stub: str) -> None:
    loaded = {"a"}
    with _repository(stub, {"a", "b"}, loaded) as url:
        client = RepositoryClient(url, timeout_s=5)
        assert loaded_models(client.index()) == ["a"]
        assert client.load("b") >= 0 and client.ready("b")
        assert client.unload("a") >= 0 and not client.ready("a")
        assert client.wait_absent("a", timeout_s=1) < 1
        assert [(s.name, s.ready) for s in client.index()] == [("a", False), ("b", True)]


def test_unknown_model_is_model_not_found_on_both_servers(stub: str) -> None:
    for mode in ("mlserver", "triton"):
        with _repository(stub, {"a"}, {"a"}, mode) as url, pytest.raises(ModelNotFound, match="'nope'"):
            RepositoryClient(url, timeout_s=5).load("nope")


def test_mlserver_unload_of_a_model_not_loaded_is_an_error_and_triton_answers_success(stub: str) -> None:
    with _repository(stub, {"a"}, set()) as url, pytest.raises(ModelNotFound):
        RepositoryClient(url, timeout_s=5).unload("a")
    with _repository(stub, {"a"}, set(), "triton") as url:
        RepositoryClient(url, timeout_s=5).unload("a")


def test_triton_outside_explicit_mode_is_refused_with_the_fix(stub: str) -> None:
    with _repository(stub, {"a"}, {"a"}, "none") as url, pytest.raises(RepositoryRefused) as e:
        RepositoryClient(url, timeout_s=5).unload("a")
    assert "explicit" in str(e.value) and "--model-control-mode=explicit" in str(e.value)


def test_restricted_api_and_missing_api_are_refused(stub: str) -> None:
    with (
        _repository(stub, {"a"}, {"a"}, "restricted") as url,
        pytest.raises(RepositoryRefused, match="triton-access-token"),
    ):
        RepositoryClient(url, timeout_s=5).load("a")
    with _repository(stub, {"a"}, {"a"}, "plain") as url, pytest.raises(RepositoryRefused, match="no repository API"):
        RepositoryClient(url, timeout_s=5).index()


def test_a_call_without_answer_is_a_timeout(stub: str) -> None:
    with _repository(stub, {"a"}, {"a"}, delay_s=0.4) as url, pytest.raises(RepositoryTimeout, match="load of 'a'"):
        RepositoryClient(url, timeout_s=0.1).load("a")


def test_classify_and_parse_index_are_strict() -> None:
    assert classify("load", "a", "http://h", 200, None) is None
    err = classify("load", "a", "http://h", 500, {"error": "boom"})
    assert isinstance(err, RepositoryError) and "boom" in str(err) and "HTTP 500" in str(err)
    with pytest.raises(RepositoryError):
        parse_index({"models": []})
    assert parse_index([{"name": "m", "version": "", "state": "READY"}])[0].version is None
