"""What satpoint attaches to: a target's description, and the same target once prepared for a test."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Target:
    url: str
    model: str
    version: str | None = None
    protocol: str = "rest"
    headers: tuple[tuple[str, str], ...] = ()
    payload_file: Path | None = None
    batch_size: int = 1
    grpc_raw: bool = False

    def describe(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "model": self.model,
            "version": self.version,
            "protocol": self.protocol,
            "headers": [f"{k}: {v}" for k, v in self.headers],
            "payload_file": str(self.payload_file) if self.payload_file else None,
            "batch_size": self.batch_size,
        }


@dataclass
class PreparedTarget:
    spec: Target
    metadata: dict[str, Any]
    payload_docs: list[dict[str, Any]]
    builder: Any  # FactoryBuilder
    payload_bytes: int
    notes: list[str] = field(default_factory=list)
    #: how long a request took before the run (the pre-flight test request, or a probe): sizes the
    #: automatic in-flight cap for slow servers
    latency_hint_s: float | None = None
