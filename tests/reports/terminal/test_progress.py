"""The terminal renderer of progress events: a terminal that went away must not break the run."""

from __future__ import annotations

import errno
import io

from rich.console import Console

from satpoint.engine.live import LiveSnapshot
from satpoint.plan import Stage
from satpoint.procedures.progress import Message, SegmentFinished, SegmentStarted, Snapshot
from satpoint.reports.terminal.progress import EventPrinter


class HungUp(io.StringIO):
    """A terminal after a hang-up (a closed ssh session): every write fails with EIO."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        raise OSError(errno.EIO, "Input/output error")


def test_a_hung_up_terminal_stops_the_printing_not_the_run() -> None:
    out = HungUp()
    printer = EventPrinter(Console(file=out, force_terminal=False, width=100))
    snap = LiveSnapshot(
        now_s=1.0, due=10, sent=10, inflight=0, backlog=0, total=100, due_recent=10, ok_recent=10, errors=0
    )
    with printer:
        printer(SegmentStarted(0, "run", (Stage(10.0, 0.0, 10.0),), "run"))
        printer(Message("stopping: writing the results collected so far"))  # raises inside: swallowed
        printer(Snapshot(snap))
        printer(Message("more"))
        printer(SegmentFinished(0, "run", True, 10))
    assert out.writes == 1  # it tried once, then stopped writing to a terminal that is gone


def test_answered_counts_answers_that_finish_now_not_requests_due_now() -> None:
    """Under a backlog the requests due in the last second are not answered yet; the server still answers
    older ones at its capacity, and the live line says so instead of 0/s."""
    from satpoint.reports.terminal.console import LiveView

    view = LiveView(Console(file=io.StringIO(), width=200), [Stage(100.0, 0.0, 10.0)], "run")
    line = ""
    for i in range(9):  # 4 snapshots a second, 60 answers a second, none of them due in the last second
        t = 1.0 + i / 4
        snap = LiveSnapshot(
            now_s=t, due=int(100 * t), sent=int(100 * t), inflight=20, backlog=80, total=1000,
            due_recent=100, ok_recent=0, errors=0, ok_total=int(60 * t),
        )  # fmt: skip
        view.update(snap)
        line = view.render(snap).plain
    assert "answered    60.0/s" in line
    assert "offered   100.0/s" in line


def test_quiet_prints_warnings_only_and_no_live_view() -> None:
    """``satpoint --quiet``: no live lines and no informational messages; a warning (the generator fell behind)
    still prints.  The same events without it print all three."""
    from typer.testing import CliRunner

    from satpoint.cli.main import app
    from satpoint.reports.terminal.progress import QUIET

    snap = LiveSnapshot(
        now_s=1.0, due=10, sent=10, inflight=0, backlog=0, total=100, due_recent=10, ok_recent=10, errors=0
    )

    def printed() -> str:
        out = io.StringIO()
        with EventPrinter(Console(file=out, force_terminal=True, width=100, highlight=False)) as printer:
            printer(Message("staircase 10 rps -> stable"))
            printer(Message("the generator fell behind", level="warning"))
            printer(SegmentStarted(0, "run", (Stage(10.0, 0.0, 10.0),), "run"))
            printer(Snapshot(snap))
            printer(SegmentFinished(0, "run", True, 10))
        return out.getvalue()

    try:
        assert CliRunner().invoke(app, ["--quiet", "version"]).exit_code == 0 and QUIET.is_set()
        quiet = printed()
    finally:
        QUIET.clear()
    loud = printed()
    assert "fell behind" in quiet and "staircase" not in quiet and "target 10 rps" not in quiet  # no live line
    assert "fell behind" in loud and "staircase 10 rps" in loud and "target 10 rps" in loud
