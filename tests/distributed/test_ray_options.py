"""--ray's options, the one-line errors when Ray is not installed, cannot be reached or has no node fit for a
host, and the refusal of a loopback target on several machines (simulated: no Ray cluster needed)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.cli.opts.ray_opts import bare_ray
from satpoint.config import LoadOptions, RayOptions, RunConfig, ray_options
from satpoint.distributed import ray_fleet
from satpoint.distributed.host import ShardJob
from satpoint.distributed.ray_fleet import NO_RAY, RayFleet, import_ray, loopback_refusal, restripe
from satpoint.endpoints.rest import RestFactoryBuilder
from satpoint.engine.dispatcher import DispatchOptions
from satpoint.errors import ConfigError
from satpoint.plan import Stage


def test_a_bare_ray_flag_means_a_local_instance() -> None:
    assert bare_ray(["run", "--ray"]) == ["run", "--ray", "local"]
    assert bare_ray(["run", "--ray", "--ray-hosts", "2"]) == ["run", "--ray", "local", "--ray-hosts", "2"]
    assert bare_ray(["run", "--ray", "auto", "-s", "1:0:1"]) == ["run", "--ray", "auto", "-s", "1:0:1"]


def test_the_ray_flags_build_ray_options() -> None:
    assert ray_options(None, None, 1) is None
    assert ray_options("local", 2, 3) == RayOptions(None, 2, 3)
    assert ray_options("ray://head:10001", None, 1) == RayOptions("ray://head:10001")
    with pytest.raises(ValueError, match="go with --ray"):
        ray_options(None, 2, 1)
    with pytest.raises(ValueError, match="--procs-per-host"):
        ray_options("auto", None, 1, procs=4)
    with pytest.raises(ValueError, match="--ray-hosts must be >= 1"):
        ray_options("auto", 0, 1)


def test_ray_options_are_recorded_in_the_header_and_read_back() -> None:
    load = LoadOptions(ray=RayOptions("auto", 4, 2))
    header = {"config": RunConfig(load=load).to_header()}
    assert header["config"]["load"]["ray"]["procs_per_host"] == 2
    assert RunConfig.from_header(header).load == load
    assert LoadOptions.from_dict(LoadOptions().describe()).ray is None


def test_without_ray_the_flag_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'satpoint\[ray\]'"):
        import_ray()
    # before anything reaches the target (nothing listens on port 9)
    r = CliRunner().invoke(app, ["run", "-u", "http://127.0.0.1:9", "-m", "m", "-s", "10:0:1", "--ray", "local"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and NO_RAY in " ".join(r.output.split()), r.output


class _Captured(ConfigError):
    pass


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        (["run", "-u", "http://127.0.0.1:9", "-m", "m", "-s", "10:0:1"], "satpoint.api.run"),
        (["find", "-u", "http://127.0.0.1:9", "-m", "m"], "satpoint.api.find"),
        (["sweep", "--server", "sim", "--set", "workers=1,2"], "satpoint.cli.sweep_cmd.run_sweep"),
    ],
)
def test_run_find_and_sweep_pass_the_ray_flags_down(
    argv: list[str], where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[LoadOptions] = []

    def capture(*args: object, **kw: object) -> None:
        load = kw.get("load") or getattr(args[0], "load", None)
        assert isinstance(load, LoadOptions)
        seen.append(load)
        raise _Captured("captured")

    monkeypatch.setattr(where, capture)
    flags = ["--ray", "ray://head:10001", "--ray-hosts", "3", "--procs-per-host", "2"]
    r = CliRunner().invoke(app, [*argv, *flags])
    assert "captured" in r.output, r.output
    assert seen[0].ray == RayOptions("ray://head:10001", 3, 2)
    r = CliRunner().invoke(app, [*argv, "--ray-hosts", "3"])
    assert r.exit_code == 2 and "go with --ray" in r.output


class _FakeRay:
    """What ``RayFleet`` asks of the ``ray`` module before it places anything (no cluster needed)."""

    def __init__(
        self, *, initialized: bool = False, init_error: Exception | None = None, nodes: list[dict[str, object]] = (),  # type: ignore[assignment]
        gcs: str = "10.0.0.1:6379",
    ) -> None:  # fmt: skip
        import ray

        self.exceptions = ray.exceptions
        self._initialized, self._init_error, self._nodes, self._gcs = initialized, init_error, list(nodes), gcs
        self.shutdowns = 0

    def is_initialized(self) -> bool:
        return self._initialized

    def init(self, address: str, **kw: object) -> None:
        if self._init_error is not None:
            raise self._init_error
        self._initialized = True

    def nodes(self) -> list[dict[str, object]]:
        return self._nodes

    def get_runtime_context(self) -> object:
        return SimpleNamespace(gcs_address=self._gcs)

    def shutdown(self) -> None:
        self.shutdowns += 1


def _fleet_with(monkeypatch: pytest.MonkeyPatch, fake: _FakeRay, options: RayOptions) -> RayFleet:
    monkeypatch.setattr(ray_fleet, "import_ray", lambda: fake)
    return RayFleet(options)


def test_ray_that_cannot_be_reached_is_one_config_error_naming_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    fake = _FakeRay(init_error=ConnectionError("Could not find any running Ray instance.\nPlease specify one"))
    with pytest.raises(ConfigError) as info, _fleet_with(monkeypatch, fake, RayOptions("ray://head:10001")):
        pass
    assert str(info.value) == (
        "--ray ray://head:10001: cannot attach to Ray at ray://head:10001: Could not find any running Ray instance."
    )
    fake = _FakeRay(init_error=RuntimeError("no space left"))
    with pytest.raises(ConfigError) as info, _fleet_with(monkeypatch, fake, RayOptions(None)):
        pass
    assert str(info.value) == "--ray local: cannot start a local Ray instance: no space left"
    assert fake.shutdowns == 1  # what it started is stopped


def test_no_node_with_the_cpus_per_host_is_refused_with_each_nodes_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    nodes = [
        {"Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 2.0}},
        {"Alive": True, "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 4.0}},
        {"Alive": False, "NodeManagerAddress": "10.0.0.3", "Resources": {"CPU": 64.0}},
    ]
    fake = _FakeRay(nodes=nodes)
    with pytest.raises(ConfigError) as info, _fleet_with(monkeypatch, fake, RayOptions("auto", None, 8)):
        pass
    msg = str(info.value)
    assert msg.startswith("--ray (auto): the Ray cluster has 0 alive node(s) with the 8 CPU(s) of --procs-per-host 8")
    assert "CPUs per node: 10.0.0.1: 2, 10.0.0.2: 4)" in msg


def test_an_existing_ray_connection_to_another_cluster_is_not_silently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    fake = _FakeRay(initialized=True, gcs="10.0.0.1:6379")
    with pytest.raises(ConfigError) as info, _fleet_with(monkeypatch, fake, RayOptions("10.9.9.9:6379")):
        pass
    assert "connected to the Ray cluster at 10.0.0.1:6379 already" in str(info.value)
    for same in ("auto", "10.0.0.1:6379", "ray://10.0.0.1:10001"):  # the cluster it is connected to: used
        fleet = _fleet_with(monkeypatch, _FakeRay(initialized=True, gcs="10.0.0.1:6379"), RayOptions(same))
        with pytest.raises(ConfigError, match="the Ray cluster has 0 alive node"), fleet:  # on to placement
            pass


def _job(host: str, hosts: int = 2, cap: int = 9) -> ShardJob:
    build = RestFactoryBuilder(host=host, port=8080, requests=(), max_inflight=cap)
    return ShardJob((Stage(10, 0, 1),), "constant", 1, 0.0, hosts, 1, build, DispatchOptions(timeout_s=1.0))


def test_a_loopback_target_is_refused_when_a_host_is_on_another_machine() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.1.1"):
        why = loopback_refusal(_job(host), "10.0.0.1", ["10.0.0.1", "10.0.0.2"])
        assert why is not None and f"the target is on loopback ({host})" in why and "10.0.0.2" in why
        assert loopback_refusal(_job(host), "10.0.0.1", ["10.0.0.1", "10.0.0.1"]) is None  # one machine
    assert loopback_refusal(_job("10.0.0.7"), "10.0.0.1", ["10.0.0.1", "10.0.0.2"]) is None
    assert loopback_refusal(_job("model.example.com"), "10.0.0.1", ["10.0.0.2"]) is None


def test_a_shrunk_fleet_restripes_the_schedule_and_keeps_the_in_flight_cap() -> None:
    job = _job("10.0.0.7", hosts=3, cap=9)  # 3 hosts x 9: a cap of 27
    two = restripe(job, 2)
    assert two.hosts == 2 and two.stages == job.stages and two.seed == job.seed
    assert getattr(two.build, "max_inflight", None) == 14  # 2 x 14 >= 27


def test_a_segment_with_a_loopback_target_on_several_machines_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    fleet = RayFleet(RayOptions("auto", 2))
    fleet._ray = _FakeRay()  # type: ignore[assignment]
    sent: list[object] = []
    monkeypatch.setattr(fleet, "ensure_hosts", lambda: ([], [{"node_ip": "10.0.0.1"}, {"node_ip": "10.0.0.2"}]))
    monkeypatch.setattr(ray_fleet, "_driver_ip", lambda ray: "10.0.0.1")
    monkeypatch.setattr(ray_fleet, "run_on_hosts", lambda *a, **kw: sent.append(a))
    with pytest.raises(ConfigError, match=r"the target is on loopback \(127\.0\.0\.1\).*10\.0\.0\.2"):
        fleet.run(_job("127.0.0.1"))
    assert not sent
