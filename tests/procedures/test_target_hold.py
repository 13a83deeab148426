"""``find --baseline``: the hold at the baseline's per-replica target, after the search, from idle."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from satpoint.analysis.diff.target import TARGET_HOLD_PURPOSE
from satpoint.analysis.search.target_lost import HEADER_KEY
from satpoint.config import FindOptions
from satpoint.errors import TargetUnreachable
from satpoint.plan import Stage
from satpoint.procedures import target_hold


class StubSession:
    """What ``hold_from_idle`` uses of a ``Session``: its target, stop event, events, header and ``measure``."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.prepared = SimpleNamespace(latency_hint_s=0.01)
        self.stop = threading.Event()
        self.said: list[str] = []
        self.on_event = lambda e: self.said.append(getattr(e, "text", str(e)))
        self.results = SimpleNamespace(header={}, segments=[])
        self.out_dir = "out"
        self.measured: list[dict[str, Any]] = []
        self.fail = fail

    def measure(self, stages: list[Stage], **kw: Any) -> str:
        if self.fail is not None:
            raise self.fail
        self.measured.append({"stages": stages, **kw})
        return "segment"


@pytest.fixture
def idle(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float | None]]:
    waits: list[tuple[float, float | None]] = []
    monkeypatch.setattr(target_hold, "write_header", lambda _out, _results: None, raising=False)

    def wait(_target: object, min_s: float, svc: float | None, **_: object) -> float:
        waits.append((min_s, svc))
        return 0.0

    monkeypatch.setattr(target_hold, "wait_until_idle", wait)
    return waits


def test_holds_the_rate_alone_from_idle_as_a_segment_of_its_own(idle: list[tuple[float, float | None]]) -> None:
    session = StubSession()
    opts = FindOptions(min_hold_s=3.0, max_hold_s=5.0, min_requests=600)
    assert target_hold.hold_from_idle(session, opts, 255.0) is not None  # type: ignore[arg-type]
    (m,) = session.measured
    (stage,) = m["stages"]
    assert m["purpose"] == TARGET_HOLD_PURPOSE and m["start_rps"] == 0.0  # ramped from zero
    assert stage.target_rps == 255.0 and stage.ramp_s == opts.ramp_s
    assert stage.hold_s == target_hold.target_stage(opts, 255.0, 0.01).hold_s >= 2 * 3.0  # as long as a confirmation
    assert idle == [(opts.cooldown_s, 0.01)]  # after a cool-down until the server answers at low-load speed


def test_not_held_when_the_search_was_stopped_or_the_target_went_away(idle: list[tuple[float, float | None]]) -> None:
    stopped = StubSession()
    stopped.stop.set()
    assert target_hold.hold_from_idle(stopped, FindOptions(), 100.0) is None  # type: ignore[arg-type]
    lost = StubSession()
    lost.results.header[HEADER_KEY] = {"when": "x", "error": "gone"}
    assert target_hold.hold_from_idle(lost, FindOptions(), 100.0) is None  # type: ignore[arg-type]
    assert not stopped.measured and not lost.measured and not idle
    gone = StubSession(fail=TargetUnreachable("refused"))
    assert target_hold.hold_from_idle(gone, FindOptions(), 100.0) is None  # type: ignore[arg-type]
    assert any("stopped answering" in s for s in gone.said)
    # recorded as a target lost (summary.json's target_lost): the folder no longer reads as a search that
    # answered and recommended, with no hold to judge (diff's no_change, exit 0)
    assert gone.results.header[HEADER_KEY]["error"] == "refused"


def test_not_held_when_the_target_died_under_the_last_stage(
    idle: list[tuple[float, float | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = StubSession()
    dead.results.segments = [SimpleNamespace(records="dead"), SimpleNamespace(records="died")]
    seen: list[object] = []
    monkeypatch.setattr(target_hold, "stopped_answering_at", lambda r: seen.append(r) or 12.0)
    assert target_hold.hold_from_idle(dead, FindOptions(), 100.0) is None  # type: ignore[arg-type]
    assert seen == ["died"] and not dead.measured and not idle  # no minute spent waiting for a dead server
    assert any("stopped answering" in s for s in dead.said)
    alive = StubSession()
    alive.results.segments = [SimpleNamespace(records="ok")]
    monkeypatch.setattr(target_hold, "stopped_answering_at", lambda r: None)
    assert target_hold.hold_from_idle(alive, FindOptions(), 100.0) is not None  # type: ignore[arg-type]
