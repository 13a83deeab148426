"""Generator hosts as Ray actors: one per node, in a strict-spread placement group.

``RayFleet`` connects to Ray (or starts a local instance, and then stops it), reserves one bundle of
``procs_per_host`` CPUs on each of ``hosts`` distinct nodes, puts one actor in each and hands the
coordinator a ``ShardHost`` per actor.  Each actor is a ``HostWorker`` (``host``) running the existing
multi-process runner on its node, so the hot path is the one ``--procs`` uses, outside Ray's own
processes.  On the way out it kills its actors and removes its placement group whatever happened, and
shuts Ray down if it started it.

Before each segment every actor must answer: one that died (killed, its node gone, or given up by the
coordinator) is replaced by a new actor in the same bundle; when that fails too the fleet shrinks and
the schedule is striped over the hosts left.  The segment's notes say which.  A loopback target is
refused when a host is on another machine than the driver (it would load its own loopback).

Ray is imported here only, when ``--ray`` asks for it; without it the one-line error names the extra.
Workers import satpoint from their own Python: install the same satpoint version on every node.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import ModuleType, TracebackType
from typing import Any

from satpoint.config import RayOptions
from satpoint.distributed.coordinator import ROWS_TIMEOUT_S, HostLost, ShardHost, run_on_hosts
from satpoint.distributed.host import HostReport, HostWorker, ShardJob
from satpoint.engine.live import LiveSnapshot
from satpoint.engine.runner import RunOutput
from satpoint.errors import ConfigError, RunFailed

NO_RAY = "--ray needs Ray, which is not installed here: pip install 'satpoint[ray]'"
#: how long a placement group may take to be placed before the run gives up
PLACE_TIMEOUT_S = 60.0
#: how long one control call to an actor may take before its host counts as lost
CALL_TIMEOUT_S = 15.0
PREPARE_TIMEOUT_S = 120.0
#: how long a new actor replacing a lost one may take to answer
REPLACE_TIMEOUT_S = 30.0


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

        return {
            **super().describe(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
        }


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

    def prepare(self, job: ShardJob, index: int) -> dict[str, float]:
        got: dict[str, float] = self._call("prepare", job, index, timeout=PREPARE_TIMEOUT_S)
        return got

    def start(self, start_wall_s: float) -> dict[str, float]:
        got: dict[str, float] = self._call("start", start_wall_s)
        return got

    def poll(self) -> tuple[bool, LiveSnapshot | None]:
        done, snap = self._call("poll")
        return bool(done), snap

    def stop(self) -> None:
        self._call("stop")

    def result(self) -> HostReport:
        rep = self._call("result", timeout=ROWS_TIMEOUT_S)
        if rep is None:
            raise HostLost("no rows: its shard had not ended")
        return rep  # type: ignore[no-any-return]

    def abandon(self) -> None:
        with contextlib.suppress(Exception):  # already gone
            self._ray.kill(self._actor, no_restart=True)


class RayFleet:
    """Ray generator hosts for one command: ``with RayFleet(options) as fleet: fleet.run(job, ...)``."""

    def __init__(self, options: RayOptions, log: Callable[[str], None] | None = None) -> None:
        self.options = options
        self._log = log or (lambda _: None)
        self._ray: ModuleType | None = None
        self._started_ray = False
        self._pg: Any = None
        self._name = ""
        self._remote: Any = None
        self._actors: list[Any] = []
        self._bundles: list[int] = []  # the placement-group bundle of each actor
        self._replaced = 0
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
        address = self.options.address
        if ray.is_initialized():  # this process is connected already (the API in a notebook, say)
            current = _current_address(ray)
            if address not in (None, "auto") and not _same_address(address, current):
                raise ConfigError(
                    f"--ray {address}: this process is connected to the Ray cluster at {current or 'unknown'} "
                    "already; call ray.shutdown() first, or ask for that cluster (or 'auto')"
                )
            self._log(f"using this process's Ray connection ({current or 'address unknown'})")
            return
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
        try:
            if address is None:
                self._log("starting a local Ray instance (stopped when the command ends)")
                self._started_ray = True
                ray.init(address="local", **kw)  # a new instance, never one a `ray start` left running here
            else:
                ray.init(address=address, **kw)
                self._log(f"attached to the Ray cluster at {address}")
        except Exception as e:
            where = "cannot start a local Ray instance" if address is None else f"cannot attach to Ray at {address}"
            raise ConfigError(f"--ray {address or 'local'}: {where}: {_first_line(e)}") from None

    def _place(self, ray: ModuleType) -> None:
        from ray.util.placement_group import placement_group

        per = self.options.procs_per_host
        where = self.options.address or "local"
        alive = [n for n in ray.nodes() if n.get("Alive")]
        nodes = [n for n in alive if n.get("Resources", {}).get("CPU", 0) >= per]
        hosts = self.options.hosts or len(nodes)
        if hosts == 0 or hosts > len(nodes):
            cpus = ", ".join(
                f"{n.get('NodeManagerAddress', '?')}: {n.get('Resources', {}).get('CPU', 0):g}" for n in alive
            )
            asked = f"--ray-hosts {hosts}" if self.options.hosts else "--ray"
            raise ConfigError(
                f"{asked} ({where}): the Ray cluster has {len(nodes)} alive node(s) with the {per} CPU(s) of "
                f"--procs-per-host {per} (CPUs per node: {cpus or 'no alive node'}); one generator host per node"
            )
        name = f"satpoint-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._name = name
        try:
            self._pg = placement_group([{"CPU": per}] * hosts, strategy="STRICT_SPREAD", name=name)
            ray.get(self._pg.ready(), timeout=PLACE_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise ConfigError(
                f"Ray ({where}) could not place {hosts} generator host(s) of {per} CPU(s) on distinct nodes within "
                f"{PLACE_TIMEOUT_S:g} s (busy nodes?)"
            ) from None
        except Exception as e:
            raise ConfigError(
                f"Ray ({where}) could not place {hosts} generator host(s) of {per} CPU(s): {_first_line(e)}"
            ) from None
        self._remote = ray.remote(max_concurrency=4)(HostActor)
        for i in range(hosts):
            self._actors.append(self._new_actor(i, f"{name}-{i}"))
            self._bundles.append(i)
            self.hosts.append(RayHost(ray, self._actors[-1], f"host {i}"))
        self._log(f"{hosts} generator host(s) on Ray, {per} process(es) each")

    def _new_actor(self, bundle: int, name: str) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=bundle)
        per = self.options.procs_per_host
        return self._remote.options(num_cpus=per, scheduling_strategy=strategy, name=name).remote()

    def ensure_hosts(self) -> tuple[list[str], list[dict[str, Any]]]:
        """Before a segment: every actor answers, or is replaced by a new one in its bundle, or (when
        that fails too) the fleet shrinks to the hosts left.  Returns what was done (for the segment's
        notes) and each host's ``describe()``."""
        ray = self._ray
        assert ray is not None
        notes: list[str] = []
        infos = _answers(ray, self._actors, CALL_TIMEOUT_S)
        keep: list[int] = []
        for i, info in enumerate(infos):
            if isinstance(info, dict):
                keep.append(i)
                continue
            self._kill(self._actors[i])
            self._replaced += 1
            actor = self._new_actor(self._bundles[i], f"{self._name}-{self._bundles[i]}-r{self._replaced}")
            (got,) = _answers(ray, [actor], REPLACE_TIMEOUT_S)
            if isinstance(got, dict):
                self._actors[i], infos[i] = actor, got
                keep.append(i)
                notes.append(
                    f"generator host {i} did not answer before this segment ({info}): a new actor replaced it "
                    f"on node {got.get('node_ip', '?')}"
                )
                self._log(notes[-1])
            else:
                self._kill(actor)
                notes.append(
                    f"generator host {i} did not answer before this segment ({info}) and could not be replaced "
                    f"({got}): the schedule is striped over the {len(self._actors) - (i + 1 - len(keep))} host(s) left"
                )
                self._log(notes[-1])
        if len(keep) < len(self._actors):
            self._actors = [self._actors[i] for i in keep]
            self._bundles = [self._bundles[i] for i in keep]
            infos = [infos[i] for i in keep]
        if not self._actors:
            raise RunFailed("every generator host was lost and none could be replaced: " + "; ".join(notes))
        self.hosts = [RayHost(ray, a, f"host {n}") for n, a in enumerate(self._actors)]
        return notes, [i for i in infos if isinstance(i, dict)]

    def _kill(self, actor: Any) -> None:
        assert self._ray is not None
        try:
            self._ray.kill(actor, no_restart=True)
        except Exception as e:  # already gone
            self._log(f"actor already gone ({type(e).__name__})")

    def run(
        self,
        job: ShardJob,
        *,
        on_snapshot: Callable[[LiveSnapshot], None] | None = None,
        stop_event: threading.Event | None = None,
        abort_when: Callable[[LiveSnapshot], bool] | None = None,
    ) -> tuple[RunOutput, dict[str, Any]]:
        """Run one segment's ``job`` (cut for ``size`` hosts) on the hosts, replacing lost ones first;
        when the fleet had to shrink, the job is re-striped over the hosts left."""
        ray = self._ray
        assert ray is not None
        healed, infos = self.ensure_hosts()
        refusal = loopback_refusal(job, _driver_ip(ray), [str(i.get("node_ip", "")) for i in infos])
        if refusal is not None:
            raise ConfigError(refusal)
        if job.hosts != len(self.hosts):
            job = restripe(job, len(self.hosts))
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
        out.notes[:0] = healed
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
        self._bundles.clear()
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


def restripe(job: ShardJob, hosts: int) -> ShardJob:
    """``job`` cut for ``hosts`` hosts instead of ``job.hosts`` (the fleet shrank): the same schedule,
    and each host's share of the in-flight cap grown so the hosts together keep the cap."""
    per = getattr(job.build, "max_inflight", None)
    resize = getattr(job.build, "with_max_inflight", None)
    build = job.build
    if isinstance(per, int) and callable(resize):
        build = resize(max(1, -(-per * job.hosts // hosts)))
    return replace(job, hosts=hosts, build=build)


def target_host(job: ShardJob) -> str | None:
    """The host name or address the job's requests go to (None: not known from its builder)."""
    build = job.build
    host = getattr(build, "host", None)
    if host is None:
        host = getattr(getattr(build, "target", None), "host", None)
    return host if isinstance(host, str) else None


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def loopback_refusal(job: ShardJob, driver_ip: str | None, node_ips: Sequence[str]) -> str | None:
    """Why a loopback target cannot be loaded from these hosts (None: it can): a host on another machine
    than the driver would send to its own loopback, where the target is not."""
    host = target_host(job)
    if host is None or not is_loopback(host):
        return None
    others = sorted({ip for ip in node_ips if ip and ip != driver_ip})
    if not others:
        return None
    return (
        f"the target is on loopback ({host}), but generator host(s) run on other machines ({', '.join(others)}; "
        f"this one is {driver_ip or 'unknown'}): each would load its own loopback. Give --ray a target address "
        "the hosts can reach (a remote --url; embedded servers listen on 127.0.0.1 only), or run without --ray"
    )


def _answers(ray: ModuleType, actors: Sequence[Any], timeout_s: float) -> list[dict[str, Any] | str]:
    """Each actor's ``describe()``, asked of all at once; for those that did not answer, why."""
    refs = [a.describe.remote() for a in actors]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    done = set(ready)
    out: list[dict[str, Any] | str] = []
    for ref in refs:
        if ref not in done:
            out.append(f"no answer within {timeout_s:g} s")
            continue
        try:
            out.append(dict(ray.get(ref, timeout=0)))
        except Exception as e:
            out.append(f"its actor died ({type(e).__name__})")
    return out


def _driver_ip(ray: ModuleType) -> str | None:
    try:
        return str(ray.util.get_node_ip_address())
    except Exception:
        return None


def _current_address(ray: ModuleType) -> str | None:
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:
        return None


def _same_address(asked: str, current: str | None) -> bool:
    """Whether ``asked`` (``host:port`` or ``ray://host:port``) names the cluster at ``current`` (its GCS
    address).  A Ray client address (``ray://``) goes through a proxy whose port differs: only its host counts."""
    if current is None:
        return False
    if asked.startswith("ray://"):
        return asked[len("ray://") :].rsplit(":", 1)[0] == current.rsplit(":", 1)[0]
    return asked == current


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
