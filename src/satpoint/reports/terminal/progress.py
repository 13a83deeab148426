"""Renders the library's progress events on a terminal: live lines per segment, messages as lines."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from satpoint.procedures.progress import Event, Message, SegmentFinished, SegmentStarted, Snapshot
from satpoint.redact import redact_text
from satpoint.reports.terminal.co_demo import ClosedLoopView
from satpoint.reports.terminal.console import LiveView

#: ``satpoint --quiet``: no live view and no informational lines; warnings (a generator that fell behind, a busy
#: machine), errors and each command's results still print
QUIET = threading.Event()


class EventPrinter:
    """An ``on_event`` callable for the command line (use as a context manager so a live view that an
    error interrupted is closed).  Messages are printed redacted (``satpoint.redact``), also of the
    literal ``secrets`` the command knows (its token, its URL's password)."""

    def __init__(self, console: Console, secrets: Sequence[str] = ()) -> None:
        self.console = console
        self.secrets = tuple(secrets)
        self._view: LiveView | None = None
        self._gone = False  # the terminal went away (a closed ssh session): stop printing, keep measuring

    def __call__(self, event: Event) -> None:
        if self._gone:
            return
        try:
            self._render(event)
        except OSError:  # EIO after a hang-up: an exception here would reach the generator's event loop
            self._gone = True
            self._view = None

    def _render(self, event: Event) -> None:
        if isinstance(event, Snapshot):
            if self._view is not None:
                self._view.update(event.snapshot)
        elif isinstance(event, SegmentStarted):
            self.close()
            if QUIET.is_set():
                return
            if event.users is not None:
                view: LiveView = ClosedLoopView(self.console, event.users, event.duration_s or 0.0, event.title)
            else:
                view = LiveView(self.console, list(event.stages), event.title)
            self._view = view.__enter__()
        elif isinstance(event, SegmentFinished):
            self.close()
        elif isinstance(event, Message):
            if QUIET.is_set() and event.level != "warning":
                return
            text = escape(redact_text(event.text, self.secrets))
            self.console.print(text, style="yellow" if event.level == "warning" else None, soft_wrap=True)

    def close(self) -> None:
        if self._view is not None:
            view, self._view = self._view, None
            try:
                view.__exit__(None, None, None)
            except OSError:
                self._gone = True

    def __enter__(self) -> EventPrinter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
