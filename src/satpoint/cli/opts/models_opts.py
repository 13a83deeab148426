"""Many models on the embedded server (``find``, ``sweep``): ``--demo-models N`` (MLServer or Triton),
``--model-repo DIR`` (MLServer), ``sweep --server-memory-mb`` (the budget a sweep over ``models=``
recommends a count within)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from satpoint.cli.common import fail

_COPIES = "embedded server: serve N independent copies of the demo model (iris-000…, each trained and loaded apart)"
DemoModelsOpt = Annotated[int | None, typer.Option(min=1, help=_COPIES)]
ModelRepoOpt = Annotated[Path | None, typer.Option(help="embedded MLServer: serve every model folder under DIR")]
ServerMemoryMbOpt = Annotated[float | None, typer.Option(help="sweep over models=: the server's memory budget, MB")]


def many_models(url: str | None, demo_models: int | None, model_repo: Path | None) -> dict[str, Any]:
    """The options given, as ``MLServerSettings`` fields (Triton: ``servers.embedded``); with a URL a usage error."""
    chosen = {k: v for k, v in {"demo_models": demo_models, "model_repo": model_repo}.items() if v is not None}
    if url is not None and chosen:
        raise fail(f"{', '.join('--' + k.replace('_', '-') for k in chosen)} describe the embedded server, not --url")
    return chosen
