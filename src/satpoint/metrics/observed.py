"""What was seen on the server side while a run measured: the files and their reader.

Two files in the results folder, appended while the run goes by the observer process
(``satpoint.observe``), so a run cut off keeps what was seen up to then:

- ``server-samples.csv``: the server's process tree every few hundred ms; CPU seconds and context
  switches are cumulative over the tree since the first sample (a process that appears later adds
  all of its CPU, one that exits keeps what it used), RSS and threads are the tree's sums at that moment;
  ``cpus_busy_s``: busy seconds (any process) of the CPUs the server may run on, cumulative, which
  tells a server that had its cores to itself from one that shared them; ``cg_*``: the counters of the
  server's own cgroup when it runs in one (CFS throttling, memory peak, OOM kills), else empty;
  ``machine_busy_s`` and ``known_cpu_s``: every CPU's busy seconds and the CPU seconds of the server's and
  satpoint's own processes, cumulative: the rest is other work on the machine.
- ``server-metrics.jsonl``: one line per scrape of a Prometheus endpoint: when, why (``start N`` /
  ``end N`` around segment N, ``tick`` in between), and every sample it returned (unknown metrics
  included), or the error.
- ``server-gpus.csv``: with a local server on a machine where NVML works, one row per GPU per sample:
  utilisation (% of the last NVML period a kernel ran), memory-controller utilisation, memory used and
  total (device-wide).

Times are kept on two clocks: ``mono_s`` (``time.monotonic``, which the generator's run clock also
uses, so samples map exactly onto a segment) and ``unix_s``.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

SAMPLES_FILE = "server-samples.csv"
SCRAPES_FILE = "server-metrics.jsonl"
GPU_FILE = "server-gpus.csv"
GPU_COLUMNS: tuple[str, ...] = (
    "mono_s",
    "unix_s",
    "device",
    "util_percent",
    "mem_util_percent",
    "mem_used_bytes",
    "mem_total_bytes",
)
SAMPLE_COLUMNS: tuple[str, ...] = (
    "mono_s",
    "unix_s",
    "cpu_user_s",
    "cpu_system_s",
    "rss_bytes",
    "threads",
    "ctx_voluntary",
    "ctx_involuntary",
    "procs",
    "cpus_busy_s",
    # the server's own cgroup, when it has one (a CPU or memory limit): CFS periods, throttled periods and
    # time, memory peak and OOM kills, cumulative (empty: no cgroup of its own)
    "cg_periods",
    "cg_throttled_periods",
    "cg_throttled_s",
    "cg_memory_peak_bytes",
    "cg_oom_kills",
    # the whole machine: busy seconds of every CPU (by anything, steal included), and CPU seconds of the
    # processes accounted for (the server's tree and satpoint's own: generator, observer), cumulative; the
    # difference is what other work took from the machine while it measured (``machine_other_cores``)
    "machine_busy_s",
    "known_cpu_s",
)

#: one Prometheus sample: (name, labels, value)
PromSample = tuple[str, dict[str, str], float]


@dataclass(frozen=True)
class Scrape:
    """One scrape of one metrics endpoint."""

    mono_s: float
    unix_s: float
    url: str
    tag: str  # "start N" / "end N" (around segment N) or "tick"
    samples: tuple[PromSample, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "mono_s": self.mono_s,
            "unix_s": self.unix_s,
            "url": self.url,
            "tag": self.tag,
            "error": self.error,
            "samples": [[n, lab, v] for n, lab, v in self.samples],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Scrape:
        samples = tuple(
            (str(n), {str(k): str(v) for k, v in dict(lab).items()}, float(v)) for n, lab, v in d.get("samples", [])
        )
        return cls(
            float(d["mono_s"]), float(d["unix_s"]), str(d["url"]), str(d.get("tag", "tick")), samples, d.get("error")
        )


@dataclass
class Observations:
    """Everything the observer wrote: resource samples as columns (``SAMPLE_COLUMNS``) and scrapes."""

    samples: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    scrapes: list[Scrape] = field(default_factory=list)
    #: GPU samples as columns (``GPU_COLUMNS``; one row per device per sample; empty: none)
    gpus: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)

    @property
    def n_samples(self) -> int:
        return len(self.samples.get("mono_s", ()))


def _read_csv(path: Path, columns: tuple[str, ...]) -> dict[str, npt.NDArray[np.float64]]:
    """A numeric CSV with a header row as columns (missing columns: NaN; cut-off lines skipped)."""
    rows: list[list[float]] = []
    names: list[str] = list(columns)
    if path.exists():
        with path.open(newline="") as f:
            for row in csv.reader(f):
                if row and row[0] == "mono_s":
                    names = row  # the header says which columns this file has
                    continue
                if len(row) != len(names):
                    continue
                try:
                    rows.append([float(x) for x in row])
                except ValueError:
                    continue
    arr = np.array(rows, dtype=np.float64).reshape(-1, len(names))
    return {c: arr[:, names.index(c)].copy() if c in names else np.full(len(arr), np.nan) for c in columns}


def read_observations(out_dir: Path) -> Observations | None:
    """The observer's files in ``out_dir`` (None when there are none).  A line cut off mid-write (the
    run was killed) is skipped."""
    samples_path, scrapes_path = out_dir / SAMPLES_FILE, out_dir / SCRAPES_FILE
    if not samples_path.exists() and not scrapes_path.exists():
        return None
    obs = Observations()
    obs.samples = _read_csv(samples_path, SAMPLE_COLUMNS)
    gpu_path = out_dir / GPU_FILE
    if gpu_path.exists():
        obs.gpus = _read_csv(gpu_path, GPU_COLUMNS)
    if scrapes_path.exists():
        for line in scrapes_path.read_text(errors="replace").splitlines():
            try:
                obs.scrapes.append(Scrape.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError):
                continue
    return obs


def format_sample_row(values: dict[str, float]) -> str:
    """One CSV line of ``server-samples.csv`` (the observer process writes these)."""
    out = []
    for c in SAMPLE_COLUMNS:
        v = values.get(c, math.nan)
        out.append(f"{v:.6f}" if c.endswith("_s") else str(int(v)) if math.isfinite(v) else "nan")
    return ",".join(out) + "\n"


def samples_header() -> str:
    return ",".join(SAMPLE_COLUMNS) + "\n"


def format_gpu_row(values: dict[str, float]) -> str:
    """One CSV line of ``server-gpus.csv``."""
    return ",".join(f"{values[c]:.6f}" if c.endswith("_s") else f"{values[c]:.12g}" for c in GPU_COLUMNS) + "\n"


def gpus_header() -> str:
    return ",".join(GPU_COLUMNS) + "\n"
