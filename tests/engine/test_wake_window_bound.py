"""``--wake-window-ms`` is bounded: a window whose first request leaves later than the generator-lag limit
allows would make every stage read as generator-limited, so it is refused (one line, exit 2) before
anything is sent, on every command that takes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.config import MAX_WAKE_WINDOW_MS, LoadOptions, VerdictRules


def test_the_bound_is_below_the_generator_lag_limit() -> None:
    assert VerdictRules().generator_lag_p99_ms > MAX_WAKE_WINDOW_MS
    LoadOptions(wake_window_ms=MAX_WAKE_WINDOW_MS).validate()
    with pytest.raises(ValueError, match=r"^--wake-window-ms must be from 0 to 5 ms .*; got 50$"):
        LoadOptions(wake_window_ms=50).validate()


@pytest.mark.parametrize("command", ["run", "find", "sweep", "compare"])
def test_a_wider_window_is_refused_before_anything_is_sent(command: str, tmp_path: Path) -> None:
    args = [command, "--url", "http://127.0.0.1:9", "--model", "m", "--out", str(tmp_path / "o")]
    extra = {"run": ["--stage", "10:0:1"], "sweep": ["--set", "max_batch_size=1,2"], "compare": ["--protocols", "rest"]}
    r = CliRunner().invoke(app, [*args, *extra.get(command, []), "--wake-window-ms", "50"])
    assert r.exit_code == 2, r.output
    assert "--wake-window-ms must be from 0 to 5 ms" in " ".join(r.output.split()), r.output
    assert not (tmp_path / "o").exists()
