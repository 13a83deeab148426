"""The observer process: ``python -m satpoint.observe.agent``, its configuration on the first line of stdin
(never in its argv, which every local user can read: the metrics URLs may carry tokens).

Samples the server's process tree every ``sample_interval_s`` and scrapes every metrics URL every
``scrape_interval_s`` (all endpoints at once, so one round takes at most ``SCRAPE_TIMEOUT_S`` however
many there are), appending to the results folder's files (``metrics.observed``).  Then on stdin it takes
commands ``SEQ WORD ARG``, and every answer starts with the command's ``SEQ`` (the parent discards an
answer to a command it stopped waiting for): ``SEQ mark DEADLINE TAG`` (sample and scrape now, tagged,
then answer ``SEQ ok``: the parent waits for it, so a segment's start and end scrapes bracket exactly its
requests; a mark read after its monotonic ``DEADLINE``, or whose scrapes end after it, is not taken as
``TAG`` but as ``late TAG`` and answered ``SEQ late``: the parent has gone on, and a scrape tagged in the
wrong place would be worse than none), ``SEQ flame JSON`` (start py-spy at a given monotonic time for a
stage's hold; answers ``SEQ ok``), ``SEQ flame_stop`` (stop it now if it still runs and answer
``SEQ ok JSON``: what happened) and ``quit``.  With a local server it also samples every GPU NVML sees.
It exits when stdin closes or its parent is gone, so it never outlives the run (nor does py-spy: it is
stopped first).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import IO, Any

from satpoint.metrics.observed import (
    GPU_FILE,
    SAMPLES_FILE,
    SCRAPES_FILE,
    Scrape,
    format_gpu_row,
    format_sample_row,
    gpus_header,
    samples_header,
)
from satpoint.observe.gpu import GpuSampler, open_gpus
from satpoint.observe.procs import TreeSampler, machine_sampler
from satpoint.observe.prom import scrape
from satpoint.observe.pyspy import LOG_FILE, PySpyRecording, spare_cpus

SCRAPE_TIMEOUT_S = 1.5
#: a scrape round waits this long at most for its slowest endpoint (urllib's timeout is per socket call)
SCRAPE_ROUND_S = SCRAPE_TIMEOUT_S + 0.5


class Agent:
    def __init__(self, cfg: dict[str, Any]) -> None:
        out_dir = Path(cfg["out_dir"])
        roots = [int(p) for p in cfg.get("server_pids", [])]
        cpus = cfg.get("cpus")
        self.sampler = TreeSampler(roots, cpus=[int(c) for c in cpus] if cpus else None) if roots else None
        #: the server's and satpoint's processes over the whole machine: the rest is other work
        self.machine = machine_sampler(roots, int(cfg["parent_pid"])) if roots else None
        #: (URL scraped, URL recorded: secrets redacted)
        self.urls: list[tuple[str, str]] = [(u, r) for u, r in cfg.get("metrics_urls", [])]
        self.sample_every = float(cfg.get("sample_interval_s", 0.25))
        self.scrape_every = float(cfg.get("scrape_interval_s", 2.0))
        self.parent = int(cfg["parent_pid"])
        self.server_cpus = [int(c) for c in cpus] if cpus else None
        self.out_dir = out_dir
        self.samples: IO[str] | None = None
        self.scrapes: IO[str] | None = None
        self.gpu_file: IO[str] | None = None
        self.gpu: GpuSampler | None = None
        #: what the parent is told about GPUs: the devices sampled, or why none is
        self.gpu_status: dict[str, Any] = {"devices": [], "not_seen": None}
        self.flame: PySpyRecording | None = None
        self._pool: ThreadPoolExecutor | None = None
        if self.sampler is not None:
            self.samples = (out_dir / SAMPLES_FILE).open("w")
            self.samples.write(samples_header())
            if cfg.get("gpus", True):  # the GPUs of this machine mean something only for a local server
                self.gpu, why = open_gpus()
                self.gpu_status = {"devices": self.gpu.devices() if self.gpu else [], "not_seen": why}
                if self.gpu is not None:
                    self.gpu_file = (out_dir / GPU_FILE).open("w")
                    self.gpu_file.write(gpus_header())
        if self.urls:
            self.scrapes = (out_dir / SCRAPES_FILE).open("w")

    def sample(self) -> None:
        if self.sampler is None or self.samples is None:
            return
        row = self.sampler.sample()
        if row is not None and self.machine is not None and (every := self.machine.sample()) is not None:
            row = {**row, "machine_busy_s": every["cpus_busy_s"],
                   "known_cpu_s": every["cpu_user_s"] + every["cpu_system_s"]}  # fmt: skip
        if row is not None:
            self.samples.write(format_sample_row(row))
            self.samples.flush()
        if self.gpu is not None and self.gpu_file is not None:
            mono, unix = time.monotonic(), time.time()
            for dev in self.gpu.sample():
                self.gpu_file.write(format_gpu_row({"mono_s": mono, "unix_s": unix, **dev}))
            self.gpu_file.flush()

    def scrape_all(self, tag: str, deadline: float | None = None) -> bool:
        """Scrape every endpoint at once, tagged ``tag``; False (and tagged ``late TAG``) when the round
        ends after ``deadline`` (monotonic)."""
        if self.scrapes is None:
            return True
        pool = self._pool or ThreadPoolExecutor(max_workers=min(len(self.urls), 16))
        self._pool = pool
        mono, unix = time.monotonic(), time.time()
        futures = [pool.submit(scrape, url, SCRAPE_TIMEOUT_S) for url, _ in self.urls]
        wait(futures, timeout=SCRAPE_ROUND_S)
        in_time = deadline is None or time.monotonic() <= deadline
        tag = tag if in_time else f"late {tag}"
        for (url, shown), fut in zip(self.urls, futures, strict=True):
            if not fut.done():
                got = Scrape(mono, unix, shown, tag, error=f"no answer in {SCRAPE_ROUND_S:g} s")
            elif (e := fut.exception()) is not None:  # a scrape that fails is recorded, never fatal
                got = Scrape(mono, unix, shown, tag, error=f"{type(e).__name__}: {e}".replace(url, shown))
            else:
                got = Scrape(mono, unix, shown, tag, tuple(fut.result()))
            self.scrapes.write(json.dumps(got.to_json(), separators=(",", ":")) + "\n")
        self.scrapes.flush()
        return in_time

    def command(self, line: str) -> bool:
        """Handle one command ``SEQ WORD ARG``; False means stop."""
        seq, _, rest = line.strip().partition(" ")
        if seq == "quit":
            return False
        word, _, arg = rest.partition(" ")
        if word == "mark":
            raw_deadline, _, tag = arg.partition(" ")
            deadline = float(raw_deadline)
            if time.monotonic() > deadline:  # the parent stopped waiting: nothing is taken as this mark
                self.answer(f"{seq} late")
                return True
            self.sample()
            in_time = self.scrape_all(tag or "mark", deadline)
            self.answer(f"{seq} {'ok' if in_time else 'late'}")
        elif word == "flame":
            self.flame_stop()  # one recording at a time
            req = json.loads(arg)
            self.flame = PySpyRecording(
                command=[str(c) for c in req["command"]],
                start_at=float(req["start_at_mono"]),
                duration_s=float(req["duration_s"]),
                log_path=self.out_dir / LOG_FILE,
                output=Path(req["output"]),
                cpus=spare_cpus(self.server_cpus),
            )
            self.poll_flame()
            self.answer(f"{seq} ok")
        elif word == "flame_stop":
            self.answer(f"{seq} ok " + json.dumps(self.flame_stop()))
        return True

    def answer(self, text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def poll_flame(self) -> None:
        if self.flame is not None and self.flame.due(time.monotonic()):
            self.flame.start()

    def flame_stop(self) -> dict[str, Any]:
        flame, self.flame = self.flame, None
        return flame.stop() if flame is not None else {"error": "no flame graph was being recorded"}

    def loop(self, buf: bytes = b"") -> None:
        """Run until ``quit``, stdin's end or the parent's death; ``buf``: stdin already read."""
        sel = selectors.DefaultSelector()
        fd = sys.stdin.fileno()
        sel.register(fd, selectors.EVENT_READ)
        now = time.monotonic()
        next_sample, next_scrape = now, now + self.scrape_every
        self.sample()
        self.answer("ready " + json.dumps({"gpu": self.gpu_status}))
        while os.getppid() == self.parent:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not self.command(line.decode(errors="replace")):
                    return
            self.poll_flame()
            now = time.monotonic()
            if self.sampler is not None and now >= next_sample:
                self.sample()
                next_sample = max(next_sample + self.sample_every, now)
            if self.urls and now >= next_scrape:
                self.scrape_all("tick")
                next_scrape = time.monotonic() + self.scrape_every
            due = [next_scrape] if self.urls else []
            if self.sampler is not None:
                due.append(next_sample)
            if self.flame is not None and self.flame.started_mono is None:
                due.append(self.flame.start_at)
            pause = min([*due, now + 0.5]) - time.monotonic()
            if not sel.select(max(0.0, min(pause, 0.5))):
                continue
            data = os.read(fd, 4096)
            if not data:
                return  # the parent closed our stdin (or died)
            buf += data

    def close(self) -> None:
        self.flame_stop()  # never leave py-spy running
        if self.gpu is not None:
            self.gpu.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for f in (self.samples, self.scrapes, self.gpu_file):
            if f is not None:
                f.close()


def read_config(fd: int) -> tuple[dict[str, Any], bytes]:
    """The configuration (stdin's first line) and whatever was read after it."""
    buf = b""
    while b"\n" not in buf:
        data = os.read(fd, 65536)
        if not data:
            raise SystemExit("the observer got no configuration on stdin")
        buf += data
    line, rest = buf.split(b"\n", 1)
    return dict(json.loads(line)), rest


def main(argv: list[str]) -> int:
    # a Ctrl-C (or a hang-up) reaches the terminal's whole process group: the parent decides when to stop
    # (it still marks the end of the segment it interrupts), and we follow when it closes our stdin
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    cfg, rest = read_config(sys.stdin.fileno())
    agent = Agent(cfg)
    try:
        agent.loop(rest)
    finally:
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
