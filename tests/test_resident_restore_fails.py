"""``--resident K`` on a ``--url`` server: a model that cannot be put back fails the command (exit 1), so a
job never passes while it left a shared server with fewer models loaded than it found."""

from __future__ import annotations

import pytest
import typer

from satpoint.cli.opts.overcommit_opts import guarded_keeping, keep_loaded
from satpoint.endpoints.spec import Target
from satpoint.payloads.mix import ModelMix
from satpoint.transports.repository import ModelState
from tests.test_resident_allow_unload import FakeServer


class BrokenLoads(FakeServer):
    """m3 cannot be loaded back: its load raises (``raises``) or answers without the model becoming READY."""

    def __init__(self, raises: bool) -> None:
        super().__init__()
        self.raises = raises

    def load(self, model: str) -> float:
        if model != "m3":
            return super().load(model)
        self.calls.append(f"load {model}")
        if self.raises:
            raise RuntimeError("HTTP 500: out of memory")
        return 0.0  # answered, but the model is not READY


@pytest.mark.parametrize("raises", [True, False])
@pytest.mark.parametrize("body_code", [0, 3])
def test_a_model_not_put_back_fails_the_command(
    raises: bool, body_code: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = BrokenLoads(raises)
    monkeypatch.setattr("satpoint.endpoints.overcommit._client", lambda spec: server)
    monkeypatch.setattr("satpoint.endpoints.overcommit.READY_WAIT_S", 0.05, raising=False)
    target = Target("http://fake", "m0", mix=ModelMix(from_server=True, resident=2))

    def body() -> int:
        keep_loaded(target)
        server.unload("m2")  # what the run's settle and evictions do
        server.unload("m3")
        return body_code

    with pytest.raises((typer.Exit, SystemExit)) as exc:
        guarded_keeping(body)
    code = getattr(exc.value, "exit_code", getattr(exc.value, "code", None))
    assert code == (1 if body_code == 0 else body_code)  # a failed threshold keeps its 3
    assert server.ready_set == {"m0", "m1", "m2"}
    assert "could not load a model back" in capsys.readouterr().err.replace("\n", " ")


class VersionedServer(FakeServer):
    """Each model READY at version 2; loading by name brings back the repository's newest, version 3, for m3."""

    def __init__(self) -> None:
        super().__init__()
        self.version = dict.fromkeys(self.models, "2")

    def index(self) -> list[ModelState]:
        return [ModelState(m, self.version[m], "READY" if m in self.ready_set else "UNAVAILABLE") for m in self.models]

    def load(self, model: str) -> float:
        if model == "m3":
            self.version[model] = "3"
        return super().load(model)


def test_a_model_put_back_at_another_version_fails_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server served m3 version 2; a load by name gave it version 3: READY by name, but not what the
    server had, so the command fails (exit 1) naming both."""
    server = VersionedServer()
    monkeypatch.setattr("satpoint.endpoints.overcommit._client", lambda spec: server)
    target = Target("http://fake", "m0", mix=ModelMix(from_server=True, resident=2))

    def body() -> int:
        keep_loaded(target)
        server.unload("m2")
        server.unload("m3")
        return 0

    with pytest.raises((typer.Exit, SystemExit)) as exc:
        guarded_keeping(body)
    assert getattr(exc.value, "exit_code", getattr(exc.value, "code", None)) == 1
    assert server.ready_set == {"m0", "m1", "m2", "m3"} and server.version["m2"] == "2"
    err = capsys.readouterr().err.replace("\n", " ")
    assert "load m3: version 2 was ready before, now ready: 3" in " ".join(err.split())
