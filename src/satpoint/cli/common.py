"""What every command shares: console, exit codes, option types, argument parsing, errors and signals.

Exit codes (``contract.EXIT_CODES_HELP``, the same for every command): 0 done; 1 ran, but the results are
incomplete or elsewhere (the target stopped answering once measuring had started, every generator process
died, every measurement of a sweep failed, a results folder that could not be written or read: the rescue
folder in ``$TMPDIR`` is named); 2 bad input, before any load; 3 a gate failed (``--threshold``, ``--slo``,
a ``--baseline`` regression; ``sweep``: on the recommended point, ``compare``: on a protocol); 4 no answer
where an answer was the job (``EXIT_NO_ANSWER``: ``find`` held no rate, so there is no saturation point; a
lower bound "≥ X" is an answer; ``find --trace``: no headroom; ``pipeline``, ``compare``: no saturation
point; ``sweep``: no point recommended); 130 interrupted by Ctrl-C, SIGTERM or SIGHUP (results written).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape

from satpoint.analysis.search.thresholds import format_result as format_result
from satpoint.analysis.summary.model import RunSummary
from satpoint.config import FlamegraphOptions
from satpoint.errors import RunFailed, SatpointError
from satpoint.plan import ARRIVAL_HELP
from satpoint.redact import redact_text, secret_values
from satpoint.servers.models.demo import DEMO_MODELS, RUNTIME_CHOICES_TEXT

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_THRESHOLD, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
#: ``satpoint --debug`` (or ``SATPOINT_DEBUG=1``): an error's traceback besides its one line
DEBUG = threading.Event()
#: ``find`` without an answer: no rate was held (every stage failed), or ``find --trace`` found no headroom
EXIT_NO_ANSWER = 4

console = Console(width=None if Console().is_terminal else 160)
#: errors and warnings: as wide as the output when not on a terminal, so a log line is not cut mid-sentence
err_console = Console(stderr=True, width=None if Console(stderr=True).is_terminal else 160)

# options several commands share -------------------------------------------------------------------------
HeaderOpt = Annotated[list[str] | None, typer.Option("--header", "-H", help="KEY:VALUE (repeatable)")]
PayloadOpt = Annotated[Path | None, typer.Option(help="OIP request JSON or JSONL file")]
Protocol = Literal["rest", "grpc"]
ProtocolOpt = Annotated[Protocol, typer.Option(help="rest or grpc")]
#: ``--protocol`` where the URL's scheme picks it (``resolve_protocol``)
UrlProtocolOpt = Annotated[
    Protocol | None, typer.Option(help="rest or grpc (default: grpc for a grpc:// or grpcs:// URL, else rest)")
]
ArrivalOpt = Annotated[str, typer.Option(help=ARRIVAL_HELP)]
GrpcRawOpt = Annotated[bool, typer.Option(help="gRPC: send tensors as raw_input_contents")]
HtmlOpt = Annotated[bool, typer.Option(help="write report.html")]
BatchOpt = Annotated[int, typer.Option(help="replaces -1 in input shapes")]
ErrRateOpt = Annotated[float, typer.Option(help="error rate above which a stage is failing")]
TimeoutOpt = Annotated[float, typer.Option(help="per-request timeout, seconds")]
CpusOpt = Annotated[str | None, typer.Option(help="pin the generator, e.g. 1 or 2-3")]
GrpcConnsOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="gRPC: HTTP/2 connections per generator process (default: automatic, more while the server's "
        "MAX_CONCURRENT_STREAMS limits the streams in flight)",
    ),
]
ThresholdOpt = Annotated[
    list[str] | None,
    typer.Option(help="SLO gate, e.g. 'p99<50ms', 'error_rate<1%', 'saturation_rps>400' (repeatable; exit 3)"),
]
DemoModelOpt = Annotated[
    str | None,
    typer.Option(help=f"embedded MLServer: the demo model, {' | '.join(DEMO_MODELS)} (default iris; trained at start)"),
]
RuntimeOpt = Annotated[
    str | None,
    typer.Option(help=f"embedded MLServer: the demo model's artefact, {RUNTIME_CHOICES_TEXT} (default sklearn)"),
]
ModelDirOpt = Annotated[
    Path | None,
    typer.Option(help="embedded MLServer: serve your MLServer model folder (its model-settings.json) instead"),
]
ServerOpt = Annotated[
    Literal["mlserver", "triton"],
    typer.Option(
        "--server",
        help="the embedded server (without --url): mlserver, or triton (Triton through PyTriton: "
        "pip install 'satpoint\\[triton]')",  # \\[: a bracket, not rich markup
    ),
]
BinaryDataOpt = Annotated[
    bool,
    typer.Option(help="REST: send tensors as raw bytes after a JSON header (Triton's binary tensor extension)"),
]
QueueDelayOpt = Annotated[int | None, typer.Option(min=0, help="embedded Triton: max_queue_delay_microseconds")]
InstancesOpt = Annotated[int | None, typer.Option(min=1, help="embedded Triton: model instances (default 1)")]
PreferredBatchOpt = Annotated[int | None, typer.Option(min=1, help="embedded Triton: preferred_batch_size")]
ServerPidOpt = Annotated[
    list[int] | None,
    typer.Option("--server-pid", help="a local server's pid: sample its process tree's CPU and memory (repeatable)"),
]
MetricsUrlOpt = Annotated[
    list[str] | None,
    typer.Option("--metrics-url", help="the server's Prometheus endpoint, scraped during every stage (repeatable)"),
]
FlamegraphOpt = Annotated[
    bool,
    typer.Option(
        "--flamegraph",
        help="record the server with py-spy during one stage's hold: flamegraph.svg, profile.speedscope.json and "
        "the top functions by own time (needs the server's pid and ptrace permission)",
    ),
]
FlamegraphNativeOpt = Annotated[
    bool, typer.Option("--flamegraph-native", help="--flamegraph: add C/C++/Cython frames (py-spy --native)")
]
FlamegraphRateOpt = Annotated[int, typer.Option("--flamegraph-rate", help="--flamegraph: samples per second")]


def flamegraph_options(on: bool, native: bool, rate_hz: int, stage: int | None = None) -> FlamegraphOptions | None:
    """The --flamegraph* options as library options (None: no flame graph)."""
    if not on:  # each option that tunes the flame graph is refused without it (the default rate is 100)
        if given := [f for f, v in (("stage", stage is not None), ("native", native), ("rate", rate_hz != 100)) if v]:
            raise fail(f"{', '.join('--flamegraph-' + f for f in given)}: only with --flamegraph")
        return None
    return FlamegraphOptions(native=native, rate_hz=rate_hz, stage=stage)


_FILE = {"exists": True, "dir_okay": False, "readable": True}
CaCertOpt = Annotated[
    Path | None, typer.Option(help="https/grpcs: PEM CA bundle to trust besides the system's", **_FILE)
]
InsecureOpt = Annotated[
    bool, typer.Option("--insecure", help="https/grpcs: do NOT verify the server's certificate (test clusters)")
]
ClientCertOpt = Annotated[Path | None, typer.Option(help="mTLS: PEM client certificate (chain)", **_FILE)]
ClientKeyOpt = Annotated[Path | None, typer.Option(help="mTLS: PEM private key of --client-cert", **_FILE)]


def tls_fields(
    ca_cert: Path | None, insecure: bool, client_cert: Path | None, client_key: Path | None
) -> dict[str, Any]:
    """The TLS options as ``Target`` keyword arguments."""
    return {"ca_cert": ca_cert, "insecure": insecure, "client_cert": client_cert, "client_key": client_key}


def secrets_of(urls: Sequence[str | None], headers: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The literal secrets a command was given (URL passwords and tokens, secret header values), which
    nothing it prints may show (see ``satpoint.redact``)."""
    found = list(secret_values(None, headers))
    for url in urls:
        found += secret_values(url)
    return tuple(dict.fromkeys(found))


def fail(message: str, code: int = EXIT_USAGE, secrets: Sequence[str] = ()) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {escape(redact_text(message, secrets))}")
    return typer.Exit(code)


def parse_headers(values: list[str] | None) -> tuple[tuple[str, str], ...]:
    out = []
    for i, v in enumerate(values or [], start=1):
        if ":" not in v:  # the value is not echoed: it may be a token
            raise fail(f"--header number {i}: expected KEY:VALUE (e.g. 'Seldon-Model: iris')")
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


#: signals that stop a run the way Ctrl-C does: Ctrl-C, `timeout`/`kill`/container runtimes, a closed terminal
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def interruptible() -> Iterator[threading.Event]:
    """The first Ctrl-C, SIGTERM or SIGHUP asks the run to stop and keep its results (exit code 130); a
    second one aborts (still 130; the rows checkpointed so far stay in the folder)."""
    stop = threading.Event()
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        with contextlib.suppress(OSError, ValueError):  # after SIGHUP the terminal may be gone
            err_console.print(
                f"[yellow]stopping ({name}): writing the results collected so far (Ctrl-C again to abort)[/]"
            )

    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_IGN:
            continue  # ignored on purpose (nohup, a background job): keep it that way
        previous[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for signum, h in previous.items():
            signal.signal(signum, h)


def guarded(fn: Callable[[], int], secrets: Sequence[str] = ()) -> None:
    """Run a command body; user-facing errors become one line and exit code 2, never a traceback.
    The line is redacted, also of the literal ``secrets`` the command was given."""
    try:
        code = fn()
    except RunFailed as e:
        raise fail(str(e), EXIT_FAILED) from None
    except (SatpointError, FileNotFoundError, ValueError) as e:  # PlanError and ThresholdError are ValueErrors
        if DEBUG.is_set():
            err_console.print_exception(show_locals=False)
        raise fail(str(e), secrets=secrets) from None
    except OSError as e:  # a full disk, an unwritable --out (no permission, a read-only file system)
        where = f" ({e.filename})" if e.filename else ""
        raise fail(f"cannot write or read the results{where}: {e.strerror or e}", EXIT_FAILED, secrets) from None
    except zipfile.BadZipFile as e:  # a rows file cut short (the disk filled up while it was written)
        raise fail(f"a results file is damaged: {e}", EXIT_FAILED, secrets) from None
    except KeyboardInterrupt:
        raise fail("aborted", EXIT_INTERRUPTED) from None
    except (typer.Exit, typer.Abort, typer.TyperException):
        raise
    except Exception as e:  # a defect, not bad input: one line, exit 1 (INTERNAL_ERROR_HELP); --debug: where
        if DEBUG.is_set():
            raise
        said = f"internal error: {type(e).__name__}: {e} (--debug for the traceback)"
        raise fail(said, EXIT_FAILED, secrets) from None
    raise typer.Exit(code)


def exit_code(summary: RunSummary) -> int:
    """Print the threshold lines; 130 if interrupted, 1 if the target stopped answering or the results
    could not be written where asked (they are in a rescue folder), 3 if a threshold failed, else 0."""
    for t in summary.thresholds:
        console.print(format_result(t.model_dump()), style="green" if t.passed else "bold red")
    moved = summary.relocated
    if moved is not None:  # measured, but not where asked: a job that collects --out must not pass
        err_console.print(
            f"[bold red]error:[/] the results could not be written to {escape(moved.asked_dir)} "
            f"({escape(moved.error)}): they are in {escape(moved.rescue_dir)}"
        )
    if summary.interrupted:
        return EXIT_INTERRUPTED
    if moved is not None:
        return EXIT_FAILED
    if summary.target_lost is not None:
        err_console.print(f"[bold red]error:[/] {summary.target_lost.message}")
        return EXIT_FAILED
    return EXIT_OK if summary.thresholds_passed else EXIT_THRESHOLD


def embedded_model(
    url: str | None, demo_model: str | None, runtime: str | None, model_dir: Path | None
) -> dict[str, Any]:
    """``--demo-model``/``--runtime``/``--model-dir`` as ``MLServerSettings`` keyword arguments (only those
    given). They describe the embedded server: with a URL they are a usage error."""
    given = {"demo_model": demo_model, "runtime": runtime, "model_dir": model_dir}
    chosen = {k: v for k, v in given.items() if v is not None}
    if url is not None and chosen:
        flags = ", ".join("--" + k.replace("_", "-") for k in chosen)
        raise fail(f"{flags} describe the embedded MLServer: leave them out with --url")
    return chosen
