"""The control-plane client of an OIP REST target: readiness, metadata, one inference (or one whole stream),
timed inferences for the probes, the model repository and Triton's statistics, through one object.

``RestControl`` is ``repository.RepositoryClient`` (index, load, unload, ``wait_absent``, with its errors)
and the calls of ``rest_control`` bound to the target's URL, headers (credentials included) and TLS: stdlib
HTTP, no proxy, no redirect followed, errors naming the URL redacted.  ``timeout_s`` bounds each
repository call; the other calls keep their own limits (5 s for a control call, 30 s for an inference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from satpoint.transports.control_call import Inference
from satpoint.transports.rest import rest_control
from satpoint.transports.rest.repository import RepositoryClient


@dataclass(frozen=True)
class RestControl(RepositoryClient):
    """Every control call to one REST target (``base_url``: ``http[s]://host[:port][/prefix][?query]``)."""

    #: the status of a successful inference (HTTP)
    ok_status: ClassVar[int] = 200

    def live(self) -> bool:
        """``GET /v2/health/live`` == 200."""
        return rest_control.server_live(self.base_url, self.headers, tls=self.tls)

    def ready(self, model: str | None = None) -> bool:
        """The server's readiness (``GET /v2/health/ready``), or ``model``'s (``GET /v2/models/M/ready``)."""
        if model is None:
            return rest_control.server_ready(self.base_url, self.headers, tls=self.tls)
        return rest_control.model_ready(self.base_url, model, headers=self.headers, tls=self.tls)

    def metadata(self, model: str, version: str | None = None) -> dict[str, Any]:
        """``GET /v2/models/M``; ``ModelNotFound`` naming the models the server has when it is not there."""
        return rest_control.model_metadata(self.base_url, model, version, self.headers, tls=self.tls)

    def server_metadata(self) -> dict[str, Any] | None:
        """``GET /v2`` as JSON (None when the server does not answer it with a JSON object)."""
        status, doc = self.call_json("/v2")
        return doc if status == 200 and isinstance(doc, dict) else None

    def infer_one(self, call: Inference, stream: bool = False) -> tuple[int, str, bytes]:
        """One inference (``stream``: one whole ``infer_stream``): the HTTP status, its description and the
        answer's body."""
        route = "infer_stream" if stream else "infer"
        headers = (*self.headers, *call.extra_headers)
        status, body = rest_control.infer_once(
            self.base_url, call.model, call.body, call.version, headers, call.timeout_s, tls=self.tls, route=route
        )
        return status, f"HTTP {status}", body

    def timed_infers(self, call: Inference, count: int, give_up_after_s: float | None = None) -> list[float]:
        """The seconds of ``count`` sequential inferences over one kept-alive connection
        (``rest_control.timed_infers``)."""
        headers = (*self.headers, *call.extra_headers)
        return rest_control.timed_infers(
            self.base_url, call, count, headers, tls=self.tls, give_up_after_s=give_up_after_s
        )

    def call_json(self, path: str, doc: object | None = None, timeout_s: float = 5.0) -> tuple[int, Any]:
        """``GET`` (``doc`` None) or ``POST`` a JSON document to ``path`` after the URL's prefix: the status and
        the parsed answer (None when empty or not JSON)."""
        return rest_control.call_json(self.base_url, path, doc, self.headers, timeout_s, tls=self.tls)

    def url(self, path: str) -> str:
        """Where ``path`` is on this target (its prefix and query kept, its userinfo dropped)."""
        return rest_control.endpoint_url(self.base_url, path)

    def statistics_url(self, model: str) -> str:
        """Where Triton's statistics of ``model`` are (the observer scrapes them)."""
        return self.url(f"/v2/models/{model}/stats")

    def statistics(self, model: str) -> dict[str, Any] | None:
        """Triton's statistics of ``model`` (``GET /v2/models/M/stats``); None where the server has none."""
        status, doc = self.call_json(f"/v2/models/{model}/stats")
        return doc if status == 200 and isinstance(doc, dict) else None
