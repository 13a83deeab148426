"""Progress of a run as events, so the library never writes to the terminal by itself.

Every long-running function of the API takes ``on_event``: a callable that receives, in order,
``SegmentStarted`` (a measured segment begins: its stages, or a closed loop's users), ``Snapshot``
(about twice a second while it runs), ``SegmentFinished`` and ``Message`` (one line of what the run is
doing: the probe, a cool-down, the search's decision on a stage).  The command line renders them
(``reports.terminal.progress``); a notebook can collect them; ``None`` ignores them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from satpoint.engine.live import LiveSnapshot
from satpoint.plan import Stage


@dataclass(frozen=True)
class SegmentStarted:
    """A measured segment begins (``purpose``: run, staircase, refine, profile, closed_loop)."""

    index: int
    purpose: str
    stages: tuple[Stage, ...]
    title: str
    #: closed loop only: the users and how long they run
    users: int | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class Snapshot:
    """Live figures of the running segment (the last second's offered/answered rate, latency sample)."""

    snapshot: LiveSnapshot


@dataclass(frozen=True)
class SegmentFinished:
    index: int
    purpose: str
    interrupted: bool
    requests: int


@dataclass(frozen=True)
class Message:
    text: str
    level: Literal["info", "warning"] = "info"


Event = SegmentStarted | Snapshot | SegmentFinished | Message
#: receives every event of a run; must return quickly (snapshots arrive from the generator's thread)
OnEvent = Callable[[Event], None]


def ignore(_: Event) -> None:
    """The default ``on_event``: drop everything."""


def say(on_event: OnEvent | None, text: str, level: Literal["info", "warning"] = "info") -> None:
    if on_event is not None:
        on_event(Message(text, level))
