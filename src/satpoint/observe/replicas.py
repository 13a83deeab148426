"""The replica count of an autoscaled deployment, read once a second beside the load (``satpoint scale-test``).

Three sources: the Kubernetes API (plain GETs of a Deployment, StatefulSet or HPA: its ready and desired counts),
a Prometheus HTTP API query (``/api/v1/query``; the values of every series returned are summed, so
a per-pod query counts pods) and a command that prints a number (the ready count; a second number on its line is
the desired count).  ``check`` reads the source once before any load: a source that cannot be read, or a query that
returns no series, is a ``ConfigError`` of one line.  ``ReplicaWatcher`` reads it every second in a thread of its
own and keeps every reading with its time on the monotonic clock (the run clock's, ``t0_monotonic``);
``settle`` waits, before the load, until the counts stop changing.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import threading
import time
import urllib.error
import urllib.parse
from dataclasses import dataclass
from typing import Protocol

from satpoint.errors import ConfigError
from satpoint.observe.prom import fetch
from satpoint.redact import redact_url

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Reading:
    """One reading: ``mono_s`` (``time.perf_counter``: CLOCK_MONOTONIC, the run clock's), the ready and desired
    counts (None: the source has none), or the ``error`` that kept the source from answering."""

    mono_s: float
    ready: float | None
    desired: float | None = None
    error: str | None = None


class ReplicaSource(Protocol):
    name: str

    def read(self) -> tuple[float, float | None]:
        """(ready, desired or None); ``ConfigError`` saying why there is no reading."""
        ...


class CommandSource:
    """``--replicas-cmd CMD``: run by the shell, its output's first number is the ready count, a second the desired
    count."""

    def __init__(self, command: str, timeout_s: float = 5.0) -> None:
        self.command = command
        self.timeout_s = timeout_s
        self.name = f"--replicas-cmd {command!r}"

    def read(self) -> tuple[float, float | None]:
        try:
            done = subprocess.run(
                self.command, shell=True, capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise ConfigError(f"{self.name} did not finish within {self.timeout_s:g} s") from None
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
            raise ConfigError(f"{self.name} failed (exit {done.returncode}): {tail}")
        numbers = [float(x) for x in _NUMBER.findall(done.stdout)]
        if not numbers:
            raise ConfigError(f"{self.name} printed no number (it printed {done.stdout.strip()[:80]!r})")
        return numbers[0], numbers[1] if len(numbers) > 1 else None


class PromSource:
    """``--replicas-prom URL --replicas-query Q`` (and ``--replicas-desired-query``): instant queries on the
    Prometheus HTTP API; each the sum of the series it returns."""

    def __init__(self, url: str, query: str, desired_query: str | None = None, timeout_s: float = 3.0) -> None:
        self.url = url.rstrip("/")
        self.query = query
        self.desired_query = desired_query
        self.timeout_s = timeout_s
        self.name = f"--replicas-prom {redact_url(self.url)}"

    def _query(self, query: str) -> float:
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
        try:
            doc = json.loads(fetch(address, self.timeout_s))
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode(errors="replace")
            raise ConfigError(f"{self.name}: the query {query!r} was refused (HTTP {e.code}): {detail}") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"{self.name}: cannot reach Prometheus: {getattr(e, 'reason', e)}") from None
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, dict) or doc.get("status") != "success":
            raise ConfigError(f"{self.name}: not a Prometheus query answer for {query!r}")
        result = data.get("result")
        if data.get("resultType") == "scalar" and isinstance(result, list) and len(result) == 2:
            return float(result[1])
        if not isinstance(result, list) or not result:
            raise ConfigError(f"{self.name}: the query {query!r} returned no series")
        values = [float(s["value"][1]) for s in result]
        return math.fsum(values)

    def read(self) -> tuple[float, float | None]:
        ready = self._query(self.query)
        return ready, self._query(self.desired_query) if self.desired_query else None


#: ``--replicas-k8s NAMESPACE/KIND/NAME``: the API path of each kind, and the status fields of its ready and desired
#: counts (Kubernetes API reference: apps/v1 Deployment and StatefulSet, autoscaling/v2 HorizontalPodAutoscaler)
K8S_KINDS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "deployment": ("apis/apps/v1/namespaces/{ns}/deployments/{name}", ("status", "readyReplicas"),
                   ("spec", "replicas")),
    "statefulset": ("apis/apps/v1/namespaces/{ns}/statefulsets/{name}", ("status", "readyReplicas"),
                    ("spec", "replicas")),
    "hpa": ("apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{name}", ("status", "currentReplicas"),
            ("status", "desiredReplicas")),
}  # fmt: skip


class K8sSource:
    """``--replicas-k8s NAMESPACE/KIND/NAME`` on ``--replicas-k8s-url`` (e.g. ``kubectl proxy``'s
    ``http://127.0.0.1:8001``, or the API server with ``--replicas-k8s-token-file``): plain GETs of the resource."""

    def __init__(self, url: str, resource: str, token: str | None = None, timeout_s: float = 3.0) -> None:
        parts = resource.strip().split("/")
        kind = parts[1].lower().removesuffix("s") if len(parts) == 3 else ""
        kind = {"horizontalpodautoscaler": "hpa"}.get(kind, kind)
        if len(parts) != 3 or kind not in K8S_KINDS or not parts[0] or not parts[2]:
            raise ConfigError(
                f"--replicas-k8s {resource!r}: expected NAMESPACE/KIND/NAME with KIND one of {', '.join(K8S_KINDS)}"
            )
        path, self._ready, self._desired = K8S_KINDS[kind]
        self.address = f"{url.rstrip('/')}/{path.format(ns=parts[0], name=parts[2])}"
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s
        self.name = f"--replicas-k8s {resource}"

    def read(self) -> tuple[float, float | None]:
        try:
            doc = json.loads(fetch(self.address, self.timeout_s, self.headers))
        except urllib.error.HTTPError as e:
            raise ConfigError(f"{self.name}: the API answered HTTP {e.code} ({e.reason})") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"{self.name}: cannot reach the Kubernetes API: {getattr(e, 'reason', e)}") from None

        def field(path: tuple[str, ...]) -> float | None:
            node: object = doc
            for key in path:
                node = node.get(key) if isinstance(node, dict) else None
            return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None

        if not isinstance(doc, dict) or "status" not in doc:
            raise ConfigError(f"{self.name}: the answer is not the resource (no status)")
        ready = field(self._ready)
        return (0.0 if ready is None else ready), field(self._desired)  # no readyReplicas: none is ready


def check(source: ReplicaSource) -> Reading:
    """Read ``source`` once (before any load): a ``ConfigError`` of one line if it cannot be read."""
    ready, desired = source.read()
    return Reading(time.perf_counter(), ready, desired)


def settle(
    source: ReplicaSource, quiet_s: float, max_s: float, every_s: float = 1.0, stop: threading.Event | None = None
) -> tuple[bool, list[Reading]]:
    """Read ``source`` every ``every_s`` until its counts stayed the same for ``quiet_s`` (True), or ``max_s``
    passed (False); every reading kept.  A reading that fails ends it with that ``ConfigError``."""
    stop = stop or threading.Event()
    start = last_change = time.perf_counter()
    readings: list[Reading] = []
    while True:
        now = time.perf_counter()
        ready, desired = source.read()
        if readings and (ready, desired) != (readings[-1].ready, readings[-1].desired):
            last_change = now
        readings.append(Reading(now, ready, desired))
        if now - last_change >= quiet_s:
            return True, readings
        if now - start >= max_s or stop.is_set():
            return False, readings
        stop.wait(every_s)


class ReplicaWatcher:
    """Reads ``source`` every ``every_s`` in a thread of its own, from ``start`` to ``stop``; ``readings`` keeps
    them all (a failed reading keeps its error, and counts as no reading)."""

    def __init__(self, source: ReplicaSource, every_s: float = 1.0) -> None:
        self.source = source
        self.every_s = every_s
        self.readings: list[Reading] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="satpoint-replicas", daemon=True)

    def _loop(self) -> None:
        next_s = time.perf_counter()
        while not self._stop.is_set():
            at_s = time.perf_counter()
            try:
                ready, desired = self.source.read()
                self.readings.append(Reading(at_s, ready, desired))
            except ConfigError as e:
                self.readings.append(Reading(at_s, None, None, str(e)))
            next_s += self.every_s
            self._stop.wait(max(0.0, next_s - time.perf_counter()))

    def start(self) -> ReplicaWatcher:
        self._thread.start()
        return self

    def stop(self) -> list[Reading]:
        self._stop.set()
        self._thread.join(timeout=10.0)
        return list(self.readings)

    def __enter__(self) -> ReplicaWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
