"""What the embedded servers (MLServer, Triton) share: loopback ports, the readiness check, the stop that
verifies every process of the tree is gone, and the addresses and target they hand to a load test.

A subclass starts its own server (``start``) and says whether its working folder is kept after a stop
(``_keep_workdir_after_stop``); everything else here is the same for both."""

from __future__ import annotations

import atexit
import shutil
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import metadata, util
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from satpoint.endpoints.spec import Target
from satpoint.errors import ConfigError
from satpoint.payloads.mix import ModelMix
from satpoint.pythonpath import prepend_pythonpath as prepend_pythonpath  # re-exported for the servers
from satpoint.pythonpath import satpoint_root as satpoint_root
from satpoint.servers.process import ManagedProcess, TargetError

#: embedded servers listen on loopback only
HOST = "127.0.0.1"

#: what the ``embedded`` extra brings, by import name: MLServer and its scikit-learn runtime, scikit-learn
#: (the demo models are trained at start), the demo models' ONNX form (skl2onnx, onnx, onnxruntime)
EMBEDDED_MODULES = ("mlserver", "mlserver_sklearn", "sklearn", "skl2onnx", "onnx", "onnxruntime")
EMBEDDED_EXTRA_HINT = "the embedded server needs the 'embedded' extra: pip install 'satpoint[embedded]'"


def missing_modules(names: Sequence[str]) -> list[str]:
    """The modules of ``names`` this interpreter cannot import, found without importing them."""
    missing = []
    for name in names:
        try:
            found = util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder that refuses it, or a module in sys.modules without a spec
            found = False
        if not found:
            missing.append(name)
    return missing


def check_embedded_extra() -> None:
    """A ``ConfigError`` (one line, before anything starts) when the ``embedded`` extra is not installed."""
    if missing_modules(EMBEDDED_MODULES):
        raise ConfigError(EMBEDDED_EXTRA_HINT)


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int


class EmbeddedServer:
    """A server process tree satpoint starts on loopback and always stops; use as a context manager."""

    #: the server's name in messages ("MLServer", "Triton")
    NAME: ClassVar[str]

    def __init__(self, *, ready_timeout_s: float, stop_grace_s: float, kill_with_parent: bool) -> None:
        self._ready_timeout_s = ready_timeout_s
        self._stop_grace_s = stop_grace_s
        self._kill_with_parent = kill_with_parent
        self._workdir: Path | None = None
        self._ports: Ports | None = None
        self._process: ManagedProcess | None = None
        self._startup_s: float | None = None
        self._seen_pids: frozenset[int] = frozenset()

    def start(self) -> Self:
        """Start the server and wait until its model is ready; on any failure, stop all it started."""
        if self._process is not None:
            raise TargetError(f"{self.NAME} target already started")
        self._check_startable()
        atexit.register(self.stop)  # removes the temporary folder too
        try:
            self._start()
        except BaseException as e:
            self._stop_after(e)
            raise
        return self

    def _check_startable(self) -> None:
        """Raise when the server cannot be started at all (its package missing, say)."""

    def _start(self) -> None:
        raise NotImplementedError

    def _keep_workdir_after_stop(self) -> bool:
        return False

    def stop(self) -> None:
        """Stop the server and every process it started; verify all pids seen are gone. Idempotent."""
        process = self._process
        survivors: list[int] = []
        try:
            if process is not None:
                self._remember_pids()
                process.stop(self._stop_grace_s)
                survivors = process.alive_pids()
                if survivors:
                    raise TargetError(f"{self.NAME} processes survived stop (pids {survivors}); see {process.log_path}")
        finally:
            if self._workdir is not None and not survivors and not self._keep_workdir_after_stop():
                shutil.rmtree(self._workdir, ignore_errors=True)
            atexit.unregister(self.stop)

    def __enter__(self) -> Self:
        if self._process is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.stop()
        else:
            self._stop_after(exc)

    def _stop_after(self, error: BaseException) -> None:
        """Stop on the way out of an error: that error is what the caller sees; a failed stop is added
        to it as a note, never raised in its place."""
        try:
            self.stop()
        except TargetError as e:
            error.add_note(f"and stopping {self.NAME} failed too: {e}")

    # -- what callers need -----------------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        """The name the model is served under."""
        raise NotImplementedError

    @property
    def rest_url(self) -> str:
        return f"http://{HOST}:{self._require_ports().http}"

    @property
    def grpc_address(self) -> str:
        return f"{HOST}:{self._require_ports().grpc}"

    @property
    def metrics_url(self) -> str:
        return f"http://{HOST}:{self._require_ports().metrics}/metrics"

    @property
    def model_names(self) -> tuple[str, ...]:
        """Every model the server serves (one unless it holds many)."""
        return (self.model_name,)

    @property
    def models(self) -> int:
        return len(self.model_names)

    def target(self, protocol: str = "rest", **kwargs: Any) -> Target:
        """The running server as a load-test target (``protocol`` rest or grpc; other ``Target`` fields
        by keyword, e.g. ``headers``); with many models, a uniform mix over all of them unless ``mix`` is
        given (``payloads.mix``: each request drawn for its model at planning time)."""
        if self.models > 1 and kwargs.get("mix") is None:
            kwargs["mix"] = ModelMix(self.model_names, weights="uniform")
        url = self.grpc_address if protocol == "grpc" else self.rest_url
        return Target(url=url, model=self.model_name, protocol=protocol, **kwargs)

    @property
    def pid(self) -> int:
        return self._require_process().pid

    def pids(self) -> list[int]:
        """The server's live pids now: main process first, then its descendants."""
        process = self._require_process()
        if not process.running:
            return []
        pids = [process.pid, *process.descendants()]
        self._remember_pids()
        return pids

    @property
    def startup_s(self) -> float | None:
        """Seconds from process start to the model being ready."""
        return self._startup_s

    def where(self, cpus: Sequence[int] | None) -> dict[str, Any]:
        """Where the server runs, for the results header: host, ports, addresses, CPUs, pid, folder, the
        seconds it took to start."""
        ports = self._ports
        return {
            "host": HOST,
            "ports": asdict(ports) if ports else None,
            "rest_url": self.rest_url if ports else None,
            "grpc_address": self.grpc_address if ports else None,
            "metrics_url": self.metrics_url if ports else None,
            "cpus": list(cpus) if cpus is not None else None,
            "pid": self._process.pid if self._process is not None else None,
            "workdir": str(self._workdir) if self._workdir is not None else None,
            "startup_s": self._startup_s,
        }

    @property
    def seen_pids(self) -> frozenset[int]:
        """Every pid of the server tree observed so far (main process, workers, stubs)."""
        self._remember_pids()
        return self._seen_pids

    # -- internals -------------------------------------------------------------------------------------

    def _is_ready(self) -> bool:
        # the server's readiness alone is not enough: MLServer 1.7.1 answers 200 there for a moment when
        # its model failed to load (no models, so "all" are ready) before it shuts itself down
        return (
            http_status(f"{self.rest_url}/v2/health/ready") == 200
            and http_status(f"{self.rest_url}/v2/models/{self.model_name}/ready") == 200
        )

    def _remember_pids(self) -> None:
        if self._process is not None:
            self._process.descendants()
            self._seen_pids = self._seen_pids | self._process.seen_pids

    def _require_ports(self) -> Ports:
        if self._ports is None:
            raise TargetError(f"{self.NAME} target not started")
        return self._ports

    def _require_process(self) -> ManagedProcess:
        if self._process is None:
            raise TargetError(f"{self.NAME} target not started")
        return self._process


def http_status(url: str, timeout_s: float = 2.0) -> int:
    """The HTTP status of a GET, without proxies (an ``http_proxy`` must not capture loopback calls)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


def package_versions(packages: Sequence[str]) -> dict[str, str | None]:
    """Installed versions of ``packages`` (None: not installed)."""
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions
