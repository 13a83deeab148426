"""How many requests the generator may have in flight: the user's cap, or one derived from the plan.

By Little's law a server answering in L seconds at rate R holds R x L requests at once; a cap below
that makes requests wait for a connection and measures the generator, not the server.  The automatic
cap is the plan's peak rate times a latency bound (at least 2 s, or four times the latency the target
showed before the run), at least 256, and within the process's file-descriptor limit (whose soft
value is raised to the hard one first).

Whatever the cap (automatic or ``--max-inflight``), every generator process raises its own soft limit
and holds at most as many connections as its limit leaves room for (``fit_to_fd_limit``): a connect that
fails with ``EMFILE`` would otherwise be counted against the server.
"""

from __future__ import annotations

import math
import os
import resource

AUTO_MIN = 256
AUTO_BOUND_S = 2.0
HINT_FACTOR = 4.0
FD_RESERVE = 128  # descriptors left for everything else (logs, results, control calls)
#: descriptors a generator process keeps free besides its connections (its event loop, wake-up timer,
#: checkpoint file, the pipes to its parent)
SHARD_FD_RESERVE = 16
_FD_CEILING = 1 << 20


def raise_fd_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (capped at 2^20); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _FD_CEILING if hard == resource.RLIM_INFINITY else min(hard, _FD_CEILING)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return _FD_CEILING if soft == resource.RLIM_INFINITY else int(soft)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):
        return int(soft)
    return want


def auto_inflight(peak_rps: float, latency_hint_s: float | None = None, fd_limit: int | None = None) -> int:
    """The automatic in-flight cap for a plan whose highest rate is ``peak_rps``."""
    bound = max(AUTO_BOUND_S, HINT_FACTOR * (latency_hint_s or 0.0))
    cap = max(AUTO_MIN, math.ceil(peak_rps * bound))
    room = (fd_limit if fd_limit is not None else raise_fd_limit()) - FD_RESERVE
    return max(1, min(cap, room))


def open_fds() -> int:
    """How many file descriptors this process has open (0 when it cannot be told)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir itself opened
    except OSError:
        return 0


def fit_to_fd_limit(cap: int, fd_limit: int, open_now: int | None = None) -> int:
    """The in-flight cap, at most ``cap``, whose connections (one descriptor each) fit in what a process
    whose open-files limit is ``fd_limit`` and which has ``open_now`` descriptors open has left."""
    room = fd_limit - (open_fds() if open_now is None else open_now) - SHARD_FD_RESERVE
    return max(1, min(cap, room))
