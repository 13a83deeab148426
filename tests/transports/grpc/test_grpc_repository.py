"""The gRPC repository client (``RepositoryIndex``/``RepositoryModelLoad``/``RepositoryModelUnload``)
against an in-process grpcio stub that answers as MLServer 1.7.1 and Triton do over gRPC: the same calls,
answers and error classes as the REST client's (tests/transports/test_repository.py); and ``satpoint
coldstart`` against a ``grpc://`` URL, every call over gRPC."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.endpoints.repository import resolve_protocol
from satpoint.errors import ConfigError, ModelNotFound, TargetUnreachable
from satpoint.transports.grpc.grpc_proto import SERVICE, message
from satpoint.transports.grpc.grpc_repository import GrpcRepositoryClient, classify_grpc, load_parameters
from satpoint.transports.repository import RepositoryError, RepositoryRefused, RepositoryTimeout, loaded_models


@dataclass
class _Repo:
    models: set[str] = field(default_factory=set)
    loaded: set[str] = field(default_factory=set)
    mode: str = "mlserver"  # mlserver, triton, none (Triton not explicit), restricted, plain (no extension)
    delay_s: float = 0.0
    seen: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handlers(repo: _Repo) -> grpc.GenericRpcHandler:
    def index(req: Any, ctx: grpc.ServicerContext) -> Any:
        row = message("RepositoryIndexResponse").ModelIndex
        prefix = "State." if repo.mode == "mlserver" else ""  # MLServer 1.7.1 writes str(State.READY)
        rows = [
            row(name=m, state=prefix + ("READY" if m in repo.loaded else "UNAVAILABLE")) for m in sorted(repo.models)
        ]
        return message("RepositoryIndexResponse")(models=rows)

    def load(req: Any, ctx: grpc.ServicerContext) -> Any:
        name = req.model_name
        if name not in repo.models:
            if repo.mode == "triton":
                ctx.abort(grpc.StatusCode.INTERNAL, f"failed to load '{name}', failed to poll from model repository")
            ctx.abort(grpc.StatusCode.NOT_FOUND, f"Model {name} not found")
        with repo.lock:
            repo.loaded.add(name)
        return message("RepositoryModelLoadResponse")()

    def unload(req: Any, ctx: grpc.ServicerContext) -> Any:
        name = req.model_name
        if name not in repo.loaded and repo.mode == "mlserver":
            ctx.abort(grpc.StatusCode.NOT_FOUND, f"Model {name} not found")
        with repo.lock:
            repo.loaded.discard(name)
        return message("RepositoryModelUnloadResponse")()

    def ready(req: Any, ctx: grpc.ServicerContext) -> Any:
        return message("ModelReadyResponse")(ready=req.name in repo.loaded)

    def server_ready(req: Any, ctx: grpc.ServicerContext) -> Any:
        return message("ServerReadyResponse")(ready=True)

    def metadata(req: Any, ctx: grpc.ServicerContext) -> Any:
        if req.name not in repo.loaded:
            ctx.abort(grpc.StatusCode.NOT_FOUND, f"Model {req.name} not found")
        tensor = message("ModelMetadataResponse").TensorMetadata
        return message("ModelMetadataResponse")(
            name=req.name,
            inputs=[tensor(name="input-0", datatype="FP32", shape=[-1, 4])],
            outputs=[tensor(name="output-0", datatype="FP32", shape=[-1, 1])],
        )

    def infer(req: Any, ctx: grpc.ServicerContext) -> Any:
        if req.model_name not in repo.loaded:
            ctx.abort(grpc.StatusCode.NOT_FOUND, f"Model {req.model_name} not found")
        return message("ModelInferResponse")(model_name=req.model_name)

    def wrap(name: str, fn: Callable[[Any, grpc.ServicerContext], Any], request: str) -> grpc.RpcMethodHandler:
        def handler(req: Any, ctx: grpc.ServicerContext) -> Any:
            repo.seen.append((name, dict(ctx.invocation_metadata()), req))
            time.sleep(repo.delay_s if name.startswith("Repository") else 0.0)
            if name.startswith("Repository"):
                if repo.mode == "none" and name != "RepositoryIndex":
                    msg = "explicit model load / unload is not allowed if polling is enabled"
                    ctx.abort(grpc.StatusCode.UNAVAILABLE, msg)
                if repo.mode == "restricted":
                    msg = "This protocol is restricted, expecting header 'triton-grpc-protocol-triton-access-token'"
                    ctx.abort(grpc.StatusCode.UNAVAILABLE, msg)
                if repo.mode == "plain":
                    ctx.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return fn(req, ctx)

        return grpc.unary_unary_rpc_method_handler(
            handler,
            request_deserializer=message(request).FromString,
            response_serializer=lambda m: m.SerializeToString(),
        )

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "RepositoryIndex": wrap("RepositoryIndex", index, "RepositoryIndexRequest"),
            "RepositoryModelLoad": wrap("RepositoryModelLoad", load, "RepositoryModelLoadRequest"),
            "RepositoryModelUnload": wrap("RepositoryModelUnload", unload, "RepositoryModelUnloadRequest"),
            "ModelReady": wrap("ModelReady", ready, "ModelReadyRequest"),
            "ServerReady": wrap("ServerReady", server_ready, "ServerReadyRequest"),
            "ModelMetadata": wrap("ModelMetadata", metadata, "ModelMetadataRequest"),
            "ModelInfer": wrap("ModelInfer", infer, "ModelInferRequest"),
        },
    )


@pytest.fixture(scope="module")
def stub() -> Iterator[tuple[str, _Repo]]:
    """One in-process grpcio server for the module; each test sets its repository's state."""
    repo = _Repo()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((_handlers(repo),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"grpc://127.0.0.1:{port}", repo
    finally:
        server.stop(0)


@contextmanager
def _repository(
    stub: tuple[str, _Repo], models: set[str], loaded: set[str], mode: str = "mlserver", delay_s: float = 0.0
) -> Iterator[str]:
    url, repo = stub
    repo.models, repo.loaded, repo.mode, repo.delay_s = models, loaded, mode, delay_s
    repo.seen.clear()
    yield url


def test_load_and_unload_change_the_index_and_readiness(stub: tuple[str, _Repo]) -> None:
    with _repository(stub, {"a", "b"}, {"a"}) as url:
        client = GrpcRepositoryClient(url, (("X-Api-Key", "k1"),), timeout_s=5)
        assert loaded_models(client.index()) == ["a"]
        assert client.load("b") >= 0 and client.ready("b")
        assert client.unload("a") >= 0 and not client.ready("a")
        assert client.wait_absent("a", timeout_s=1) < 1
        assert [(s.name, s.ready, s.version) for s in client.index()] == [("a", False, None), ("b", True, None)]
    calls = [(name, meta.get("x-api-key"), req) for name, meta, req in stub[1].seen]
    assert {name for name, _, _ in calls} >= {"RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"}
    assert all(key == "k1" for _, key, _ in calls)  # headers travel as metadata
    assert [req.model_name for name, _, req in calls if name == "RepositoryModelLoad"] == ["b"]


def test_load_parameters_travel_as_the_rest_bodys(stub: tuple[str, _Repo]) -> None:
    body = {"parameters": {"config": '{"backend": "python"}', "file:1/model.py": "aGVsbG8=", "n": 2, "x": {"a": 1}}}
    with _repository(stub, {"a"}, set(), "triton") as url:
        GrpcRepositoryClient(url, timeout_s=5, load_bodies={"a": body}).load("a")
    params = next(req for name, _, req in stub[1].seen if name == "RepositoryModelLoad").parameters
    assert params["config"].string_param == '{"backend": "python"}'
    assert params["file:1/model.py"].bytes_param == b"hello" and params["n"].int64_param == 2
    assert json.loads(params["x"].string_param) == {"a": 1}
    with pytest.raises(RepositoryError, match="not base64"):
        load_parameters({"parameters": {"file:1/m": "***"}})


def test_errors_are_the_rest_clients(stub: tuple[str, _Repo]) -> None:
    for mode in ("mlserver", "triton"):  # a name the repository lacks
        with _repository(stub, {"a"}, {"a"}, mode) as url, pytest.raises(ModelNotFound, match="'nope'"):
            GrpcRepositoryClient(url, timeout_s=5).load("nope")
    with _repository(stub, {"a"}, set()) as url, pytest.raises(ModelNotFound, match="gRPC NOT_FOUND"):
        GrpcRepositoryClient(url, timeout_s=5).unload("a")  # MLServer: not loaded; Triton answers success
    with _repository(stub, {"a"}, set(), "triton") as url:
        GrpcRepositoryClient(url, timeout_s=5).unload("a")
    with _repository(stub, {"a"}, {"a"}, "none") as url, pytest.raises(RepositoryRefused) as e:
        GrpcRepositoryClient(url, timeout_s=5).unload("a")
    assert "--model-control-mode=explicit" in str(e.value)
    with _repository(stub, {"a"}, {"a"}, "restricted") as url, pytest.raises(RepositoryRefused) as e:
        GrpcRepositoryClient(url, timeout_s=5).load("a")
    assert "triton-grpc-protocol-triton-access-token: TOKEN" in str(e.value)
    with _repository(stub, {"a"}, {"a"}, "plain") as url, pytest.raises(RepositoryRefused, match="no repository API"):
        GrpcRepositoryClient(url, timeout_s=5).index()
    with _repository(stub, {"a"}, {"a"}, delay_s=0.4) as url, pytest.raises(RepositoryTimeout, match="load of 'a'"):
        GrpcRepositoryClient(url, timeout_s=0.1).load("a")


def test_classify_grpc_shapes_and_an_unreachable_server() -> None:
    assert classify_grpc("load", "a", "grpc://h:1", "OK", "") is None
    err = classify_grpc("load", "a", "grpc://h:1", "INTERNAL", "boom")
    assert type(err) is RepositoryError and str(err) == "grpc://h:1: the load of 'a' failed: gRPC INTERNAL: boom"
    assert isinstance(classify_grpc("unload", "a", "grpc://h:1", "UNAVAILABLE", "refused"), TargetUnreachable)
    with pytest.raises(TargetUnreachable, match="RepositoryIndex"):
        GrpcRepositoryClient("grpc://127.0.0.1:9", timeout_s=2).index()


def test_protocol_follows_the_url_unless_given() -> None:
    assert resolve_protocol("grpc://h:1", None) == "grpc" and resolve_protocol("grpcs://h:1", None) == "grpc"
    assert resolve_protocol("http://h:1", None) == "rest" and resolve_protocol(None, None) == "rest"
    assert resolve_protocol("h:1", "grpc") == "grpc" and resolve_protocol(None, "grpc") == "grpc"
    for url, proto in (("grpc://h:1", "rest"), ("http://h:1", "grpc"), ("http://h:1", "soap")):
        with pytest.raises(ConfigError):
            resolve_protocol(url, proto)


def test_coldstart_over_grpc(stub: tuple[str, _Repo], tmp_path: Path) -> None:
    out = tmp_path / "cold"
    with _repository(stub, {"a", "c"}, {"a", "c"}) as url:
        result = CliRunner().invoke(
            app,
            ["coldstart", "--url", url, "--header", "x-api-key: k2", "--repeats", "1", "--during-rps", "20",
             "--warm", "1", "--resident", "1", "--rate", "20", "--duration", "0.3", "--out", str(out)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert stub[1].loaded == {"a", "c"}  # left as found
    summary = json.loads((out / "summary.json").read_text())
    assert summary["target"]["protocol"] == "grpc" and summary["target"]["url"] == url
    cold = summary["coldstart"]
    assert cold["load_ms"]["n"] == 2 and cold["unload_ms"]["n"] == 2 and cold["first_infer_ms"]["n"] == 2
    assert cold["first_infer_failures"] == 0 and cold["warm_infer_ms"]["n"] == 2
    assert cold["during_load"]["requests"] > 0
    assert set(cold["during_load"]["outcomes"]) <= {"ok", "grpc_not_found"}
    assert summary["overcommit"][0]["loads"] >= 1 and summary["overcommit"][0]["errors"] == 0
    names = {name for name, _, _ in stub[1].seen}
    assert {"RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload", "ModelReady", "ModelInfer"} <= names
    assert all(meta.get("x-api-key") == "k2" for _, meta, _ in stub[1].seen)


def test_run_with_resident_models_over_grpc(stub: tuple[str, _Repo], tmp_path: Path) -> None:
    """``run --resident 1`` on a gRPC target: the emulated scheduler loads and unloads through the gRPC
    repository API (it was refused: REST only) and every request is answered."""
    out = tmp_path / "run"
    with _repository(stub, {"a", "c"}, {"a", "c"}) as url:
        result = CliRunner().invoke(
            app,
            ["run", "--url", url.removeprefix("grpc://"), "--protocol", "grpc", "--model", "a", "--model", "c",
             "--resident", "1", "--allow-unload", "--stage", "40:0:1", "--no-html", "--out", str(out)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert stub[1].loaded == {"a", "c"}  # the server's loaded models put back at the end
    summary = json.loads((out / "summary.json").read_text())
    block = summary["overcommit"]
    assert block["loads"] >= 1 and block["loads"] == block["evictions"] and block["load_failures"] == 0
    assert summary["stages"][0]["errors"] == {} and summary["stages"][0]["requests"] > 0
    names = [name for name, _, _ in stub[1].seen]
    assert names.count("RepositoryModelLoad") >= 2 and names.count("RepositoryModelUnload") >= 2  # runs + restore
