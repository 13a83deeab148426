"""Only the target going away is "the target lost": not any ConnectionError (a broken pipe to one of
satpoint's own processes or queues is satpoint's failure, and must surface as such)."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest
import uvloop

from satpoint.errors import TargetConnectFailed, TargetUnreachable
from satpoint.metrics.records import Records
from satpoint.procedures.session import LOST_ERRORS
from satpoint.transports.rest.pool import RestPool


def test_the_target_lost_is_the_target_unreachable_not_any_connection_error() -> None:
    assert isinstance(TargetUnreachable("probe failed"), LOST_ERRORS)
    lost = TargetConnectFailed("cannot connect to 127.0.0.1:1")
    assert isinstance(lost, LOST_ERRORS) and isinstance(lost, ConnectionError)  # callers catching those still do
    for own in (BrokenPipeError(), ConnectionResetError(), ConnectionAbortedError(), ConnectionError("queue")):
        assert not isinstance(own, LOST_ERRORS)


def test_a_segment_whose_first_connections_all_fail_raises_target_connect_failed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connects are refused

    async def main() -> None:
        pool = RestPool(Records.empty(np.zeros(1)), lambda: None, "127.0.0.1", port, [b""], 4)
        await pool.prepare(2)

    with pytest.raises(TargetConnectFailed, match="cannot connect"):
        uvloop.run(asyncio.wait_for(main(), 10))
