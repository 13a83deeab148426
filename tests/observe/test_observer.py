"""The observer process and its marks: its configuration never on its command line, every answer matched
to its command by a sequence number (a late answer is discarded, never taken for the next mark's), a mark
that came too late flagged missing rather than taken in the wrong place, and every endpoint of a mark
scraped at once (so several silent endpoints do not make a mark miss its timeout)."""

from __future__ import annotations

import json
import os
import signal
import site
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from satpoint.config import ObserveOptions
from satpoint.metrics.observed import SCRAPES_FILE
from satpoint.observe import observer as observer_mod
from satpoint.observe.observer import Observer
from satpoint.pythonpath import satpoint_root
from tests.http_stub import QuietHandler, serving

TOKEN = "tok-OBSERVER-SECRET-42"
pytestmark = pytest.mark.slow  # starts processes and waits on timeouts


@pytest.fixture
def endpoint() -> Iterator[str]:
    """A Prometheus endpoint counting its scrapes."""
    count = [0]

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            count[0] += 1
            self.reply(200, f'model_infer_request_success_total{{model="m"}} {count[0]}\n'.encode())

    with serving(Handler) as url:
        yield f"{url}/metrics?token={TOKEN}"


def _agent_pids() -> list[int]:
    me = psutil.Process()
    return [p.pid for p in me.children(recursive=True) if "satpoint.observe.agent" in " ".join(p.cmdline())]


def _scrapes(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / SCRAPES_FILE).read_text().splitlines()]


def test_the_configuration_is_not_on_the_command_line(tmp_path: Path, endpoint: str) -> None:
    with Observer(ObserveOptions(metrics_urls=(endpoint,)), tmp_path) as obs:
        (pid,) = _agent_pids()
        argv = psutil.Process(pid).cmdline()
        obs.mark("start 1")
    assert TOKEN not in " ".join(argv) and "metrics" not in " ".join(argv), argv
    assert obs.problems == []
    (start,) = [s for s in _scrapes(tmp_path) if s["tag"] == "start 1"]
    assert start["error"] is None and TOKEN not in json.dumps(start)


def test_a_late_answer_is_discarded_and_the_mark_flagged_missing(
    tmp_path: Path, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(observer_mod, "MARK_TIMEOUT_S", 1.0)
    with Observer(ObserveOptions(metrics_urls=(endpoint,), scrape_interval_s=60), tmp_path) as obs:
        (pid,) = _agent_pids()
        obs.mark("start 1")
        os.kill(pid, signal.SIGSTOP)  # the observer stops answering
        try:
            obs.mark("end 1")  # not answered within its timeout
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.5)  # its late answer to "end 1" is on the pipe now
        t0 = time.monotonic()
        obs.mark("start 2")
        t1 = time.monotonic()
    assert obs.missed_marks == ["end 1"]
    assert len(obs.problems) == 1 and "'end 1'" in obs.problems[0] and "missing" in obs.problems[0]
    scrapes = _scrapes(tmp_path)
    tags = [s["tag"] for s in scrapes]
    assert "end 1" not in tags  # flagged missing, not taken after the parent went on
    # "start 2" was answered by its own scrape, taken while the parent waited for it
    (start2,) = [s for s in scrapes if s["tag"] == "start 2"]
    assert t0 <= float(start2["mono_s"]) <= t1  # type: ignore[arg-type]
    assert obs.describe()["missed_marks"] == ["end 1"]


def test_silent_endpoints_are_scraped_at_once_within_the_marks_timeout(tmp_path: Path) -> None:
    """Six endpoints that accept and never answer: one round takes one scrape timeout, not six."""
    silent = []
    for _ in range(6):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        silent.append(s)
    urls = tuple(f"http://127.0.0.1:{s.getsockname()[1]}/metrics" for s in silent)
    try:
        with Observer(ObserveOptions(metrics_urls=urls, scrape_interval_s=60), tmp_path) as obs:
            obs.mark("start 1")
            obs.mark("end 1")
    finally:
        for s in silent:
            s.close()
    assert obs.problems == [] and obs.missed_marks == []
    scrapes = _scrapes(tmp_path)
    for tag in ("start 1", "end 1"):
        mine = [s for s in scrapes if s["tag"] == tag]
        assert sorted(str(s["url"]) for s in mine) == sorted(urls)
        assert all(s["error"] for s in mine)


def test_the_agent_imports_this_satpoint_without_reordering_the_path(
    tmp_path: Path, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its PYTHONPATH gets satpoint's folder once, and never a site directory (ahead of the standard library)."""
    root = str(satpoint_root())
    monkeypatch.setenv("PYTHONPATH", root)
    with Observer(ObserveOptions(metrics_urls=(endpoint,)), tmp_path):
        (pid,) = _agent_pids()
        env = psutil.Process(pid).environ()
    assert env["PYTHONPATH"] == root
    site_dir = Path(site.getsitepackages()[0]).resolve()
    monkeypatch.setattr(observer_mod, "satpoint_root", lambda: site_dir)
    monkeypatch.delenv("PYTHONPATH")
    with Observer(ObserveOptions(metrics_urls=(endpoint,)), tmp_path / "b") as obs:
        (pid,) = _agent_pids()
        env = psutil.Process(pid).environ()
        assert obs.running
    assert "PYTHONPATH" not in env


@pytest.mark.alone  # measures the machine's other work, and makes a core of it
def test_other_work_on_the_machine_is_sampled_apart_from_the_server_and_satpoint(tmp_path: Path) -> None:
    """The samples carry every CPU's busy time and the CPU time of the server's and satpoint's processes: a
    process spinning outside both trees (reparented to init) shows as other work, near a core of it."""
    import subprocess
    import sys

    from satpoint.metrics.observed import SAMPLES_FILE, read_observations

    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    spin = "import time\nend = time.time() + 20\nwhile time.time() < end: pass"
    out = subprocess.run(["sh", "-c", f'{sys.executable} -c "{spin}" >/dev/null 2>&1 & echo $!'],
                         capture_output=True, text=True, timeout=10)  # fmt: skip
    spinner = int(out.stdout.strip())
    try:
        assert spinner not in [p.pid for p in psutil.Process().children(recursive=True)]
        with Observer(ObserveOptions(server_pids=(server.pid,)), tmp_path):
            time.sleep(2.0)
    finally:
        os.kill(spinner, signal.SIGKILL)
        server.kill()
        server.wait(timeout=10)
    obs = read_observations(tmp_path)
    assert obs is not None
    s = obs.samples
    assert (tmp_path / SAMPLES_FILE).exists() and len(s["mono_s"]) >= 4
    dt = s["mono_s"][-1] - s["mono_s"][0]
    other = (s["machine_busy_s"][-1] - s["machine_busy_s"][0] - (s["known_cpu_s"][-1] - s["known_cpu_s"][0])) / dt
    assert 0.4 < other < 2.5, other
