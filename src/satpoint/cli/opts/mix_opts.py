"""Model mixes on ``run``, ``find`` and ``sweep``: ``--model`` repeated, ``--models-from-server``, ``--mix``
(the mix itself: ``satpoint.payloads.mix``)."""

from __future__ import annotations

from typing import Annotated

import typer

from satpoint.cli.common import fail
from satpoint.errors import ConfigError
from satpoint.payloads.mix import ModelMix

ModelsOpt = Annotated[
    list[str] | None,
    typer.Option("--model", "-m", help="model name; repeat it for a model mix (--model a --model b, see --mix)"),
]
ModelsFromServerOpt = Annotated[
    bool,
    typer.Option(
        "--models-from-server", help="a model mix over every READY model of the server's repository index (REST)"
    ),
]
MixOpt = Annotated[
    str | None,
    typer.Option(
        help="a model mix's weights: uniform (default), zipf:S (the first model most popular) or a CSV/JSON file of "
        "weights per model; each request's model is drawn, seeded, before the run"
    ),
]


def model_mix(
    models: list[str] | None, from_server: bool, mix: str | None, *, managed: bool = False
) -> tuple[str | None, ModelMix | None]:
    """The single model asked for (None: none given) and the mix (None: one model, as before mixes).
    ``managed`` (a server satpoint starts, e.g. ``--demo-models N``): ``--mix`` alone mixes every model it serves."""
    names = list(models or [])
    from_server = from_server or (managed and mix is not None and not names)
    if not from_server and len(names) <= 1 and mix is None:
        return (names[0] if names else None), None
    try:
        chosen = ModelMix(tuple(names), from_server, mix or "uniform").validate()
    except ConfigError as e:
        raise fail(str(e)) from None
    return (names[0] if names else ""), chosen
