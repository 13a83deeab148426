"""GPU utilisation and memory per device through NVML (``nvidia-ml-py``, imported as ``pynvml``).

Optional: where the package, the NVIDIA driver's library or a GPU is missing, ``open_gpus`` says why
and nothing is sampled (nothing is invented).  Device-wide figures: NVML's utilisation is the share of
the last sample period (1/6 s to 1 s, by device) in which a kernel ran, memory is what is allocated on
the device by any process.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Any

NO_GPU = "GPU (utilisation, memory): no GPU/NVML"


def _load_nvml() -> Any:
    return importlib.import_module("pynvml")


@dataclass
class GpuSampler:
    """NVML handles of every device; ``sample`` reads each one's utilisation and memory."""

    nvml: Any
    handles: list[Any]
    names: list[str]

    def sample(self) -> list[dict[str, float]]:
        """One row per device (``metrics.observed.GPU_COLUMNS`` but the times); a device that fails to
        answer is left out of this sample."""
        out: list[dict[str, float]] = []
        for i, h in enumerate(self.handles):
            try:
                util = self.nvml.nvmlDeviceGetUtilizationRates(h)
                mem = self.nvml.nvmlDeviceGetMemoryInfo(h)
            except Exception:  # NVMLError: a device lost, or a query it does not support
                continue
            out.append(
                {
                    "device": float(i),
                    "util_percent": float(util.gpu),
                    "mem_util_percent": float(util.memory),
                    "mem_used_bytes": float(mem.used),
                    "mem_total_bytes": float(mem.total),
                }
            )
        return out

    def devices(self) -> list[dict[str, Any]]:
        return [{"device": i, "name": n} for i, n in enumerate(self.names)]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()


def open_gpus(nvml: Any | None = None) -> tuple[GpuSampler | None, str | None]:
    """The sampler, or None and why there is none (``NO_GPU: reason``).  ``nvml`` replaces the
    ``pynvml`` module (tests)."""
    if nvml is None:
        try:
            nvml = _load_nvml()
        except ImportError:
            return None, f"{NO_GPU} (nvidia-ml-py is not installed: pip install 'satpoint[gpu]')"
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return None, f"{NO_GPU} ({type(e).__name__}: {e})"
    try:
        count = int(nvml.nvmlDeviceGetCount())
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        names = []
        for h in handles:
            name = nvml.nvmlDeviceGetName(h)
            names.append(name.decode(errors="replace") if isinstance(name, bytes) else str(name))
    except Exception as e:
        _shutdown(nvml)
        return None, f"{NO_GPU} (NVML could not list the devices: {type(e).__name__}: {e})"
    if not handles:
        _shutdown(nvml)
        return None, f"{NO_GPU} (NVML works but sees no GPU)"
    return GpuSampler(nvml, handles, names), None


def _shutdown(nvml: Any) -> None:
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()
