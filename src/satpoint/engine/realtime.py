"""Real-time scheduling for the generator's event loop (``--realtime N``: ``SCHED_FIFO`` priority N).

A process that shares the generator's core (the server, a build, another tenant) holds it for a whole
scheduler slice before the woken generator runs: with a neighbour that is busy half of the time, the p99
send lag at 5 000 rps is ~4 ms on a 6.x kernel (EEVDF), whatever the generator does.  ``SCHED_FIFO``
pre-empts every ordinary task the moment the timer fires (measured: p99 4.2 ms -> 0.02 ms beside that
neighbour, ``benchmarks/RESULTS.md``), at the price of the neighbour's context switches.

The kernel's real-time throttling (``/proc/sys/kernel/sched_rt_runtime_us``, 95 % of every second by
default) keeps a saturated generator from starving the core; with throttling off, the priority is
refused.  Needs ``CAP_SYS_NICE`` or an ``RLIMIT_RTPRIO`` (``ulimit -r``) of at least N.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Callable, Iterator
from pathlib import Path

from satpoint.errors import ConfigError

_RT_RUNTIME = Path("/proc/sys/kernel/sched_rt_runtime_us")


class RealtimeUnavailable(ConfigError):
    """The real-time priority asked for cannot be set here (permissions, platform, throttling off)."""


def _why_not(priority: int) -> str | None:
    if not hasattr(os, "SCHED_FIFO"):
        return "real-time scheduling (SCHED_FIFO) is not available on this platform"
    top = os.sched_get_priority_max(os.SCHED_FIFO)
    if not 1 <= priority <= top:
        return f"--realtime takes a priority from 1 to {top}, not {priority}"
    try:
        if int(_RT_RUNTIME.read_text().strip()) < 0:
            return (
                "real-time throttling is off (kernel.sched_rt_runtime_us = -1): a saturated generator could "
                "starve its core, so --realtime is refused; set it to e.g. 950000 first"
            )
    except (OSError, ValueError):
        pass  # not Linux's procfs: the kernel's own check below decides
    return None


def enter_realtime(priority: int) -> Callable[[], None]:
    """Run the calling thread at ``SCHED_FIFO`` ``priority``; returns the function that restores its policy.

    ``priority`` 0 does nothing.  Threads the caller starts afterwards (the checkpoint writer) inherit it."""
    if priority == 0:
        return lambda: None
    why = _why_not(priority)
    if why is not None:
        raise RealtimeUnavailable(why)
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError:
        soft, _ = resource.getrlimit(resource.RLIMIT_RTPRIO)
        raise RealtimeUnavailable(
            f"--realtime {priority} needs CAP_SYS_NICE or a real-time priority limit of at least {priority} "
            f"(ulimit -r is {soft}); run without --realtime, or give the generator that right"
        ) from None

    def restore() -> None:
        os.sched_setscheduler(0, policy, param)

    return restore


def check_realtime(priority: int) -> None:
    """Raise :class:`RealtimeUnavailable` now (before a server starts) if ``priority`` cannot be set."""
    enter_realtime(priority)()


@contextlib.contextmanager
def pinned(cpus: list[int] | None, priority: int) -> Iterator[None]:
    """The calling thread on ``cpus`` (None: where it is) at real-time ``priority`` (0: unchanged) while
    the block runs; its CPUs and policy restored after (a sweep's next point picks its server's cores from
    the CPUs satpoint may use, not the generator's)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus or before)
    try:
        restore = enter_realtime(priority)
        try:
            yield
        finally:
            restore()
    finally:
        os.sched_setaffinity(0, before)
