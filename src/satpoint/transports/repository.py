"""The model-repository API, what its REST client (``transports.rest.repository.RepositoryClient``) and its
gRPC client (``transports.grpc.grpc_repository``) share: index, load, unload (MLServer 1.7.1; Triton in
explicit mode).

Control-plane calls, off the hot path (stdlib HTTP through ``rest_control``, no proxy, no redirect).
What the servers do (read from their code, see the project's notes):

- ``POST /v2/repository/index`` (body ``{}``): a list of ``{name, version?, state, reason}``.
- ``POST /v2/repository/models/{m}/load``: answers only once the model is loaded (both servers).
  MLServer reloads a model that is already loaded and answers 404 for a name it cannot find on disk;
  Triton loads with an optional body (``{"parameters": {"config": ..., "file:...": ...}}``, a
  configuration override: PyTriton's models can only be loaded that way).
- ``POST /v2/repository/models/{m}/unload``: MLServer unloads before answering and answers 404 for a
  model that is not loaded; Triton answers at once (the unload finishes in the background) and answers
  success for a model that is not loaded, so ``wait_absent`` polls readiness until the model is gone.
- Triton refuses loads and unloads outside explicit mode (HTTP 503 "explicit model load / unload is not
  allowed if polling is enabled"), and PyTriton restricts the routes to an access token (HTTP 403).

Every failure is one clear error: ``ModelNotFound`` (404, or Triton's "failed to poll from model
repository"), ``RepositoryRefused`` (no repository API, wrong control mode, restricted),
``RepositoryTimeout`` (no answer within the timeout) or ``RepositoryError`` (anything else, with the
server's own words).  ``grpc_repository.GrpcRepositoryClient`` is the same over gRPC (``RepositoryControl``:
either).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from satpoint.errors import ModelNotFound, SatpointError
from satpoint.redact import redact_url


class RepositoryError(SatpointError):
    """A repository call failed (the message holds the server's answer)."""


class RepositoryRefused(RepositoryError):
    """The server has no usable repository API: absent, not in explicit mode, or restricted."""


class RepositoryTimeout(RepositoryError):
    """A repository call got no answer within its timeout."""


#: Triton outside explicit mode (none or poll): the core's words (HTTP 503, gRPC UNAVAILABLE)
NOT_EXPLICIT = "explicit model load / unload is not allowed"
#: Triton (explicit mode) asked to load a model its repository does not hold
NOT_IN_REPOSITORY = "failed to poll from model repository"
#: PyTriton's access restriction (HTTP 403)
_RESTRICTED = "this api is restricted"


@dataclass(frozen=True)
class ModelState:
    """One row of the repository index."""

    name: str
    version: str | None
    state: str  # READY, UNAVAILABLE, UNKNOWN, LOADING, UNLOADING
    reason: str = ""

    @property
    def ready(self) -> bool:
        return self.state.upper() == "READY"


def parse_index(doc: object) -> list[ModelState]:
    """The index answer as rows; a ``RepositoryError`` when it is not a list of models."""
    if not isinstance(doc, list):
        raise RepositoryError(f"the repository index is not a list: {str(doc)[:200]}")
    rows = []
    for item in doc:
        if not isinstance(item, dict) or not item.get("name"):
            raise RepositoryError(f"a repository index entry has no name: {str(item)[:200]}")
        version = item.get("version")
        rows.append(
            ModelState(
                name=str(item["name"]),
                version=None if version in (None, "") else str(version),
                state=str(item.get("state") or "UNKNOWN"),
                reason=str(item.get("reason") or ""),
            )
        )
    return rows


def _error_text(doc: Any) -> str:
    if isinstance(doc, dict) and "error" in doc:
        return str(doc["error"])
    return "" if doc is None else str(doc)[:300]


def call_name(op: str, model: str | None) -> str:
    """How an error names the call: ``load of 'm'``, ``repository index``."""
    return f"{op} of {model!r}" if model else op


def repository_error(
    op: str,
    model: str | None,
    url: str,
    text: str,
    said: str,
    *,
    restricted: bool,
    missing: bool,
    hint: str,
    other: SatpointError | None = None,
) -> SatpointError:
    """The error of a failed repository call, over either protocol: ``text`` is the server's words,
    ``said`` its answer as the protocol gives it (``HTTP 404: ...``, ``gRPC NOT_FOUND: ...``);
    ``restricted`` and ``missing`` what the protocol's status says (an access restriction, a model the
    repository lacks), ``hint`` how to give the access header, ``other`` the protocol's own verdict
    before a missing model (no repository API ...)."""
    where = redact_url(url)
    what = call_name(op, model)
    if NOT_EXPLICIT in text.lower():
        return RepositoryRefused(
            f"{where} refuses the {what}: Triton's model control mode is not explicit ({text}); start it with "
            "--model-control-mode=explicit"
        )
    if restricted:
        return RepositoryRefused(
            f"{where} restricts the repository API ({said}); give its access header with --header ({hint})"
        )
    if other is not None:
        return other
    if missing:
        return ModelNotFound(f"{where}: the {what} failed: model not found in its repository ({said})")
    return RepositoryError(f"{where}: the {what} failed: {said}")


def timed_out(url: str, op: str, model: str | None, timeout_s: float) -> RepositoryTimeout:
    return RepositoryTimeout(f"{redact_url(url)}: the {call_name(op, model)} got no answer within {timeout_s:g} s")


def classify(op: str, model: str | None, url: str, status: int, doc: Any) -> SatpointError | None:
    """The error for a repository call's answer (None: success).  Pure: the tests feed it answers."""
    if 200 <= status < 300:
        return None
    text = _error_text(doc)
    low = text.lower()
    no_api = model is None and status in (404, 405)
    return repository_error(
        op,
        model,
        url,
        text,
        f"HTTP {status}: {text}",
        restricted=status == 403 or _RESTRICTED in low,
        missing=status == 404 or NOT_IN_REPOSITORY in low,
        hint="PyTriton: triton-access-token: TOKEN",
        other=RepositoryRefused(f"{redact_url(url)} has no repository API (POST /v2/repository/index: HTTP {status})")
        if no_api
        else None,
    )


def wait_absent(ready: Callable[[str], bool], model: str, timeout_s: float = 30.0, poll_s: float = 0.01) -> float:
    """Poll ``ready(model)`` until it is False; the seconds waited (``RepositoryTimeout`` after ``timeout_s``)."""
    t0 = time.perf_counter()
    while ready(model):
        if time.perf_counter() - t0 > timeout_s:
            raise RepositoryTimeout(f"{model!r} was still ready {timeout_s:g} s after its unload")
        time.sleep(poll_s)
    return time.perf_counter() - t0


class RepositoryControl(Protocol):
    """What a repository client does, over either protocol (``RepositoryClient``: REST;
    ``grpc_repository.GrpcRepositoryClient``: gRPC): the same calls, answers and errors."""

    @property
    def base_url(self) -> str: ...

    def index(self) -> list[ModelState]: ...

    def load(self, model: str) -> float: ...

    def unload(self, model: str) -> float: ...

    def ready(self, model: str) -> bool: ...

    def wait_absent(self, model: str, timeout_s: float = 30.0, poll_s: float = 0.01) -> float: ...


def loaded_models(states: Sequence[ModelState]) -> list[str]:
    """The names of the index's ready models, in index order, once each."""
    seen: dict[str, None] = {}
    for s in states:
        if s.ready:
            seen.setdefault(s.name)
    return list(seen)
