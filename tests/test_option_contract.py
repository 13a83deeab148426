"""Every option of ``run``, ``find`` and ``coldstart`` is honoured or refused in each mode of the command.

The tables below say, per mode, which options the mode honours; they are kept here on purpose, apart from
the code's own tables (``satpoint.cli.opts.modes``), so that an option added to a mode without being honoured
fails this test.  Every other option the command object has is given, in that mode, on the command line:
it must be refused in one line naming it, exit code 2, before any connection (the URL is a closed port,
and "cannot reach" must not appear).  The honoured options are exercised by the end-to-end tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import typer
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.cli.opts import modes

URL = "http://127.0.0.1:9"  # nothing listens: a refusal must come before any connection

_TRACE_OPTS = {"trace", "trace_format", "trace_time_column", "trace_window", "trace_peak", "trace_stage_s",
               "trace_time_unit", "trace_model", "trace_select"}  # fmt: skip
_RUN_EVERY_MODE = {
    "old_version",  # --version: the old spelling of --model-version
    "url", "model", "version", "protocol", "seed", "timeout", "drain", "header", "payload", "batch_size",
    "max_error_rate", "out", "grpc_raw", "binary_data", "grpc_connections", "html", "threshold", "ca_cert",
    "insecure", "client_cert", "client_key", "server_pid", "metrics_url", "baseline", "fail_on_inconclusive",
    "models_from_server", "mix", "resident", "allow_unload",
}  # fmt: skip
RUN_STAGE = _RUN_EVERY_MODE | {
    "stage", "stream", "arrival", "max_inflight", "procs", "generator_cpus", "flamegraph", "flamegraph_stage",
    "flamegraph_native", "flamegraph_rate", "ray", "ray_hosts", "procs_per_host", "wake_window_ms", "realtime",
}  # fmt: skip
RUN_RATE = RUN_STAGE - {"stage"} | {"rate", "duration"}
RUN_USERS = _RUN_EVERY_MODE | {"users", "duration", "think_ms"}
RUN_TRACE = _RUN_EVERY_MODE | _TRACE_OPTS | {
    "speed", "server_slots", "stream", "max_inflight", "procs", "generator_cpus", "wake_window_ms", "realtime",
}  # fmt: skip
FIND_URL = {
    "old_budget_s",  # --budget-s: the old spelling of --budget
    "old_version",  # --version: the old spelling of --model-version
    "url", "model_names", "version", "protocol", "precision", "slo", "budget_s", "margin", "peak_rps", "min_rps",
    "emit_k8s", "start_rps", "growth", "cooldown", "max_rps", "arrival", "seed", "max_inflight", "timeout",
    "procs", "header", "payload", "batch_size", "max_error_rate", "generator_cpus", "binary_data", "grpc_raw",
    "grpc_connections", "profile", "confirm", "repeats", "hysteresis", "ramp", "min_hold", "max_hold",
    "min_requests", "out", "html", "threshold", "ca_cert", "insecure", "client_cert", "client_key", "server_pid",
    "metrics_url", "flamegraph", "flamegraph_native", "flamegraph_rate", "ray", "ray_hosts", "procs_per_host",
    "baseline", "fail_on_inconclusive", "stream", "wake_window_ms", "realtime", "models_from_server", "mix",
    "resident", "allow_unload",
    "trace",  # selects find --trace, below
}  # fmt: skip
FIND_TRACE = _TRACE_OPTS | {
    "old_budget_s",  # --budget-s: the old spelling of --budget
    "old_version",  # --version: the old spelling of --model-version
    "url", "model_names", "version", "protocol", "precision", "budget_s", "margin", "emit_k8s", "growth",
    "cooldown", "seed", "max_inflight", "timeout", "procs", "header", "payload", "batch_size", "max_error_rate",
    "generator_cpus", "binary_data", "grpc_raw", "grpc_connections", "profile", "confirm", "out", "html",
    "ca_cert", "insecure", "client_cert", "client_key", "start_speed", "stream", "wake_window_ms", "realtime",
    "models_from_server", "mix", "resident", "allow_unload", "threshold", "slo",
}  # fmt: skip
_COLD = {"model", "repeats", "during_rps", "warm", "call_timeout", "timeout", "out", "protocol", "resident"}
_COLD_OVERCOMMIT = {"mix", "rate", "duration", "seed", "slo", "slo_p99_ms"}
COLD_URL = _COLD | {"url", "header", "ca_cert", "insecure", "client_cert", "client_key"}
COLD_EMBEDDED = _COLD | {"demo_models", "demo_model", "server", "url"}  # url: selects coldstart --url
#: coldstart's modes start from an invalid --repeats: an option not refused fails on it, before any server starts
_COLD_ARGS = ["coldstart", "--repeats", "0"]

#: mode -> (the command line that selects it, the options it honours)
MODES: dict[str, tuple[list[str], set[str]]] = {
    "run --stage": (["run", "-u", URL, "-m", "m", "-s", "10:0:1"], RUN_STAGE),
    "run --rate": (["run", "-u", URL, "-m", "m", "--rate", "10", "--duration", "1"], RUN_RATE),
    "run --users": (["run", "-u", URL, "-m", "m", "--users", "2", "--duration", "1"], RUN_USERS),
    "run --trace": (["run", "-u", URL, "-m", "m", "--trace", "TRACE"], RUN_TRACE),
    "find --url": (["find", "-u", URL, "-m", "m"], FIND_URL),
    "find --repeats": (["find", "-u", URL, "-m", "m", "--repeats", "2"], FIND_URL),
    "find --hysteresis": (["find", "-u", URL, "-m", "m", "--hysteresis"], FIND_URL),
    "find --trace": (["find", "-u", URL, "-m", "m", "--trace", "TRACE"], FIND_TRACE),
    "coldstart --url": ([*_COLD_ARGS, "-u", URL], COLD_URL),
    "coldstart --url --resident": ([*_COLD_ARGS, "-u", URL, "--resident", "1"], COLD_URL | _COLD_OVERCOMMIT),
    "coldstart": (_COLD_ARGS, COLD_EMBEDDED),
    "coldstart --resident": ([*_COLD_ARGS, "--resident", "1"], COLD_EMBEDDED | _COLD_OVERCOMMIT),
}

#: a value each option accepts (by parameter name; else by type: see ``_value``)
SAMPLES = {
    "header": "K:V", "threshold": "p99<50ms", "slo": "p99<50ms", "stage": "10:0:1", "arrival": "poisson",
    "protocol": "grpc", "server": "triton", "server_cpu_limit": "1.5", "server_memory_limit": "1Gi",
    "runtime": "onnx", "demo_model": "iris", "trace_window": "0s..2s", "trace_peak": "1m", "trace_select": "a=b",
    "trace_format": "csv", "trace_time_unit": "s", "ray": "auto", "generator_cpus": "0", "server_cpus": "0",
    "metrics_url": URL + "/metrics", "mix": "uniform", "resident": "1", "realtime": "1", "trace_model": "m",
    "trace_time_column": "t", "server_pid": "1", "during_rps": "10", "env": "A=B", "objective": "saturation",
    "set_": "workers=1,2", "fault": "stall", "dist": "exp", "metastable": "10,5,2", "pipeline": "a,b",
    "step_service": "a=1x5", "protocols": "rest", "tolerance": "5%", "tail_tolerance": "20%", "error_framing": "eof",
    "error_tolerance": "0.5%", "run_spread": "10%", "grpc_url": "127.0.0.1:9", "url": URL, "models": "2",
    "step": "a", "host": "127.0.0.1", "port": "0",
}  # fmt: skip


def _params(path: list[str], cli: typer.Typer = app) -> list[Any]:
    """The options of the command at ``path`` (``["run"]``, ``["demo", "co"]``; typer vendors click: duck-typed)."""
    cmd: Any = typer.main.get_command(cli)
    for name in path:
        cmd = cmd.commands[name]
    return [p for p in cmd.params if p.opts and p.opts[0].startswith("-")]


def _value(p: Any, file: Path) -> list[str]:
    """The option as given on a command line: a flag switched from its default, or the option and a value."""
    if p.is_flag:
        return [p.secondary_opts[0]] if p.default and p.secondary_opts else [p.opts[0]]
    flag = max(p.opts, key=len)
    if p.name in SAMPLES:
        return [flag, SAMPLES[p.name]]
    kind = p.type_descriptor.annotation  # int, float | None, list[str] | None, Path | None...
    while get_args(kind):
        kind = next(a for a in get_args(kind) if a is not type(None))
    return [flag, {int: "2", float: "2.5", Path: str(file)}.get(kind, "x")]


def walk(base: list[str], honoured: set[str], file: Path, cli: typer.Typer = app) -> Iterator[str]:
    """Each option of ``base``'s command that the mode ``base`` selects neither honours (``honoured``) nor
    refuses in one line naming it, exit 2, before any load (``TRACE``/``FILE`` in ``base``: a readable file)."""
    base = [str(file) if a in ("TRACE", "FILE") else a for a in base]
    path = [a for a in base if not a.startswith("-")][:2]
    path = path if path[-1] in _subcommands(path[0], cli) else path[:1]
    for p in _params(path, cli):
        if p.name in honoured:
            continue
        args = _value(p, file)
        r = CliRunner().invoke(cli, [*base, *args], terminal_width=400)
        text = " ".join(r.output.split())
        if r.exit_code != 2 or max(p.opts, key=len) not in text or "cannot reach" in text:
            yield f"{args[0]}: exit {r.exit_code}: {text[-300:]}"


def _subcommands(name: str, cli: typer.Typer) -> set[str]:
    return set(getattr(typer.main.get_command(cli).commands[name], "commands", {}))  # type: ignore[attr-defined]


def unrefused(mode: str, file: Path) -> Iterator[str]:
    """Each option ``mode`` neither honours (per the table) nor refuses in one line, exit 2, before any load."""
    return walk(*MODES[mode], file)


@pytest.fixture
def file(tmp_path: Path) -> Path:
    """A readable file any path option accepts, a valid trace too (10 s at 1 rps, epoch seconds)."""
    path = tmp_path / "trace.csv"
    path.write_text("timestamp\n" + "".join(f"{1_767_225_600 + k}\n" for k in range(10)))
    return path


@pytest.mark.parametrize("mode", list(MODES))
def test_every_option_is_honoured_or_refused_in_every_mode(mode: str, file: Path) -> None:
    command = MODES[mode][0][0]
    names = {p.name for p in _params([command])}
    assert MODES[mode][1] <= names, f"{mode}: the table names options {command} lacks"
    assert list(unrefused(mode, file)) == []


def test_an_option_taken_by_a_mode_that_does_not_honour_it_is_caught(
    file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above fails when a mode's code takes an option it does not honour: ``--workers`` (the
    embedded server's) taken by ``find --url`` would be silently dropped."""
    monkeypatch.setattr(modes, "FIND_URL", modes.FIND_URL | {"workers"})
    assert [line.split(":")[0] for line in unrefused("find --url", file)] == ["--workers"]
