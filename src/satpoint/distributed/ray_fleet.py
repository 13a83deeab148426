"""Generator hosts as Ray actors: one per node, in a strict-spread placement group.

``RayFleet`` connects to Ray (or starts a local instance, and then stops it), reserves one bundle of
``procs_per_host`` CPUs on each of ``hosts`` distinct nodes, puts one actor in each and hands the
coordinator a ``ShardHost`` per actor.  Each actor is a ``HostWorker`` (``host``) running the existing
multi-process runner on its node, so the hot path is the one ``--procs`` uses, outside Ray's own
processes.  On the way out it kills its actors and removes its placement group whatever happened, and
shuts Ray down if it started it.

Ray is imported here only, when ``--ray`` asks for it; without it the one-line error names the extra.
Workers import satpoint from their own Python: install the same satpoint version on every node.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any

from satpoint.config import RayOptions
from satpoint.distributed.coordinator import HostLost, ShardHost, run_on_hosts
from satpoint.distributed.host import HostReport, HostWorker, ShardJob
from satpoint.engine.live import LiveSnapshot
from satpoint.engine.runner import RunOutput
from satpoint.errors import ConfigError

NO_RAY = "--ray needs Ray, which is not installed here: pip install 'satpoint[ray]'"
#: how long a placement group may take to be placed before the run gives up
PLACE_TIMEOUT_S = 60.0
#: how long one control call to an actor may take before its host counts as lost
CALL_TIMEOUT_S = 15.0
PREPARE_TIMEOUT_S = 120.0


def import_ray() -> ModuleType:
    """Ray, or the one-line error that names the extra."""
    try:
        import ray
    except ImportError:
        raise ConfigError(NO_RAY) from None
    return ray


class HostActor(HostWorker):
    """The actor class (made remote in ``RayFleet``): a ``HostWorker`` that also names its Ray node."""

    def __init__(self) -> None:
        super().__init__()

    def describe(self) -> dict[str, Any]:
        import ray

        return {**super().describe(), "node_id": ray.get_runtime_context().get_node_id()}

    def poll(self) -> tuple[HostReport | None, LiveSnapshot | None]:
        """The rows if the shard has ended, else the latest snapshot: one round trip per poll."""
        rep = self.result()
        return rep, (self.progress() if rep is None else None)


class RayHost:
    """A ``ShardHost`` for one actor: every call bounded in time, every Ray failure a ``HostLost``."""

    def __init__(self, ray: ModuleType, actor: Any, name: str) -> None:
        self._ray, self._actor, self.name = ray, actor, name
        self._snap: LiveSnapshot | None = None

    def _call(self, method: str, *args: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        ray = self._ray
        try:
            return ray.get(getattr(self._actor, method).remote(*args), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            # a host that stops answering must not keep sending unseen (rows nobody will merge): end it
            try:
                ray.kill(self._actor, no_restart=True)
            except Exception as e:
                raise HostLost(f"no answer to {method} within {timeout:g} s (not killed: {e})") from None
            raise HostLost(f"no answer to {method} within {timeout:g} s: its actor was killed") from None
        except ray.exceptions.RayActorError as e:
            raise HostLost(f"its actor died ({type(e).__name__})") from None
        except ray.exceptions.RayError as e:
            raise HostLost(f"{method} failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None

    def describe(self) -> dict[str, Any]:
        got: dict[str, Any] = self._call("describe")
        return got

    def clock(self) -> float:
        return float(self._call("clock"))

    def prepare(self, job: ShardJob, index: int) -> int:
        return int(self._call("prepare", job, index, timeout=PREPARE_TIMEOUT_S))

    def start(self, start_wall_s: float) -> dict[str, float]:
        got: dict[str, float] = self._call("start", start_wall_s)
        return got

    def progress(self) -> LiveSnapshot | None:
        return self._snap

    def stop(self) -> None:
        self._call("stop")

    def result(self) -> HostReport | None:
        rep, snap = self._call("poll", timeout=PREPARE_TIMEOUT_S)
        if snap is not None:
            self._snap = snap
        return rep  # type: ignore[no-any-return]


class RayFleet:
    """Ray generator hosts for one command: ``with RayFleet(options) as fleet: fleet.run(job, ...)``."""

    def __init__(self, options: RayOptions, log: Callable[[str], None] | None = None) -> None:
        self.options = options
        self._log = log or (lambda _: None)
        self._ray: ModuleType | None = None
        self._started_ray = False
        self._pg: Any = None
        self._actors: list[Any] = []
        self.hosts: list[ShardHost] = []

    @property
    def size(self) -> int:
        return len(self.hosts)

    def __enter__(self) -> RayFleet:
        ray = import_ray()
        self._ray = ray
        try:
            self._connect(ray)
            self._place(ray)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _connect(self, ray: ModuleType) -> None:
        if ray.is_initialized():
            return
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
        if self.options.address is None:
            self._log("starting a local Ray instance (stopped when the command ends)")
            self._started_ray = True
            ray.init(address="local", **kw)  # a new instance, never one a `ray start` left running here
        else:
            ray.init(address=self.options.address, **kw)
            self._log(f"attached to the Ray cluster at {self.options.address}")

    def _place(self, ray: ModuleType) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        per = self.options.procs_per_host
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= per]
        hosts = self.options.hosts or len(nodes)
        if hosts > len(nodes):
            raise ConfigError(
                f"--ray-hosts {hosts}: the Ray cluster has {len(nodes)} alive node(s) with {per} CPU(s) for "
                "--procs-per-host; one generator host per node"
            )
        name = f"satpoint-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._pg = placement_group([{"CPU": per}] * hosts, strategy="STRICT_SPREAD", name=name)
        try:
            ray.get(self._pg.ready(), timeout=PLACE_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise ConfigError(
                f"Ray could not place {hosts} generator host(s) of {per} CPU(s) on distinct nodes within "
                f"{PLACE_TIMEOUT_S:g} s (busy nodes?)"
            ) from None
        remote = ray.remote(max_concurrency=4)(HostActor)
        for i in range(hosts):
            strategy = PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=i)
            actor = remote.options(num_cpus=per, scheduling_strategy=strategy, name=f"{name}-{i}").remote()
            self._actors.append(actor)
            self.hosts.append(RayHost(ray, actor, f"host {i}"))
        self._log(f"{hosts} generator host(s) on Ray, {per} process(es) each")

    def run(
        self,
        job: ShardJob,
        *,
        on_snapshot: Callable[[LiveSnapshot], None] | None = None,
        stop_event: threading.Event | None = None,
        abort_when: Callable[[LiveSnapshot], bool] | None = None,
    ) -> tuple[RunOutput, dict[str, Any]]:
        out, block = run_on_hosts(
            self.hosts,
            job,
            on_snapshot=on_snapshot,
            stop_event=stop_event,
            abort_when=abort_when,
            lead_s=self.options.lead_s,
            align_s=self.options.align_ms / 1000,
        )
        block["address"] = self.options.address or "local"
        return out, block

    def close(self) -> None:
        """Kill this fleet's actors, remove its placement group, and stop Ray if this fleet started it."""
        ray = self._ray
        if ray is None:
            return
        for actor in self._actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception as e:  # already dead: nothing to stop
                self._log(f"actor already gone ({type(e).__name__})")
        self._actors.clear()
        self.hosts.clear()
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self._pg)
            except Exception as e:
                self._log(f"placement group not removed: {e}")
            self._pg = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
        self._ray = None
