"""observe.gpu: NVML's absence says so and samples nothing; a (fake) NVML gives one row per device."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from satpoint.observe.gpu import NO_GPU, open_gpus


class FakeNvml:
    """Two devices: 40 % and 90 % busy."""

    def __init__(self, fail_init: bool = False, devices: int = 2) -> None:
        self.fail_init, self.devices, self.shut = fail_init, devices, False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return f"Fake GPU {h}".encode()

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=40 + 50 * h, memory=10)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=(1 + h) * 2**30, total=16 * 2**30)


def test_without_nvml_nothing_is_sampled_and_it_says_why() -> None:
    sampler, why = open_gpus(FakeNvml(fail_init=True))
    assert sampler is None and why is not None and why.startswith(NO_GPU) and "Library Not Found" in why
    nvml = FakeNvml(devices=0)
    sampler, why = open_gpus(nvml)
    assert sampler is None and "sees no GPU" in (why or "") and nvml.shut


def test_this_machine_without_a_gpu() -> None:
    sampler, why = open_gpus()
    if sampler is not None:
        sampler.close()
        pytest.skip("this machine has a GPU that NVML sees")
    assert why is not None and why.startswith(NO_GPU)  # not installed, or no driver library


def test_each_device_is_sampled() -> None:
    sampler, why = open_gpus(FakeNvml())
    assert why is None and sampler is not None
    assert sampler.devices() == [{"device": 0, "name": "Fake GPU 0"}, {"device": 1, "name": "Fake GPU 1"}]
    rows = sampler.sample()
    assert [r["util_percent"] for r in rows] == [40.0, 90.0]
    assert rows[1]["mem_used_bytes"] == 2 * 2**30 and rows[1]["mem_total_bytes"] == 16 * 2**30
    sampler.close()
    assert sampler.nvml.shut


def test_the_observer_agent_reports_why_it_samples_no_gpu(tmp_path: Any) -> None:
    import os

    from satpoint.observe.agent import Agent

    agent = Agent({"out_dir": str(tmp_path), "server_pids": [os.getpid()], "parent_pid": os.getppid()})
    try:
        if agent.gpu_status["devices"]:
            pytest.skip("this machine has a GPU that NVML sees")
        assert agent.gpu_status["not_seen"].startswith(NO_GPU)
        assert not (tmp_path / "server-gpus.csv").exists()  # nothing invented
    finally:
        agent.close()
    remote = Agent({"out_dir": str(tmp_path), "metrics_urls": [], "parent_pid": os.getppid()})
    assert remote.gpu_status == {"devices": [], "not_seen": None}  # a remote server: this machine's GPUs say nothing
    remote.close()
