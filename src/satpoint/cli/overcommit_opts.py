"""``--resident K`` on ``run`` and ``find``: a model mix with at most K models loaded (``endpoints.overcommit``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import typer

from satpoint.cli.common import fail
from satpoint.payloads.mix import ModelMix

ResidentOpt = Annotated[
    int | None,
    typer.Option(help="a model mix with at most K models loaded: load on demand, unload the least recently used"),
]


def with_resident(mix: ModelMix | None, resident: int | None, procs: int = 1, ray: object = None) -> ModelMix | None:
    """``mix`` with at most ``resident`` models loaded (None: as it is); refused without a mix, and with
    more than one generator process (one emulated scheduler decides every load)."""
    if resident is None:
        return mix
    if mix is None:
        raise fail("--resident K needs a model mix: --model repeated, --models-from-server or --mix")
    if procs != 1 or ray is not None:
        raise fail("--resident emulates one scheduler: it runs in one generator process (--procs 1, no --ray)")
    if resident < 1:
        raise fail(f"--resident must be >= 1, got {resident}")
    return replace(mix, resident=resident)
