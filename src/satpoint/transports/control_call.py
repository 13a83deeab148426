"""One inference a control client sends outside the load (the pre-flight's test request, a probe's, coldstart's)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Inference:
    """An encoded request for ``model``: REST's body (JSON, or Triton's binary tensors with their header in
    ``extra_headers``), gRPC's serialized ``ModelInferRequest`` (it names its model); ``timeout_s`` bounds
    each call."""

    body: bytes = field(repr=False)  # it may carry what the user sends: not in reprs
    model: str
    version: str | None = None
    extra_headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 30.0
