"""The model-repository API over REST (index, load, unload); the answers and errors both protocols share are
``transports.repository``'s."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from satpoint.errors import TargetUnreachable
from satpoint.transports.repository import ModelState, classify, parse_index, timed_out, wait_absent
from satpoint.transports.rest import rest_control
from satpoint.transports.tls import TlsOptions


@dataclass(frozen=True)
class RepositoryClient:
    """Index, load and unload through a server's model-repository API (REST).

    ``load_bodies``: per model, the body a load sends (Triton's configuration override, e.g. the embedded
    Triton's PyTriton models); others load with no body.  ``timeout_s`` bounds each call."""

    base_url: str
    headers: tuple[tuple[str, str], ...] = ()
    tls: TlsOptions | None = None
    timeout_s: float = 120.0
    load_bodies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)

    def _call(self, op: str, model: str | None, path: str, doc: object) -> Any:
        url = rest_control.endpoint_url(self.base_url, path)
        try:
            status, answer = rest_control.call_json(
                self.base_url, path, doc, self.headers, self.timeout_s, tls=self.tls
            )
        except TargetUnreachable as e:
            if "timed out" in str(e).lower():
                raise timed_out(url, op, model, self.timeout_s) from None
            raise
        error = classify(op, model, url, status, answer)
        if error is not None:
            raise error
        return answer

    def index(self) -> list[ModelState]:
        """Every model the repository holds, loaded or not."""
        return parse_index(self._call("repository index", None, "/v2/repository/index", {}))

    def load(self, model: str) -> float:
        """Load ``model``; returns the seconds until the server answered (it answers once loaded)."""
        body = self.load_bodies.get(model, {})
        t0 = time.perf_counter()
        self._call("load", model, f"/v2/repository/models/{model}/load", dict(body))
        return time.perf_counter() - t0

    def unload(self, model: str) -> float:
        """Unload ``model``; returns the seconds until the server answered (Triton answers before the
        unload is done: see ``wait_absent``)."""
        t0 = time.perf_counter()
        self._call("unload", model, f"/v2/repository/models/{model}/unload", {})
        return time.perf_counter() - t0

    def ready(self, model: str) -> bool:
        """Whether ``model`` answers ready now (``GET /v2/models/{m}/ready`` == 200)."""
        return rest_control.model_ready(self.base_url, model, headers=self.headers, tls=self.tls)

    def wait_absent(self, model: str, timeout_s: float = 30.0, poll_s: float = 0.01) -> float:
        """Until ``model`` no longer answers ready (an unload has finished); the seconds waited.  A
        ``RepositoryTimeout`` when it is still ready after ``timeout_s``."""
        return wait_absent(self.ready, model, timeout_s, poll_s)
