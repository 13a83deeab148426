"""The command line's contract: one set of exit codes for every command, said in every ``--help``, and
every option given either used or refused (one line, exit 2, before any load) in each mode a command has.

A command with modes (``run``: ``--stage``, ``--users``, ``--trace``; ``find``: a search or ``--trace``)
names, per mode, the parameters that mode takes (or refuses with a message of its own); ``refuse_unused``
refuses any other option given, naming it and why.  A new option is thus refused in a mode until that
mode is taught to use it: never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, TypeVar

import typer

from satpoint.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_ANSWER,
    EXIT_OK,
    EXIT_THRESHOLD,
    EXIT_USAGE,
    err_console,
    fail,
)

#: the exit codes every command keeps, printed at the end of every command's ``--help``
EXIT_CODES_HELP = (
    f"Exit codes: {EXIT_OK} done; {EXIT_FAILED} ran, but the results are incomplete or were written elsewhere "
    f"(the target stopped answering, a rescue folder); {EXIT_USAGE} bad input, before any load; {EXIT_THRESHOLD} a "
    f"gate failed (--threshold, --slo, a --baseline regression); {EXIT_NO_ANSWER} no answer where an answer was "
    f"the job; {EXIT_INTERRUPTED} interrupted (Ctrl-C, SIGTERM: the results so far are written). An internal "
    f"error (a defect, not your input) is one line and exit {EXIT_FAILED}: satpoint --debug shows its traceback."
)


def given(ctx: typer.Context) -> list[tuple[str, str]]:
    """The options of ``ctx``'s command given on the command line (or from the environment), as
    ``(parameter name, the option's longest spelling)``, in the command's order."""
    out = []
    for p in ctx.command.params:
        if p.name is None or not p.opts or not p.opts[0].startswith("-"):
            continue
        source = ctx.get_parameter_source(p.name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.append((p.name, max(p.opts, key=len)))
    return out


def refuse_unused(ctx: typer.Context, mode: str, used: frozenset[str], why: Mapping[str, str]) -> None:
    """Refuse, in one line and exit code 2, every option given that ``mode`` does not use (its parameter
    is not in ``used``), each with the reason ``why`` gives for its parameter."""
    unused = [(name, flag) for name, flag in given(ctx) if name not in used]
    if unused:
        parts = [f"{flag} ({why.get(name, 'it does not apply here')})" for name, flag in unused]
        raise fail(f"{mode} does not use {'; '.join(parts)}: leave {'it' if len(parts) == 1 else 'them'} out")


def reasons(*groups: tuple[tuple[str, ...], str]) -> dict[str, str]:
    """``{parameter: reason}`` from ``(parameters, reason)`` groups."""
    return {name: why for names, why in groups for name in names}


T = TypeVar("T")

#: ``run``/``find --version``: the model's version, spelled ``--model-version`` since ``satpoint --version``
#: is satpoint's own; the old spelling still works, hidden, with a warning
OldVersionOpt = Annotated[str | None, typer.Option("--version", hidden=True, help="the old --model-version")]


def renamed(new: T | None, old: T | None, new_flag: str, old_flag: str, warn: bool = True) -> T | None:
    """The value of an option given under its new spelling or its old one (a hidden alias, said on stderr
    when used if ``warn``); both given is refused."""
    if old is None:
        return new
    if new is not None:
        raise fail(f"{old_flag} is the old spelling of {new_flag}: give one of them")
    if warn:
        err_console.print(f"[yellow]warning:[/] {old_flag} is now {new_flag} (the old spelling still works)")
    return old


def OldSpelling(flag: str) -> typer.models.OptionInfo:
    """A hidden option: the old spelling of a renamed one (``renamed`` merges the two)."""
    info: typer.models.OptionInfo = typer.Option(flag, hidden=True, help=f"the old spelling ({flag})")
    return info


#: ``-u`` on a command that may speak both protocols to one server (sweep, compare)
URLS_HELP = (
    "the server's URL, repeatable: an http(s):// one for REST and a grpc(s):// one for gRPC (the scheme picks "
    "the protocol)"
)


def split_urls(urls: Sequence[str] | None, grpc_url: str | None) -> tuple[str | None, str | None]:
    """``(REST URL, gRPC address)`` from the ``-u`` values (the scheme picks the protocol; a bare host:port is
    REST) and the old ``--grpc-url`` spelling.  Two URLs of one protocol are refused."""
    rest: list[str] = []
    grpc: list[str] = [grpc_url] if grpc_url else []
    for u in urls or ():
        scheme = u.split("://", 1)[0].lower() if "://" in u else ""
        (grpc if scheme in ("grpc", "grpcs") else rest).append(u)
    for kind, given in (("REST (http:// or https://)", rest), ("gRPC (grpc:// or grpcs://, or --grpc-url)", grpc)):
        if len(given) > 1:
            raise fail(f"--url: {len(given)} {kind} URLs; give one of each protocol at most")
    return (rest[0] if rest else None), (grpc[0] if grpc else None)
