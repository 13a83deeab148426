"""The observer process: ``python -m satpoint.observe.agent CONFIG_JSON``.

Samples the server's process tree every ``sample_interval_s`` and scrapes every metrics URL every
``scrape_interval_s``, appending to the results folder's files (``metrics.observed``).  On stdin it
takes ``mark TAG`` (sample and scrape now, tagged, then answer ``ok`` on stdout: the parent waits for
it, so a segment's start and end scrapes bracket exactly its requests) and ``quit``.  It exits when
stdin closes or its parent is gone, so it never outlives the run.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

from satpoint.metrics.observed import SAMPLES_FILE, SCRAPES_FILE, Scrape, format_sample_row, samples_header
from satpoint.observe.procs import TreeSampler
from satpoint.observe.prom import scrape

SCRAPE_TIMEOUT_S = 1.5


class Agent:
    def __init__(self, cfg: dict[str, Any]) -> None:
        out_dir = Path(cfg["out_dir"])
        roots = [int(p) for p in cfg.get("server_pids", [])]
        cpus = cfg.get("cpus")
        self.sampler = TreeSampler(roots, cpus=[int(c) for c in cpus] if cpus else None) if roots else None
        #: (URL scraped, URL recorded: secrets redacted)
        self.urls: list[tuple[str, str]] = [(u, r) for u, r in cfg.get("metrics_urls", [])]
        self.sample_every = float(cfg.get("sample_interval_s", 0.25))
        self.scrape_every = float(cfg.get("scrape_interval_s", 2.0))
        self.parent = int(cfg["parent_pid"])
        self.samples: IO[str] | None = None
        self.scrapes: IO[str] | None = None
        if self.sampler is not None:
            self.samples = (out_dir / SAMPLES_FILE).open("w")
            self.samples.write(samples_header())
        if self.urls:
            self.scrapes = (out_dir / SCRAPES_FILE).open("w")

    def sample(self) -> None:
        if self.sampler is None or self.samples is None:
            return
        row = self.sampler.sample()
        if row is not None:
            self.samples.write(format_sample_row(row))
            self.samples.flush()

    def scrape_all(self, tag: str) -> None:
        if self.scrapes is None:
            return
        for url, shown in self.urls:
            mono, unix = time.monotonic(), time.time()
            try:
                got = Scrape(mono, unix, shown, tag, tuple(scrape(url, SCRAPE_TIMEOUT_S)))
            except Exception as e:  # a scrape that fails is recorded, never fatal
                got = Scrape(mono, unix, shown, tag, error=f"{type(e).__name__}: {e}".replace(url, shown))
            self.scrapes.write(json.dumps(got.to_json(), separators=(",", ":")) + "\n")
        self.scrapes.flush()

    def command(self, line: str) -> bool:
        """Handle one command; False means stop."""
        word, _, arg = line.strip().partition(" ")
        if word == "quit":
            return False
        if word == "mark":
            self.sample()
            self.scrape_all(arg or "mark")
            sys.stdout.write("ok\n")
            sys.stdout.flush()
        return True

    def loop(self) -> None:
        sel = selectors.DefaultSelector()
        fd = sys.stdin.fileno()
        sel.register(fd, selectors.EVENT_READ)
        now = time.monotonic()
        next_sample, next_scrape = now, now + self.scrape_every
        self.sample()
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        buf = b""
        while os.getppid() == self.parent:
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
            wait = min([*due, now + 0.5]) - time.monotonic()
            if not sel.select(max(0.0, min(wait, 0.5))):
                continue
            data = os.read(fd, 4096)
            if not data:
                return  # the parent closed our stdin (or died)
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not self.command(line.decode(errors="replace")):
                    return

    def close(self) -> None:
        for f in (self.samples, self.scrapes):
            if f is not None:
                f.close()


def main(argv: list[str]) -> int:
    # a Ctrl-C (or a hang-up) reaches the terminal's whole process group: the parent decides when to stop
    # (it still marks the end of the segment it interrupts), and we follow when it closes our stdin
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    agent = Agent(json.loads(argv[1]))
    try:
        agent.loop()
    finally:
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
