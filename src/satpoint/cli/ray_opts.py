"""``--ray [ADDRESS]``, ``--ray-hosts N`` and ``--procs-per-host M`` (run, find, sweep).

A bare ``--ray`` (no address) starts a local Ray instance for the command; click options cannot take an
optional value, so ``bare_ray`` gives a bare ``--ray`` the value ``local`` before typer parses argv.
"""

from __future__ import annotations

from typing import Annotated

import typer

from satpoint.config import RayOptions

LOCAL = "local"

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
            out.append(LOCAL)
    return out


def ray_options(address: str | None, hosts: int | None, procs_per_host: int, procs: int = 1) -> RayOptions | None:
    """The Ray options the flags ask for (None without ``--ray``)."""
    if address is None:
        if hosts is not None or procs_per_host != 1:
            raise ValueError("--ray-hosts and --procs-per-host go with --ray")
        return None
    if procs != 1:
        raise ValueError("with --ray, give the processes of each host with --procs-per-host (not --procs)")
    return RayOptions(None if address == LOCAL else address, hosts, procs_per_host).validate()
