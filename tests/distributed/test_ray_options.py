"""--ray's options, and the one-line error when Ray is not installed (simulated: no Ray needed)."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from satpoint.cli.main import app
from satpoint.cli.ray_opts import bare_ray
from satpoint.config import LoadOptions, RayOptions, RunConfig, ray_options
from satpoint.distributed.ray_fleet import NO_RAY, import_ray
from satpoint.errors import ConfigError


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
