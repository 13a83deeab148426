"""``--resident K`` on ``run`` and ``find``: a model mix with at most K models loaded (``endpoints.overcommit``).

On a server satpoint did not start (``--url``) the emulated scheduler unloads the server's models, so it
needs ``--allow-unload``; the server's loaded set is recorded before anything is unloaded and put back
when the command ends, however it ends (``keep_loaded``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Annotated

import typer

from satpoint.cli.common import EXIT_FAILED, EXIT_OK, err_console, fail, guarded, interruptible
from satpoint.endpoints.overcommit import LoadedSet, record_loaded
from satpoint.endpoints.spec import Target
from satpoint.payloads.mix import ModelMix

ResidentOpt = Annotated[
    int | None,
    typer.Option(help="a model mix with at most K models loaded: load on demand, unload the least recently used"),
]
AllowUnloadOpt = Annotated[
    bool,
    typer.Option(
        help="--resident on a --url server: allow satpoint to unload its models (put back as they were at the end)"
    ),
]


def with_resident(
    mix: ModelMix | None,
    resident: int | None,
    procs: int = 1,
    ray: object = None,
    *,
    url: str | None = None,
    allow_unload: bool = False,
) -> ModelMix | None:
    """``mix`` with at most ``resident`` models loaded (None: as it is); refused without a mix, with more
    than one generator process (one emulated scheduler decides every load), and on a ``url`` (a server
    satpoint did not start) without ``allow_unload``."""
    if resident is None:
        if allow_unload:
            raise fail("--allow-unload goes with --resident K (nothing else unloads a server's models)")
        return mix
    if mix is None:
        raise fail("--resident K needs a model mix: --model repeated, --models-from-server or --mix")
    if procs != 1 or ray is not None:
        raise fail("--resident emulates one scheduler: it runs in one generator process (--procs 1, no --ray)")
    if resident < 1:
        raise fail(f"--resident must be >= 1, got {resident}")
    if url is not None and not allow_unload:
        raise fail(
            "--resident unloads the server's models (all but K of the mix) and its clients would get errors for "
            "them: add --allow-unload to allow it (they are loaded again at the end)"
        )
    if url is None and allow_unload:
        raise fail("--allow-unload is for a --url server: the embedded server is satpoint's own")
    return replace(mix, resident=resident)


#: the open ``guarded_keeping`` blocks' exit stacks (the innermost last)
_STACKS: list[contextlib.ExitStack] = []


def guarded_keeping(body: Callable[[], int], secrets: Sequence[str] = ()) -> None:
    """``guarded(body)``, with the loaded sets ``keep_loaded`` records in it put back however it ends; a
    model that could not be put back fails a command that would have passed (exit 1): the job left the
    server with fewer models loaded than it found."""
    try:
        with contextlib.ExitStack() as stack:
            _STACKS.append(stack)
            try:
                guarded(body, secrets)
            finally:
                _STACKS.remove(stack)
    except typer.Exit as done:
        if done.exit_code == EXIT_OK and _NOT_BACK:
            raise typer.Exit(EXIT_FAILED) from None
        raise
    finally:
        _NOT_BACK.clear()


def keep_loaded(target: Target, stack: contextlib.ExitStack | None = None) -> LoadedSet | None:
    """With ``--resident`` on ``target``: record the server's loaded set now (before anything is settled)
    and have ``stack`` (default: the innermost ``guarded_keeping``'s) put it back when it closes (normal
    end, error, Ctrl-C, SIGTERM)."""
    if target.mix is None or target.mix.resident is None:
        return None
    kept = record_loaded(target)
    (stack or _STACKS[-1]).callback(_restore, kept)
    return kept


#: the models ``_restore`` could not put back (the command then fails)
_NOT_BACK: list[str] = []


def _restore(kept: LoadedSet) -> None:
    """Put the models back, a first Ctrl-C or SIGTERM meanwhile only noted (a second one aborts, and what
    was not put back yet is named)."""
    try:
        with interruptible():
            done = kept.restore()
    except KeyboardInterrupt:
        err_console.print(
            "[bold red]--resident: stopped while putting the server's models back;[/] these were loaded "
            f"before the run and may not be now: {', '.join(kept.loaded)}"
        )
        raise
    if done:
        err_console.print(f"--resident: the server's models put back ({', '.join(done)})")
    for error in kept.errors:
        _NOT_BACK.append(error)
        err_console.print(f"[bold red]--resident: could not load a model back:[/] {error}")
