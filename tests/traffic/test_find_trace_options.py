"""``find --trace`` honours or refuses every option ``find`` accepts (one line, exit 2, before any load);
trace-only options are refused without ``--trace``; imports keep the model asked for."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.traffic.trace_plan import TraceOptions, build
from satpoint.traffic.trace_read import TraceError

T0 = 1_767_225_600.0
URL = "http://127.0.0.1:9"  # nothing listens: a refusal must come before any connection


def trace(tmp_path: Path, lines: list[str], header: str = "timestamp") -> Path:
    p = tmp_path / "trace.csv"
    p.write_text(header + "\n" + "".join(line + "\n" for line in lines))
    return p


@pytest.mark.parametrize(
    "extra",
    [
        ["--repeats", "3"],
        ["--start-rps", "10"],
        ["--server-pid", "1"],
        ["--hysteresis"],
        ["--ray", "auto"],
        ["--arrival", "poisson"],
        ["--max-rps", "100"],
        ["--min-hold", "3"],
        ["--flamegraph"],
        ["--metrics-url", "http://127.0.0.1:9/metrics"],
        ["--workers", "2"],
    ],
)
def test_find_trace_refuses_what_it_does_not_use(tmp_path: Path, extra: list[str]) -> None:
    path = trace(tmp_path, [f"{T0 + k:.3f}" for k in range(10)])
    r = CliRunner().invoke(app, ["find", "--url", URL, "--model", "m", "--trace", str(path), *extra])
    assert r.exit_code == 2, r.output
    assert "find --trace does not use" in r.output and extra[0] in r.output


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--threshold", "saturation_rps>10"], "saturation_rps is measured by `satpoint find`, not by `find --trace`"),
        (["--threshold", "p99<"], "--threshold 'p99<': expected METRIC OP VALUE"),
        (["--slo", "ttfc_p99<300ms"], "needs --stream"),
        (["--slo", "throughput_rps>3"], "--slo 'throughput_rps>3'"),
    ],
)
def test_find_trace_takes_thresholds_and_slos_and_refuses_bad_ones_before_any_load(
    tmp_path: Path, extra: list[str], says: str
) -> None:
    path = trace(tmp_path, [f"{T0 + k:.3f}" for k in range(10)])
    r = CliRunner().invoke(app, ["find", "--url", URL, "--model", "m", "--trace", str(path), *extra])
    assert r.exit_code == 2 and says in " ".join(r.output.split()), r.output
    assert "cannot reach" not in r.output


def test_trace_options_without_a_trace_are_refused() -> None:
    r = CliRunner().invoke(app, ["find", "--url", URL, "--model", "m", "--trace-model", "x", "--start-speed", "2"])
    assert r.exit_code == 2 and "--trace-model" in r.output and "only with --trace" in r.output


def test_relative_timestamps_are_refused_with_auto_and_read_with_a_unit(tmp_path: Path) -> None:
    path = trace(tmp_path, [str(k * 250) for k in range(40)])  # ms since the start
    with pytest.raises(TraceError, match="relative"):
        build(TraceOptions(path))
    sched = build(TraceOptions(path, time_unit="ms"))
    assert sched.info["window_s"] == pytest.approx(9.75)


def test_a_trace_model_column_is_filtered_and_what_is_dropped_counted(tmp_path: Path) -> None:
    rows = [f"{T0 + k * 0.1:.3f},{'iris' if k % 4 else 'other'}" for k in range(400)]
    path = trace(tmp_path, rows, "timestamp,model")
    sched = build(TraceOptions(path, model="iris"))
    assert sched.info["replayed"] == 300
    assert sched.info["dropped"]["other_models"] == 100 and sched.info["dropped"]["by_model"] == {"other": 100}
    with pytest.raises(TraceError, match=r"no request of model 'sim'.*--trace-model"):
        build(TraceOptions(path, model="sim"))
    assert build(TraceOptions(path)).info["replayed"] == 400  # no filter: every row


def test_envoy_logs_replay_one_models_inference_requests(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    lines = []
    for k in range(60):
        t = f"2026-01-01T00:00:{k:02d}.000Z"
        lines.append(f'[{t}] "POST /v2/models/iris/infer HTTP/1.1" 200 - 10 20 3 2 "-" "c" "id" "h" "u"')
        lines.append(f'[{t}] "POST /v2/models/other/infer HTTP/1.1" 200 - 10 20 3 2 "-" "c" "id" "h" "u"')
        lines.append(f'[{t}] "GET /v2/health/ready HTTP/1.1" 200 - 0 0 1 1 "-" "c" "id" "h" "u"')
    log.write_text("\n".join(lines) + "\n")
    sched = build(TraceOptions(log, fmt="envoy", model="iris"))
    assert sched.info["replayed"] == 60
    assert sched.info["dropped"] == {"other_models": 60, "by_model": {"other": 60}, "non_inference": 60}
