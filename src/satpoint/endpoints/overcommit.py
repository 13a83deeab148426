"""A model mix with at most K models resident: the prepared target's transport wrapped in
``transports.overcommit`` (load on demand, least recently used evicted), emulating an overcommitting
scheduler's policy (Seldon Core 2's agent) from the client's side; it is not Seldon's code.

``with_resident`` settles the server before any load (the K most popular models of the mix loaded, the
others unloaded, through the repository API) and returns the target whose recipe keeps that residency
from one segment to the next (a search's stages see the residency the previous one left)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from satpoint.endpoints.repository import repository_client
from satpoint.endpoints.spec import PreparedTarget, Target
from satpoint.errors import ConfigError
from satpoint.transports.control import REPOSITORY_TIMEOUT_S
from satpoint.transports.overcommit import OvercommitBuilder, load_failed, settle
from satpoint.transports.repository import ModelState, RepositoryControl, loaded_models

#: a load or unload may take this long (a large model, a slow disk)
CONTROL_TIMEOUT_S = REPOSITORY_TIMEOUT_S
#: a model loaded back at the end must answer ready within this long after its load answered
READY_WAIT_S = 10.0


def _client(spec: Target) -> RepositoryControl:
    """The repository API over the target's own protocol (REST or gRPC: ``endpoints.repository``)."""
    return repository_client(spec, CONTROL_TIMEOUT_S)


def _first_k(weights: Sequence[float], k: int) -> tuple[int, ...]:
    """The ``k`` most popular models (ties: the order given)."""
    return tuple(int(i) for i in np.argsort(-np.asarray(weights, dtype=np.float64), kind="stable")[:k])


def loading(
    client: RepositoryControl,
    prepare_one: Callable[[Target], PreparedTarget],
    names: Sequence[str],
    weights: Sequence[float],
    resident: int,
) -> Callable[[Target], PreparedTarget]:
    """``prepare_one`` for a mix with at most ``resident`` models loaded: a model that is not loaded (a
    previous run evicted it) is loaded to be prepared (its metadata, a test request), then unloaded again
    unless it is one of the ``resident`` most popular; so no more than ``resident`` + 1 are ever loaded.
    ``client``: the target's control client (``transports.control``)."""
    keep = {names[i] for i in _first_k(weights, min(resident, len(names)))}

    def prepare_loaded(one: Target) -> PreparedTarget:
        loaded_here = not client.ready(one.model)
        if loaded_here:
            client.load(one.model)
        prepared = prepare_one(one)
        if loaded_here and one.model not in keep:
            client.unload(one.model)
        return prepared

    return prepare_loaded


def with_resident(prepared: PreparedTarget, resident: int) -> PreparedTarget:
    """``prepared`` (a mix) with at most ``resident`` of its models loaded at any time."""
    mix = prepared.mix
    spec = prepared.spec
    if mix is None:
        raise ConfigError("--resident K needs a model mix (--model repeated, or --models-from-server)")
    if resident < 1:
        raise ConfigError(f"--resident must be >= 1, got {resident}")
    names = mix.names
    k = min(resident, len(names))
    initial = _first_k(mix.weights, k)
    client = prepared.control if prepared.control is not None else _client(spec)
    settle(client, names, initial)
    payload_model = tuple(i // mix.per_model for i in range(len(prepared.payload_docs)))
    cap = getattr(prepared.builder, "max_inflight", None)
    builder = OvercommitBuilder(
        prepared.builder, client, names, payload_model, k, initial, max_inflight=cap, failed=load_failed(spec.protocol)
    )
    note = (
        f"at most {k} of the {len(names)} models resident (load on demand, least recently used unloaded): an "
        "overcommitting scheduler's policy emulated by satpoint, not Seldon's code; the cost shows in latency"
    )
    return replace(prepared, builder=builder, notes=[*prepared.notes, note])


@dataclass
class LoadedSet:
    """The models of a mix the server had loaded before a ``--resident`` run (``loaded``), and the ones
    it did not (``unloaded``: named in the mix but not loaded; a run loads them on demand)."""

    client: RepositoryControl
    loaded: tuple[str, ...]
    unloaded: tuple[str, ...] = ()
    errors: list[str] = field(default_factory=list)
    #: the versions the index listed READY per loaded model before (empty: no index, or no versions in it)
    versions: dict[str, frozenset[str]] = field(default_factory=dict)

    def restore(self) -> list[str]:
        """Load every model that was loaded and is not now, unload those of the mix that were not loaded
        and are now; returns what it did (``load m`` / ``unload m``), failures in ``errors``."""
        done: list[str] = []
        for name in self.unloaded:
            with contextlib.suppress(Exception):
                if self.client.ready(name):
                    self.client.unload(name)
                    self.client.wait_absent(name)
                    done.append(f"unload {name}")
        for name in self.loaded:
            try:
                if not self.client.ready(name):
                    self.client.load(name)
                    if not self._ready_within(name, READY_WAIT_S):  # the load answered; the model must serve
                        raise RuntimeError(f"the load answered, but the model is not ready after {READY_WAIT_S:g} s")
                    done.append(f"load {name}")
            except Exception as e:
                self.errors.append(f"load {name}: {e}")
        self._check_versions()
        return done

    def _check_versions(self) -> None:
        """Every version the index listed READY before is READY again (a load by name may bring another
        version back: the repository's newest, not the one the server served)."""
        if not any(self.versions.values()):
            return
        try:
            now = ready_versions(self.client.index())
        except Exception as e:
            self.errors.append(f"the repository index after the restore: {e}")
            return
        for name, before in self.versions.items():
            if missing := sorted(before - now.get(name, frozenset())):
                has = ", ".join(sorted(now.get(name, frozenset()))) or "none"
                self.errors.append(f"load {name}: version {', '.join(missing)} was ready before, now ready: {has}")

    def _ready_within(self, name: str, wait_s: float) -> bool:
        end = time.monotonic() + wait_s
        while not self.client.ready(name):
            if time.monotonic() > end:
                return False
            time.sleep(0.05)
        return True


def record_loaded(spec: Target) -> LoadedSet:
    """The server's loaded set before a ``--resident`` run settles it: every READY model of the index
    (``--models-from-server``: the mix), and the mix's named models that are not loaded."""
    client = _client(spec)
    mix = spec.mix
    named = tuple(mix.models) if mix is not None and not mix.from_server else ()
    versions: dict[str, frozenset[str]] = {}
    try:
        index = client.index()
        ready = loaded_models(index)
        versions = {m: v for m, v in ready_versions(index).items() if m in ready and v}
    except Exception:  # no index (a server with the load/unload calls only): ask each named model
        if not named:
            raise
        ready = [m for m in named if client.ready(m)]
    return LoadedSet(client, tuple(ready), tuple(m for m in named if m not in ready), versions=versions)


def ready_versions(index: Sequence[ModelState]) -> dict[str, frozenset[str]]:
    """The versions the index lists READY, per model name (a row without a version adds none)."""
    out: dict[str, set[str]] = {}
    for row in index:
        if row.ready:
            out.setdefault(row.name, set()).update([row.version] if row.version else [])
    return {m: frozenset(v) for m, v in out.items()}
