"""``--resident K`` on a server satpoint did not start: refused without ``--allow-unload`` (exit 2, one
line), and the server's loaded set put back however the command ends (review M5)."""

from __future__ import annotations

import contextlib
import re

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.cli.opts.overcommit_opts import keep_loaded
from satpoint.endpoints.spec import Target
from satpoint.payloads.mix import ModelMix
from satpoint.transports.repository import ModelState

RUN = ["run", "--url", "http://127.0.0.1:9", "--model", "a", "--model", "b", "--stage", "5:0:1", "--no-html"]
FIND = ["find", "--url", "http://127.0.0.1:9", "--model", "a", "--model", "b", "--no-html"]


def _one_line(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize(
    "args",
    [
        [*RUN, "--resident", "1"],
        [*RUN, "--resident", "1", "--users", "2", "--duration", "1"],
        [*RUN, "--resident", "1", "--protocol", "grpc", "--url", "127.0.0.1:9"],
        [*FIND, "--resident", "1"],
        [*FIND, "--resident", "1", "--trace", "trace.csv"],
    ],
)
def test_resident_on_a_url_without_allow_unload_is_refused_before_any_call(args: list[str]) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "add --allow-unload" in _one_line(res.output)


@pytest.mark.parametrize("args", [[*RUN, "--allow-unload"], [*FIND, "--allow-unload"]])
def test_allow_unload_without_resident_is_refused(args: list[str]) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "--allow-unload goes with --resident" in _one_line(res.output)


class FakeServer:
    """A repository API: four models, all loaded; an unload or a load changes what is ready."""

    def __init__(self) -> None:
        self.ready_set = {"m0", "m1", "m2", "m3"}
        self.models = sorted(self.ready_set)
        self.calls: list[str] = []
        self.base_url = "http://fake"

    def index(self) -> list[ModelState]:
        return [ModelState(m, None, "READY" if m in self.ready_set else "UNAVAILABLE") for m in self.models]

    def load(self, model: str) -> float:
        self.calls.append(f"load {model}")
        self.ready_set.add(model)
        return 0.0

    def unload(self, model: str) -> float:
        self.calls.append(f"unload {model}")
        self.ready_set.discard(model)
        return 0.0

    def ready(self, model: str) -> bool:
        return model in self.ready_set

    def wait_absent(self, model: str, timeout_s: float = 30.0, poll_s: float = 0.01) -> float:
        return 0.0


@pytest.mark.parametrize("ending", [None, RuntimeError("the run failed"), KeyboardInterrupt()])
def test_the_loaded_set_is_put_back_however_the_command_ends(
    ending: BaseException | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = FakeServer()
    monkeypatch.setattr("satpoint.endpoints.overcommit._client", lambda spec: server)
    mix = ModelMix(from_server=True, resident=2)
    target = Target("http://fake", "m0", mix=mix)
    with contextlib.suppress(RuntimeError, KeyboardInterrupt), contextlib.ExitStack() as stack:
        kept = keep_loaded(target, stack)
        assert kept is not None and kept.loaded == ("m0", "m1", "m2", "m3")
        server.unload("m2")  # what the run's settle and evictions do
        server.unload("m3")
        if ending is not None:
            raise ending
    assert server.ready_set == {"m0", "m1", "m2", "m3"}
    assert server.calls[-2:] == ["load m2", "load m3"]


def test_a_named_model_the_server_had_not_loaded_is_unloaded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeServer()
    server.ready_set = {"m0"}
    monkeypatch.setattr("satpoint.endpoints.overcommit._client", lambda spec: server)
    target = Target("http://fake", "m0", mix=ModelMix(models=("m0", "m1"), resident=1))
    with contextlib.ExitStack() as stack:
        keep_loaded(target, stack)
        server.unload("m0")
        server.load("m1")  # the run left m1 resident
    assert server.ready_set == {"m0"}
    assert keep_loaded(Target("http://fake", "m0"), contextlib.ExitStack()) is None  # no --resident: nothing
