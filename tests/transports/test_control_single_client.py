"""One control-plane client per protocol: no module but the control implementation opens a control connection,
and find's pre-flight (readiness, metadata, the test request, the probe, a cool-down) builds one client and
sends every control call through it, over REST and over gRPC."""

from __future__ import annotations

import ast
import inspect
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from satpoint.config import FindOptions, LoadOptions, VerdictRules
from satpoint.endpoints.spec import Target
from satpoint.procedures import saturation
from satpoint.servers.sim.process import SimServer
from satpoint.transports.grpc.control_grpc import GrpcControl
from satpoint.transports.grpc.grpc_repository import GrpcRepositoryClient
from satpoint.transports.rest.control_rest import RestControl
from satpoint.transports.rest.repository import RepositoryClient

SRC = Path(__file__).resolve().parents[2] / "src" / "satpoint"

#: the control implementation: the clients and the calls below them
CONTROL = {
    "transports/control.py",
    "transports/rest/control_rest.py",
    "transports/grpc/control_grpc.py",
    "transports/rest/rest_control.py",
    "transports/grpc/grpc_control.py",
    "transports/grpc/grpc_unary.py",
    "transports/repository.py",
    "transports/grpc/grpc_repository.py",
    "transports/rest/repository.py",
}
#: who may call each connection constructor, and why
OPENERS: dict[str, set[str]] = {
    "build_opener": {
        "transports/rest/rest_control.py",
        "observe/prom.py",  # the observer's Prometheus scrapes: any metrics URL, not the inference protocol
        "servers/embedded_base.py",  # a server satpoint starts itself: its launch waits for its port
    },
    "urlopen": set(),
    "HTTPConnection": {"transports/rest/rest_control.py"},
    "HTTPSConnection": {"transports/rest/rest_control.py"},
    "insecure_channel": {"transports/grpc/grpc_control.py"},
    "secure_channel": {"transports/grpc/grpc_control.py"},
    # sockets: the TLS control calls (grpc_unary); the load's own clients (asyncio's loop.create_connection)
    "create_connection": {"transports/grpc/grpc_unary.py", "transports/rest/pool.py", "transports/grpc/wire.py"},
    "open_connection": set(),
    "Client": set(),
    "AsyncClient": set(),
}
#: the control modules' names a module outside the control implementation may use (parsing, types, errors)
PURE = {
    "rest_control": {"endpoint_url", "model_path"},
    "grpc_control": {"GrpcTarget", "parse_target", "WireRpcError"},
    "grpc_unary": set(),
    "repository": {
        "ModelState",
        "RepositoryControl",
        "RepositoryError",
        "RepositoryRefused",
        "RepositoryTimeout",
        "loaded_models",
        "parse_index",
        "classify",
    },
    "grpc_repository": {"GRPC_HEADER_PREFIX", "classify_grpc", "load_parameters"},
}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        yield path.relative_to(SRC).as_posix(), ast.parse(path.read_text(), str(path))


def _called_name(node: ast.Call) -> str | None:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def test_only_the_listed_modules_call_a_connection_constructor() -> None:
    found = []
    for rel, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called_name(node) in OPENERS and rel not in OPENERS[_called_name(node)]:  # type: ignore[index]
                found.append(f"{rel}:{node.lineno} {_called_name(node)}")
    assert not found, "connections opened outside the control implementation and the load's clients: " + str(found)


def _control_uses(tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """(line, control module, name) for every name of a control module a module uses."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            last = node.module.rsplit(".", 1)[-1]
            for a in node.names:
                if node.module.startswith("satpoint.transports") and a.name in PURE:
                    aliases[a.asname or a.name] = a.name
                elif node.module.startswith("satpoint.transports.") and last in PURE:
                    yield node.lineno, last, a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("satpoint.transports.") and a.name.rsplit(".", 1)[-1] in PURE:
                    aliases[a.asname or a.name] = a.name.rsplit(".", 1)[-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            yield node.lineno, aliases[node.value.id], node.attr


def test_no_module_outside_the_control_implementation_calls_the_servers_itself() -> None:
    found = [
        f"{rel}:{line} {module}.{name}"
        for rel, tree in _modules()
        if rel not in CONTROL
        for line, module, name in _control_uses(tree)
        if name not in PURE[module]
    ]
    assert not found, "control calls outside transports.control's clients: " + str(found)


def test_the_rules_see_a_control_call_and_a_connection_written_elsewhere() -> None:
    # the two rules above, shown a module that breaks them
    tree = ast.parse(
        "from satpoint.transports.rest import rest_control\n"
        "from satpoint.transports.grpc.grpc_control import server_ready\n"
        "rest_control.call_json('http://h', '/v2')\n"
    )
    assert {(m, n) for _, m, n in _control_uses(tree)} == {
        ("grpc_control", "server_ready"),
        ("rest_control", "call_json"),
    }
    call = ast.parse("http.client.HTTPConnection('h')").body[0].value  # type: ignore[attr-defined]
    assert _called_name(call) == "HTTPConnection"


# -- find's pre-flight, counted ---------------------------------------------------------------------------

_CLIENT_FILES = ("control_rest.py", "control_grpc.py")


def _from_a_client() -> bool:
    return any(f.filename.endswith(_CLIENT_FILES) for f in inspect.stack(0))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Constructions of each control client class, and connections opened from outside the clients."""
    seen: dict[str, Any] = {"built": [], "connections": 0, "stray": []}
    for cls in (RestControl, GrpcControl, RepositoryClient, GrpcRepositoryClient):
        init = cls.__init__

        def counting(self: Any, *a: Any, _cls: type = cls, _init: Callable[..., None] = init, **kw: Any) -> None:
            if type(self) is _cls:
                seen["built"].append(_cls.__name__)
            _init(self, *a, **kw)

        monkeypatch.setattr(cls, "__init__", counting)

    def watch(what: str, open_: Callable[..., Any]) -> Callable[..., Any]:
        def opened(*a: Any, **kw: Any) -> Any:
            seen["connections"] += 1
            if not _from_a_client():
                seen["stray"].append(what)
            return open_(*a, **kw)

        return opened

    monkeypatch.setattr(socket, "create_connection", watch("socket", socket.create_connection))
    monkeypatch.setattr(grpc, "insecure_channel", watch("grpc channel", grpc.insecure_channel))
    monkeypatch.setattr(grpc, "secure_channel", watch("grpc channel", grpc.secure_channel))
    return seen


def _preflight(spec: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``find``'s own path up to its search (prepare, probe, budget plan), then one cool-down in place of
    the search."""

    def one_cooldown(run: Any, *a: Any, **kw: Any) -> list[Any]:
        run.cooldown(0.0, 2.0)
        return []

    monkeypatch.setattr(saturation, "run_find", one_cooldown)
    saturation.search_target(
        spec,
        LoadOptions(),
        FindOptions(budget_s=120.0, cooldown_s=0.0),
        VerdictRules(),
        tmp_path,
        stop=threading.Event(),
    )


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_finds_preflight_goes_through_one_control_client(
    protocol: str, tmp_path: Path, counted: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with SimServer(slots=4, service_ms=2, protocol=protocol) as sim:
        url = sim.url if protocol == "rest" else f"grpc://127.0.0.1:{sim.port}"
        _preflight(Target(url, "sim", protocol=protocol), tmp_path, monkeypatch)
    assert counted["built"] == ["RestControl" if protocol == "rest" else "GrpcControl"]
    assert counted["connections"] > 0  # the pre-flight did talk to the server ...
    assert not counted["stray"]  # ... every time from the one client
