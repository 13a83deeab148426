"""``satpoint sim`` as a managed subprocess: the one way to start a synthetic server of known capacity.

:class:`SimServer` runs ``python -m satpoint.servers.sim.server`` (REST) or ``python -m
satpoint.servers.sim.grpc_server``
(gRPC) on ``127.0.0.1`` with ``--port 0``, as a :class:`~satpoint.servers.process.ManagedProcess`: its own
session, stdout and stderr in a log file, killed with its parent, stopped (the whole process group) on
exit, on exceptions and at interpreter exit. It is ready once the server has printed its listening line
to the log::

    satpoint sim listening on http://127.0.0.1:PORT (capacity X rps)     # REST
    satpoint sim listening on grpc://127.0.0.1:PORT (capacity X rps)     # gRPC

and :attr:`SimServer.url` is then what satpoint's ``--url`` takes for that protocol:
``http://127.0.0.1:PORT`` for REST, ``127.0.0.1:PORT`` for gRPC; with ``tls_cert``/``tls_key`` (or TLS
asked for through ``extra_args``) ``https://127.0.0.1:PORT`` and ``grpcs://127.0.0.1:PORT``, and with
``tls_client_ca`` the server requires client certificates signed by that CA (mTLS)::

    with SimServer(slots=4, service_ms=10) as sim:           # capacity 400 rps
        run(sim.target(), ...)                              # Target(url=sim.url, model="sim", protocol="rest")

Arguments are checked when the object is made (``ValueError``); a server that exits or stays silent
during start-up raises :class:`~satpoint.errors.TargetUnreachable` quoting the end of its log. Without
``log_dir`` the log lives in a temporary directory removed on stop; with it, the log file stays there.

The kernel ties the die-with-parent signal to the *thread* that started the server: start it from a
thread that lives as long as the server is needed (the main thread, a pytest fixture).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from satpoint.errors import ConfigError, TargetUnreachable
from satpoint.servers.process import ManagedProcess, TargetError
from satpoint.servers.sim.model import DISTS, SimConfig

if TYPE_CHECKING:
    from satpoint.endpoints.spec import Target

__all__ = ["PROTOCOLS", "SimServer"]

#: protocols a :class:`SimServer` can serve, and the module that serves each.
PROTOCOLS: dict[str, str] = {"rest": "satpoint.servers.sim.server", "grpc": "satpoint.servers.sim.grpc_server"}

HOST = "127.0.0.1"
_LINE = re.compile(r"^satpoint sim listening on (?P<scheme>[a-z]+)://(?P<address>\S+):(?P<port>\d+) \(capacity ")
_POLL_S = 0.01
_STOP_GRACE_S = 5.0
_TAIL_LINES = 30


class SimServer:
    """A `satpoint sim` subprocess with known capacity slots/service time; started on enter, always stopped on exit.

    ``slots`` parallel slots of mean service time ``service_ms`` (distribution ``dist``), optional pauses of
    ``pause_s`` every ``pause_every_s`` seconds, a fraction ``error_rate`` of failed answers, serving
    ``model`` with draws seeded by ``seed`` (see ``satpoint.servers.sim.server``). ``fault`` (REST only) makes it
    misbehave: ``reset-mid-response``, ``truncated``, ``malformed``, ``slow-headers`` (``slow_headers_ms``),
    ``stall``, ``error-body`` (``error_status``, ``error_framing``) and ``connection-close`` hit a fraction
    ``fault_rate`` of the inference requests after the first ``fault_after``; ``close-after``
    (``close_after`` answers per connection) and ``idle-timeout`` (``idle_timeout_s``) act on connections.
    ``metastable=(HIGH, LOW, FACTOR)`` turns on the metastable mode (``--metastable``, see
    ``satpoint.servers.sim.server``); its known rates are then :attr:`collapse_rps`, :attr:`degraded_capacity_rps`
    and :attr:`recovery_rps` (None without it). ``cpus`` pins the server to those CPUs; ``extra_args`` are
    appended to the server's command line (after the generated ones).
    """

    def __init__(
        self,
        slots: int = 1,
        service_ms: float = 10.0,
        *,
        dist: str = "const",
        protocol: str = "rest",
        pause_every_s: float | None = None,
        pause_s: float = 0.0,
        error_rate: float = 0.0,
        model: str = "sim",
        seed: int = 0,
        cpus: Sequence[int] | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 20.0,
        log_dir: Path | None = None,
        tls_cert: str | Path | None = None,
        tls_key: str | Path | None = None,
        tls_client_ca: str | Path | None = None,
        fault: str | None = None,
        fault_rate: float = 1.0,
        fault_after: int = 0,
        close_after: int | None = None,
        idle_timeout_s: float | None = None,
        slow_headers_ms: float | None = None,
        error_status: int | None = None,
        error_framing: str | None = None,
        metastable: tuple[int, int, float] | None = None,
    ) -> None:
        _check_int("slots", slots, minimum=1)
        _check_number("service_ms", service_ms, positive=True)
        if dist not in DISTS:
            raise ValueError(f"SimServer: dist must be one of {', '.join(DISTS)}, got {dist!r}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"SimServer: protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        _check_number("pause_s", pause_s)
        if pause_every_s is not None:
            _check_number("pause_every_s", pause_every_s, positive=True)
            if not 0 <= pause_s < pause_every_s:
                raise ValueError(f"SimServer: pause_s must be in [0, pause_every_s={pause_every_s:g}), got {pause_s:g}")
        elif pause_s != 0:
            raise ValueError("SimServer: pause_s needs pause_every_s")
        _check_number("error_rate", error_rate)
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"SimServer: error_rate must be in [0, 1], got {error_rate:g}")
        if not isinstance(model, str) or not model or "/" in model or model != model.strip():
            raise ValueError(f"SimServer: model must be a non-empty name without '/' or spaces, got {model!r}")
        _check_int("seed", seed, minimum=0)
        if cpus is not None:
            cpus = _check_cpus(cpus)
        if isinstance(extra_args, str) or not all(isinstance(a, str) for a in extra_args):
            raise ValueError(f"SimServer: extra_args must be a sequence of strings, got {extra_args!r}")
        _check_number("startup_timeout_s", startup_timeout_s, positive=True)
        if (tls_cert is None) != (tls_key is None) or (tls_client_ca is not None and tls_cert is None):
            raise ValueError("SimServer: tls_cert and tls_key go together; tls_client_ca needs them")
        if fault is not None and protocol != "rest":
            raise ValueError(f"SimServer: fault is simulated by the REST sim only, not over {protocol}")
        _check_number("fault_rate", fault_rate)
        _check_int("fault_after", fault_after, minimum=0)
        for name, value in (("idle_timeout_s", idle_timeout_s), ("slow_headers_ms", slow_headers_ms)):
            if value is not None:
                _check_number(name, value, positive=True)
        for name, value in (("close_after", close_after), ("error_status", error_status)):
            if value is not None:
                _check_int(name, value, minimum=1)
        try:  # one set of rules for the faults: the server's own
            SimConfig(
                fault=fault,  # type: ignore[arg-type]
                fault_rate=fault_rate,
                fault_after=fault_after,
                close_after=close_after,
                idle_timeout_s=idle_timeout_s,
                slow_headers_ms=slow_headers_ms,
                error_status=error_status,
                error_framing=error_framing,  # type: ignore[arg-type]
            )
            figures = None
            if metastable is not None:
                high, low, factor = metastable
                figures = SimConfig(
                    slots=slots,
                    service_ms=service_ms,
                    metastable_high=high,
                    metastable_low=low,
                    metastable_factor=factor,
                ).metastable_figures()
        except (ConfigError, TypeError, ValueError) as exc:
            raise ValueError(f"SimServer: {str(exc).removeprefix('sim: ')}") from None

        self.slots = slots
        self.service_ms = float(service_ms)
        self.dist = dist
        self.protocol = protocol
        self.pause_every_s = pause_every_s
        self.pause_s = float(pause_s)
        self.error_rate = float(error_rate)
        self.model = model
        self.seed = seed
        self.cpus: tuple[int, ...] | None = tuple(cpus) if cpus is not None else None
        self.extra_args = tuple(extra_args)
        self.startup_timeout_s = float(startup_timeout_s)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.tls_files = {"--tls-cert": tls_cert, "--tls-key": tls_key, "--tls-client-ca": tls_client_ca}
        self.fault = fault
        self.fault_rate = float(fault_rate)
        self.fault_after = fault_after
        self.close_after = close_after
        self.idle_timeout_s = idle_timeout_s
        self.slow_headers_ms = slow_headers_ms
        self.error_status = error_status
        self.error_framing = error_framing
        #: long-run completion rate when overloaded, without pauses: ``slots / (service_ms / 1000)``.
        self.capacity_rps = slots / (self.service_ms / 1000.0)
        self.metastable = metastable
        #: metastable mode's known rates (``sim_rates.metastable_figures``); None without it
        self.collapse_rps = figures.collapse_rps if figures is not None else None
        self.degraded_capacity_rps = figures.degraded_capacity_rps if figures is not None else None
        self.recovery_rps = figures.recovery_rps if figures is not None else None

        self._process: ManagedProcess | None = None
        self._temp_dir: Path | None = None
        self._log_path: Path | None = None
        self._url: str | None = None
        self._port: int | None = None

    # -- the command ------------------------------------------------------------------------------------

    @property
    def argv(self) -> list[str]:
        """The server's command line."""
        argv = [sys.executable, "-m", PROTOCOLS[self.protocol], "--host", HOST, "--port", "0"]
        argv += ["--slots", str(self.slots), "--service-ms", repr(self.service_ms), "--dist", self.dist]
        if self.pause_every_s is not None:
            argv += ["--pause-every", repr(float(self.pause_every_s)), "--pause-s", repr(self.pause_s)]
        argv += ["--error-rate", repr(self.error_rate), "--model", self.model, "--seed", str(self.seed)]
        if self.metastable is not None:
            high, low, factor = self.metastable
            argv += ["--metastable", f"{high},{low},{float(factor)!r}"]
        for flag, path in self.tls_files.items():
            if path is not None:
                argv += [flag, str(path)]
        if self.fault is not None:
            argv += ["--fault", self.fault]
            if self.fault_rate != 1.0:
                argv += ["--fault-rate", repr(self.fault_rate)]
            if self.fault_after:
                argv += ["--fault-after", str(self.fault_after)]
            options = {
                "--close-after": self.close_after,
                "--idle-timeout": self.idle_timeout_s,
                "--slow-headers-ms": self.slow_headers_ms,
                "--error-status": self.error_status,
            }
            argv += [x for flag, v in options.items() if v is not None for x in (flag, repr(v))]
            if self.error_framing is not None:
                argv += ["--error-framing", self.error_framing]
        return [*argv, *self.extra_args]

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> SimServer:
        """Start the server and wait for its listening line; raises TargetUnreachable if it does not come."""
        if self._process is not None:
            raise RuntimeError("SimServer: already started (a SimServer runs once; make a new one)")
        if self.log_dir is None:
            self._temp_dir = Path(tempfile.mkdtemp(prefix="satpoint-sim-"))
            log_dir = self._temp_dir
        else:
            log_dir = self.log_dir
            log_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f"sim-{self.protocol}-", suffix=".log", dir=log_dir)
        os.close(fd)
        self._log_path = Path(name)
        process = ManagedProcess(self.argv, log_path=self._log_path, cpus=self.cpus, name=self._name)
        self._process = process
        try:
            process.start()
            self._wait_listening(process)
        except TargetError as exc:
            self.stop()
            raise TargetUnreachable(f"{self._name} did not start: {exc}") from exc
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server and its process group (idempotent); remove the temporary log directory."""
        try:
            if self._process is not None:
                self._process.stop(grace_s=_STOP_GRACE_S)
        finally:
            if self._temp_dir is not None:
                shutil.rmtree(self._temp_dir, ignore_errors=True)
                self._temp_dir = None

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_listening(self, process: ManagedProcess) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            for line in process.log_text().splitlines():
                m = _LINE.match(line)
                if m is not None:
                    self._port = int(m["port"])
                    hostport = f"{m['address']}:{m['port']}"
                    if m["scheme"] in ("http", "https"):
                        self._url = f"{m['scheme']}://{hostport}"
                    else:  # grpc: host:port, or grpcs://host:port so that the client uses TLS
                        self._url = hostport if m["scheme"] == "grpc" else f"{m['scheme']}://{hostport}"
                    return
            code = process.returncode
            if code is not None:
                self._fail(process, f"exited with code {_describe_code(code)} before listening")
            if time.monotonic() >= deadline:
                self._fail(process, f"printed no listening line within {self.startup_timeout_s:g} s")
            time.sleep(_POLL_S)

    def _fail(self, process: ManagedProcess, reason: str) -> None:
        tail = process.log_tail(_TAIL_LINES).strip() or "(its log is empty)"
        where = f"; log: {self._log_path}" if self.log_dir is not None else ""
        raise TargetUnreachable(
            f"{self._name} did not start: it {reason} (command: python {' '.join(self.argv[1:])}{where}).\n"
            f"--- last lines of its log ---\n{tail}\n---"
        )

    # -- what tests and benchmarks use --------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (REST) or ``127.0.0.1:PORT`` (gRPC): what satpoint's ``--url`` takes."""
        if self._url is None:
            raise RuntimeError(f"{self._name}: not started")
        return self._url

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{self._name}: not started")
        return self._port

    @property
    def pid(self) -> int:
        """The server's process id (also its process group id)."""
        return self._require_process().pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    @property
    def returncode(self) -> int | None:
        """The server's exit code once it has exited (negative: killed by that signal), else None."""
        return self._process.returncode if self._process is not None else None

    @property
    def log_path(self) -> Path:
        """The server's log file (removed on stop unless ``log_dir`` was given)."""
        if self._log_path is None:
            raise RuntimeError(f"{self._name}: not started")
        return self._log_path

    def log_text(self) -> str:
        """What the server wrote to stdout and stderr so far (empty once a temporary log is removed)."""
        return self._process.log_text() if self._process is not None else ""

    def target(self, **kwargs: Any) -> Target:
        """``Target(url=self.url, model=self.model, protocol=self.protocol, **kwargs)``."""
        from satpoint.endpoints.spec import Target

        return Target(url=self.url, model=self.model, protocol=self.protocol, **kwargs)

    def __repr__(self) -> str:
        state = f"url={self._url!r}, pid={self._process.pid}" if self._process is not None else "not started"
        fault = f", fault={self.fault!r}" if self.fault is not None else ""
        return f"SimServer({self.protocol}, slots={self.slots}, service_ms={self.service_ms:g}{fault}, {state})"

    @property
    def _name(self) -> str:
        return f"satpoint sim ({self.protocol})"

    def _require_process(self) -> ManagedProcess:
        if self._process is None:
            raise RuntimeError(f"{self._name}: not started")
        return self._process


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"SimServer: {name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"SimServer: {name} must be >= {minimum}, got {value}")


def _check_number(name: str, value: object, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"SimServer: {name} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"SimServer: {name} must be > 0, got {value!r}")
    if value < 0:
        raise ValueError(f"SimServer: {name} must be >= 0, got {value!r}")


def _check_cpus(cpus: Sequence[int]) -> tuple[int, ...]:
    if isinstance(cpus, str | bytes):
        raise ValueError(f"SimServer: cpus must be a sequence of CPU numbers, got {cpus!r}")
    result = tuple(cpus)
    if not result:
        raise ValueError("SimServer: cpus must not be empty (use None for no pinning)")
    if any(isinstance(c, bool) or not isinstance(c, int) for c in result):
        raise ValueError(f"SimServer: cpus must be CPU numbers, got {cpus!r}")
    count = os.cpu_count() or 1
    bad = sorted(c for c in result if not 0 <= c < count)
    if bad:
        raise ValueError(f"SimServer: cannot pin to CPUs {bad}: this machine has CPUs 0-{count - 1}")
    return result


def _describe_code(code: int) -> str:
    if code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return str(code)
