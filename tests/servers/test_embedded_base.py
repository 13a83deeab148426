"""EmbeddedServer's stop on the way out: an error that ends the ``with`` block is the one the caller sees,
even when the stop that follows fails too (a process that survived it)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from satpoint.servers.embedded_base import EmbeddedServer
from satpoint.servers.process import TargetError


class _Survivor:
    """A process tree one of whose processes survives the stop."""

    log_path = Path("/nonexistent/child.log")
    seen_pids: frozenset[int] = frozenset({4242})

    def descendants(self) -> list[int]:
        return []

    def stop(self, grace_s: float) -> None:
        pass

    def alive_pids(self) -> list[int]:
        return [4242]


class _Server(EmbeddedServer):
    NAME: ClassVar[str] = "Fake"

    def __init__(self) -> None:
        super().__init__(ready_timeout_s=1.0, stop_grace_s=0.1, kill_with_parent=False)

    def _start(self) -> None:
        self._process = _Survivor()  # type: ignore[assignment]


def test_an_error_in_the_block_is_not_replaced_by_a_failed_stop() -> None:
    with pytest.raises(ValueError, match="the cause") as info, _Server():
        raise ValueError("the cause")
    notes = getattr(info.value, "__notes__", [])
    assert any("stopping Fake failed too" in n and "survived stop (pids [4242])" in n for n in notes), notes


def test_a_failed_stop_after_a_clean_block_is_raised() -> None:
    with pytest.raises(TargetError, match=r"Fake processes survived stop \(pids \[4242\]\)"), _Server():
        pass


def test_a_failed_start_is_not_replaced_by_a_failed_stop() -> None:
    class _Failing(_Server):
        def _start(self) -> None:
            super()._start()
            raise TargetError("Fake model 'm' not ready after 1 s")

    with pytest.raises(TargetError, match="not ready after 1 s") as info:
        _Failing().start()
    assert any("survived stop" in n for n in getattr(info.value, "__notes__", []))
