"""The replica sources: a command's numbers, its failures as one line, and the wait for a settled count."""

from __future__ import annotations

import pytest

from satpoint.errors import ConfigError
from satpoint.observe.replicas import CommandSource, settle


class _Counts:
    name = "test"

    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.i = 0

    def read(self) -> tuple[float, float | None]:
        v = self.values[min(self.i, len(self.values) - 1)]
        self.i += 1
        return v, None


def test_a_command_gives_the_ready_and_the_desired_count() -> None:
    assert CommandSource("echo 3 5").read() == (3.0, 5.0)
    assert CommandSource("printf 'replicas: 2\\n'").read() == (2.0, None)
    with pytest.raises(ConfigError, match="printed no number"):
        CommandSource("echo none").read()
    with pytest.raises(ConfigError, match=r"failed \(exit 3\): oops"):
        CommandSource("echo oops >&2; exit 3").read()
    with pytest.raises(ConfigError, match="did not finish"):
        CommandSource("sleep 5", timeout_s=0.2).read()


def test_settle_waits_until_the_count_holds() -> None:
    source = _Counts([4, 4, 3, 2, 1, 1, 1, 1, 1, 1])
    settled, readings = settle(source, quiet_s=0.05, max_s=5.0, every_s=0.02)
    assert settled and readings[-1].ready == 1 and len(readings) >= 6


def test_settle_gives_up_at_its_bound() -> None:
    source = _Counts([float(i % 2) for i in range(1000)])  # flapping for ever
    settled, readings = settle(source, quiet_s=0.2, max_s=0.1, every_s=0.02)
    assert not settled and len(readings) >= 3
