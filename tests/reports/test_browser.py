"""report.html in headless Chromium: every plot draws, no script or console error, no network needed.

The page publishes what drew in ``<body data-plots data-drawn data-errors>`` (see reports/html/report.py);
``--dump-dom`` after a virtual-time budget returns the DOM with those attributes set.  Chromium runs
with name resolution disabled, so any external resource would fail and be reported as an error.
Skipped when no Chromium is installed (Debian: ``apt-get install -y chromium``).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import signal
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from satpoint.plan import Stage
from satpoint.reports.html.plots import PLOTS
from satpoint.reports.html.report import write_report
from satpoint.servers.sim.model import SimConfig
from tests.reports.html.test_html import add_server_side, make_find, make_run

pytestmark = pytest.mark.slow

TIMEOUT_S = 90.0
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # offline: any external fetch fails (and is reported)
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=5000",
]
CONSOLE_LINE = re.compile(r":CONSOLE[:(]")


def chromium_binary() -> str | None:
    env = os.environ.get("SATPOINT_CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class Rendered:
    name: str
    returncode: int
    stdout: str
    stderr: str
    dom: dict[str, str]  # the <body> data-* attributes
    screenshot: Path | None = None

    @property
    def console(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if CONSOLE_LINE.search(line)]


class Browser:
    """Chromium processes started by this test; each is stopped by its own PID (and process group)."""

    def __init__(self, binary: str, work: Path) -> None:
        self.binary = binary
        self.work = work
        self.procs: list[tuple[str, subprocess.Popen[str], Path | None]] = []

    def start(self, name: str, page: Path, screenshot: Path | None = None, window: str = "1400,1000") -> None:
        profile = self.work / f"profile-{name}"
        args = [self.binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={window}"]
        args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        args.append(page.resolve().as_uri())
        proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=self.work
        )
        self.procs.append((name, proc, screenshot))

    def collect(self) -> dict[str, Rendered]:
        out = {}
        for name, proc, shot in self.procs:
            try:
                stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._stop(proc)
                stdout, stderr = proc.communicate()
                pytest.fail(f"chromium ({name}) did not finish within {TIMEOUT_S:g} s")
            self._stop(proc)  # helpers it left behind, if any (same process group)
            out[name] = Rendered(name, proc.returncode, stdout, stderr, body_data(stdout), shot)
        self.procs.clear()
        return out

    def close(self) -> None:
        for _, proc, _ in self.procs:
            self._stop(proc)
            proc.communicate()
        self.procs.clear()

    @staticmethod
    def _stop(proc: subprocess.Popen[str]) -> None:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group this test created for this PID


def body_data(dom: str) -> dict[str, str]:
    m = re.search(r"<body([^>]*)>", dom)
    if not m:
        return {}
    return {k: html.unescape(v) for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', m.group(1))}


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    w, h = struct.unpack(">II", head[16:24])
    return int(w), int(h)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Rendered]]:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no Chromium found (apt-get install -y chromium)")
    work = tmp_path_factory.mktemp("browser")
    before, after, run = work / "before", work / "after", work / "run-errors"
    # the server watched (its CPU, memory, metrics and a flame graph): every plot has something to draw
    add_server_side(before, make_find(before, SimConfig(slots=4, service_ms=10.0, dist="exp", seed=3), 100.0))
    make_find(after, SimConfig(slots=8, service_ms=10.0, dist="exp", seed=4), 200.0)
    make_run(
        run,
        SimConfig(slots=2, service_ms=10.0, dist="exp", seed=1, error_rate=0.05),
        [Stage(50, 1, 4), Stage(150, 1, 4)],
        timeouts=20,
    )
    single = write_report([before], before / "report.html")
    compare = write_report([before, after, run], work / "compare.html")
    broken = work / "broken.html"  # one plot call fails: the harness must notice
    broken.write_text(single.read_text().replace("Plotly.newPlot(", "Plotly.noSuchCall(", 1))
    browser = Browser(binary, work)
    try:
        browser.start("single", single)
        browser.start("compare", compare)
        browser.start("broken", broken)
        browser.start("screenshot", single, screenshot=work / "report.png", window="1400,3000")
        yield browser.collect()
    finally:
        browser.close()


@pytest.mark.parametrize("name", ["single", "compare"])
def test_every_plot_draws_without_errors(rendered: dict[str, Rendered], name: str) -> None:
    r = rendered[name]
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.dom.get("ready") == "1", f"the page's own check did not run: {r.dom}"
    assert json.loads(r.dom["errors"]) == []
    assert int(r.dom["plots"]) == len(PLOTS)
    assert int(r.dom["drawn"]) == len(PLOTS)
    assert int(r.dom["svgs"]) >= len(PLOTS)
    for p in PLOTS:  # each plot's div holds plotly's drawing
        m = re.search(rf'<div id="{p.div_id}" class="([^"]*)"', r.stdout)
        assert m and "js-plotly-plot" in m.group(1), p.div_id
    assert r.stdout.count('class="main-svg"') >= len(PLOTS)
    assert r.console == [], "console output: " + "\n".join(r.console)


def test_a_broken_plot_is_detected_and_shown(rendered: dict[str, Rendered]) -> None:
    r = rendered["broken"]
    assert r.dom.get("ready") == "1"
    assert int(r.dom["drawn"]) == len(PLOTS) - 1
    errors = json.loads(r.dom["errors"])
    assert any("noSuchCall" in e for e in errors), errors
    assert re.search(r'id="report-errors"[^>]*style="display: block;"', r.stdout)
    assert "plots did not draw" in r.stdout


def test_screenshot(rendered: dict[str, Rendered]) -> None:
    r = rendered["screenshot"]
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.screenshot is not None and r.screenshot.exists()
    assert png_size(r.screenshot) == (1400, 3000)
    # a blank page of this size compresses to a few kB; the report's plots and tables do not
    assert r.screenshot.stat().st_size > 100_000
    keep = os.environ.get("SATPOINT_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(r.screenshot, keep)
