"""What every command shares: console, exit codes, argument parsing, error and signal handling.

Exit codes: 0 success; 1 the run itself failed; 2 bad input (invalid plan, unreachable target, model
not found, unreadable payload); 3 an SLO threshold failed; 130 interrupted (results so far written).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import typer
from rich.console import Console

from satpoint.analysis.verdicts import VerdictRules
from satpoint.errors import SatpointError
from satpoint.plan import PlanError
from satpoint.session import LoadOptions

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_THRESHOLD, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

console = Console(width=None if Console().is_terminal else 160)
err_console = Console(stderr=True)


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


def parse_headers(values: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for v in values:
        if ":" not in v:
            raise fail(f"--header {v!r}: expected KEY:VALUE")
        k, _, val = v.partition(":")
        out.append((k.strip(), val.strip()))
    return tuple(out)


def parse_cpus(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    cpus: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                a, b = part.split("-")
                cpus.extend(range(int(a), int(b) + 1))
            else:
                cpus.append(int(part))
    except ValueError:
        raise fail(f"cannot parse CPU list {text!r} (e.g. 0 or 0,1 or 0-3)") from None
    return tuple(cpus)


def default_out(kind: str) -> Path:
    return Path("results") / f"{kind}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


@contextmanager
def interruptible() -> Iterator[threading.Event]:
    """First Ctrl-C (or SIGTERM) asks the run to stop and keep its results; a second one aborts."""
    stop = threading.Event()
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        err_console.print("[yellow]stopping: writing the results collected so far (Ctrl-C again to abort)[/]")

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for signum, h in previous.items():
            signal.signal(signum, h)


def guarded(fn: Callable[[], int]) -> None:
    """Run a command body; user-facing errors become one line and exit code 2, never a traceback."""
    try:
        code = fn()
    except (SatpointError, PlanError, FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        raise fail("aborted", EXIT_INTERRUPTED) from None
    raise typer.Exit(code)


def config_dict(opts: LoadOptions, rules: VerdictRules, **extra: Any) -> dict[str, Any]:
    return {
        "mode": "open_loop",
        "load": opts.describe(),
        "rules": {
            "max_error_rate": rules.max_error_rate,
            "generator_lag_p99_ms": rules.generator_lag_p99_ms,
            "slo_ms": rules.slo_ms,
        },
        **extra,
    }
