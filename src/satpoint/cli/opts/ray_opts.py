"""``--ray [ADDRESS]``, ``--ray-hosts N``, ``--procs-per-host M`` (run, find, sweep; ``config.RayOptions``).

A bare ``--ray`` means a local Ray instance: click options take no optional value, so ``bare_ray`` gives a
bare ``--ray`` the value ``local`` before typer parses argv."""

from __future__ import annotations

from typing import Annotated

import typer

RayOpt = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="[ADDRESS]",
        help="generator shards on Ray actors, one per host: 'auto' (the cluster this machine is in), an "
        "address (ray://head:10001), or nothing for a local Ray instance",
    ),
]
RayHostsOpt = Annotated[
    int | None, typer.Option("--ray-hosts", help="--ray: generator hosts, one per node (default: every node)")
]
ProcsPerHostOpt = Annotated[int, typer.Option("--procs-per-host", help="--ray: generator processes on each host")]


def bare_ray(argv: list[str]) -> list[str]:
    """``argv`` with ``local`` after every ``--ray`` that has no value (last, or before another option)."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg == "--ray" and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            out.append("local")
    return out
