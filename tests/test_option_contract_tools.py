"""Every option of ``sweep``, ``compare``, ``sim``, ``diff``, ``pipeline``, ``demo co``, ``report`` and
``analyze`` is honoured or refused in each mode of the command (the walk: ``test_option_contract.walk``).

The tables say, per mode, which options the mode honours, kept apart from the code's own tables
(``satpoint.cli.tool_modes``) so that an option added to a mode without being honoured fails the walk.
Each mode's command line is made to fail on a value check before any server starts or any load is sent
(``--repeats 0``, ``--slots 0``, a folder that does not exist...): an option neither used nor refused
reaches that check, exits without naming the option, and fails the walk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest
import typer

from satpoint.cli import tool_modes
from satpoint.cli.demo_cmd import co
from satpoint.cli.results_cmd import analyze, report
from tests.test_option_contract import URL, _params, walk

NOPE = "/nonexistent/satpoint-results"

_SWEEP_ANY = {
    "old_budget_s", "old_find_budget_s",  # the old spellings of --budget and --search-budget
    "set_", "server", "model", "header", "payload", "protocol", "batch_size", "generator_cpus", "objective",
    "at_rps", "slo", "threshold", "repeats", "remeasure_top", "budget_s", "max_quality_loss", "eval_data",
    "reference_model_dir", "find_budget_s", "precision", "profile", "ramp", "min_hold", "max_hold", "min_requests",
    "out", "dry_run", "ray", "ray_hosts", "procs_per_host", "stream", "wake_window_ms", "realtime",
    "models_from_server", "mix", "server_memory_mb",
    "report", "resume",  # select sweep --report and sweep --resume, below
}  # fmt: skip
_SWEEP_REMOTE = {"url", "grpc_url", "reconfigure", "ready_timeout", "server_cores", "server_pid", "metrics_url",
                 "ca_cert", "insecure", "client_cert", "client_key"}  # fmt: skip
_SWEEP_MLSERVER = {"demo_model", "runtime", "model_dir", "demo_models", "model_repo", "workers", "max_batch_size",
                   "max_batch_time", "env", "server_cpus"}  # fmt: skip
_NEW_SWEEP = ["sweep", "--set", "workers=1,2", "--repeats", "0"]  # refused by the sweep's checks
_COMPARE_ANY = {
    "old_budget_s",  # --budget-s: the old spelling of --search-budget
    "protocols", "precision", "budget_s", "header", "payload", "grpc_raw", "binary_data", "generator_cpus", "ramp",
    "min_hold", "max_hold", "min_requests", "out", "stream", "wake_window_ms", "realtime", "threshold", "slo",
}  # fmt: skip
_COMPARE_URL = _COMPARE_ANY | {"url", "grpc_url", "model", "ca_cert", "insecure", "client_cert", "client_key"}
_COMPARE_EMBEDDED = _COMPARE_ANY | {"server", "demo_model", "server_cpus", "url"}  # url: selects compare --url
_BAD_PROTOCOLS = ["--protocols", "rest,grpc,rest"]  # refused by compare's checks
_SIM_ANY = {"port", "host", "slots", "service_ms", "dist", "pause_every", "error_rate", "model", "models", "seed",
            "protocol", "tls_cert", "metastable", "stream", "pipeline", "fault", "autoscale"}  # fmt: skip
_SIM_ON = ["--pause-every", "1", "--models", "2", "--tls-cert", "FILE", "--stream", "--pipeline", "a,b"]
_DIFF = {"sweep", "tolerance", "tail_tolerance", "error_tolerance", "run_spread", "fail_on_inconclusive",
         "calibrate", "json_out", "markdown", "junit", "html", "no_html"}  # fmt: skip

_SWEEP_RESUME = {"resume", "url", "grpc_url", "metrics_url", "env", "reconfigure", "header", "dry_run", "threshold",
                 "report"}  # fmt: skip  # report: selects sweep --report, which refuses --resume
_SWEEP_TRITON = _SWEEP_ANY | {"demo_model", "demo_models", "max_batch_size", "server_cpus"}
_SWEEP_SIM = _SWEEP_ANY | {"workers", "service_ms", "server_cpus"}
_SIM_ALL_ON = _SIM_ANY | {"pause_s", "model_queues", "tls_key", "tls_client_ca", "stream_first_ms", "stream_gap_ms",
                          "stream_chunks", "step_service", "fault_rate", "fault_after", "error_status",
                          "error_framing"}  # fmt: skip
_FAULT = _SIM_ANY | {"fault_rate", "fault_after"}
_PIPELINE = {"url", "step", "pipeline_model", "seldon_model", "protocol", "header", "timeout", "precision",
             "budget_s", "margin", "peak_rps", "ramp", "min_hold", "max_hold", "min_requests", "cooldown", "profile",
             "out", "html", "old_budget_s"}  # fmt: skip
_DEMO_CO = {"rate", "duration", "users", "think_ms", "slots", "service_ms", "pause_every", "pause_s", "out", "html"}
_SIM = ["sim", "--slots", "0"]  # refused by sim's checks
_SCALE_ANY = {"url", "model", "from_rps", "to_rps", "ramp_s", "base_s", "hold_s", "down_hold_s", "slo", "capacity_rps",
              "capacity", "settle_s", "predict", "protocol", "header", "timeout", "seed", "max_inflight", "out",
              "html"}  # fmt: skip
_SCALE = ["scale-test", "-u", URL, "-m", "m", "--from", "10", "--to", "5"]  # refused by scale-test's checks
_URL_M = ["--url", URL, "--model", "m"]

#: mode -> (the command line that selects it, the options it honours)
MODES: dict[str, tuple[list[str], set[str]]] = {
    "sweep --report": (["sweep", "--report", NOPE], {"report", "threshold"}),
    "sweep --resume": (["sweep", "--resume", NOPE], _SWEEP_RESUME),
    "sweep --server mlserver": ([*_NEW_SWEEP, "--server", "mlserver"], _SWEEP_ANY | _SWEEP_MLSERVER),
    "sweep --server triton": ([*_NEW_SWEEP, "--server", "triton"], _SWEEP_TRITON),
    "sweep --server sim": ([*_NEW_SWEEP, "--server", "sim"], _SWEEP_SIM),
    "sweep --url": ([*_NEW_SWEEP, *_URL_M], _SWEEP_ANY | _SWEEP_REMOTE),
    "sweep --dry-run": ([*_NEW_SWEEP, "--server", "sim", "--dry-run"], _SWEEP_SIM - {"out", "threshold"}),
    "compare --url": (["compare", *_URL_M, *_BAD_PROTOCOLS], _COMPARE_URL),
    "compare --url --protocols rest": (
        ["compare", *_URL_M, "--protocols", "rest,rest"],
        _COMPARE_URL - {"grpc_raw", "grpc_url"},
    ),
    "compare": (["compare", *_BAD_PROTOCOLS], _COMPARE_EMBEDDED | {"workers", "runtime", "model_dir"}),
    "compare --server triton": (["compare", "--server", "triton", *_BAD_PROTOCOLS], _COMPARE_EMBEDDED),
    "sim": (_SIM, _SIM_ANY),
    "sim --protocol grpc": ([*_SIM, "--protocol", "grpc"], _SIM_ANY - {"fault", "pipeline", "autoscale"}),
    "sim --autoscale": (
        [*_SIM, "--autoscale", "1:3"],
        _SIM_ANY | {"scale_delay_s", "scale_target", "scale_sync_s", "scale_down_window_s"},
    ),
    "sim, every switch on": ([*_SIM, *_SIM_ON, "--fault", "error-body"], _SIM_ALL_ON),
    "sim --fault close-after": ([*_SIM, "--fault", "close-after"], _FAULT | {"close_after"}),
    "sim --fault idle-timeout": ([*_SIM, "--fault", "idle-timeout"], _FAULT | {"idle_timeout"}),
    "sim --fault slow-headers": ([*_SIM, "--fault", "slow-headers"], _FAULT | {"slow_headers_ms"}),
    "diff": (["diff", NOPE, NOPE], _DIFF),
    "diff --sweep": (["diff", "--sweep", NOPE, "a", "b"], _DIFF - {"error_tolerance"}),
    "diff --calibrate": (["diff", "--calibrate", NOPE, NOPE], _DIFF - {"fail_on_inconclusive"}),
    "diff --no-html": (["diff", "--no-html", NOPE, NOPE], _DIFF - {"html"}),
    "pipeline": (["pipeline", "-u", URL, "--step", "a", "--precision", "0"], _PIPELINE),
    "demo co": (["demo", "co", "--rate", "0"], _DEMO_CO),
    "report": (["report", NOPE], {"out"}),
    "export": (["export", NOPE], {"to", "out"}),
    "scale-test --replicas-cmd": ([*_SCALE, "--replicas-cmd", "echo 1"], _SCALE_ANY | {"replicas_cmd"}),
    "scale-test --replicas-prom": (
        [*_SCALE, "--replicas-prom", URL, "--replicas-query", "q"],
        _SCALE_ANY | {"replicas_prom", "replicas_query", "replicas_desired_query"},
    ),
    "scale-test --replicas-k8s": (
        [*_SCALE, "--replicas-k8s", "ns/deployment/d", "--replicas-k8s-url", URL],
        _SCALE_ANY | {"replicas_k8s", "replicas_k8s_url", "replicas_k8s_token_file"},
    ),
    "scale-test --predict --settle-s": (
        [*_SCALE, "--replicas-cmd", "echo 1", "--predict", "0.7", "--settle-s", "1"],
        _SCALE_ANY
        | {"replicas_cmd", "predict_sync_s", "predict_window_s", "predict_delay_s", "predict_max", "settle_max_s"},
    ),
    "analyze": (["analyze", NOPE], set()),
}


@pytest.fixture
def file(tmp_path: Path) -> Path:
    path = tmp_path / "file.txt"
    path.write_text("x\n")
    return path


def _path(mode: str) -> list[str]:
    return MODES[mode][0][:2] if mode.startswith("demo") else MODES[mode][0][:1]


@pytest.mark.parametrize("mode", list(MODES))
def test_every_option_is_honoured_or_refused_in_every_mode(mode: str, file: Path) -> None:
    names = {p.name for p in _params(_path(mode))}
    assert MODES[mode][1] <= names, f"{mode}: the table names options the command lacks"
    assert list(walk(*MODES[mode], file)) == []


def test_a_mode_that_takes_an_option_it_does_not_honour_is_caught(file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote sweep that took ``--workers`` (the embedded server's) would drop it: the walk says so."""
    monkeypatch.setitem(tool_modes.SWEEP_KINDS, "remote", tool_modes.SWEEP_KINDS["remote"] | {"workers"})
    assert [line.split(":")[0] for line in walk(*MODES["sweep --url"], file)] == ["--workers"]


def test_an_option_added_to_a_command_copy_is_caught(file: Path) -> None:
    """A copy of ``report``, ``analyze`` and ``demo co`` with one more option that nothing uses nor refuses:
    the walk names it, in every one of them."""
    copy = typer.Typer()

    @copy.command("report")
    def report_plus(
        dirs: Annotated[list[Path], typer.Argument()],
        out: Annotated[Path | None, typer.Option()] = None,
        fake_knob: Annotated[int | None, typer.Option()] = None,
    ) -> None:
        report(dirs, out)

    @copy.command("analyze")
    def analyze_plus(
        dirs: Annotated[list[Path], typer.Argument()], fake_knob: Annotated[int | None, typer.Option()] = None
    ) -> None:
        analyze(dirs)

    demo = typer.Typer()
    copy.add_typer(demo, name="demo")

    @demo.command("co")
    def co_plus(rate: float = 200.0, fake_knob: Annotated[int | None, typer.Option()] = None) -> None:
        co(rate=rate)  # type: ignore[call-arg]

    @demo.command("other")
    def other() -> None: ...

    for mode in ("report", "analyze", "demo co"):
        base, honoured = MODES[mode]
        found = [line.split(":")[0] for line in walk(base, honoured, file, copy)]
        assert found == ["--fake-knob"], (mode, found)


def test_every_command_is_walked() -> None:
    """Every command the CLI has is in a walk's table (here or in ``test_option_contract``): a new command
    without one fails here."""
    from satpoint.cli.main import app
    from tests.test_option_contract import MODES as RUN_FIND_MODES

    group = typer.main.get_command(app)
    commands = set()
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        subs = getattr(command, "commands", {})
        commands |= {f"{name} {sub}" for sub in subs} if subs else {name}
    walked = {mode.split(" --")[0].split(",")[0] for mode in [*MODES, *RUN_FIND_MODES]}
    assert commands - {"version"} <= walked, commands - walked
