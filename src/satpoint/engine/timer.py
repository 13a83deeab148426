"""A one-shot wake-up at an absolute ``perf_counter`` time, precise to tens of microseconds.

libuv (uvloop) timers count whole milliseconds against a loop clock cached at the start of each
iteration, so a request can leave up to ~1 ms early or late; polling instead burns a core.  On Linux a
``timerfd`` on ``CLOCK_MONOTONIC`` (the clock behind ``time.perf_counter``) armed with an absolute
expiry wakes the event loop's epoll with the kernel's high-resolution timers, for two cheap system
calls per wake-up.  Python 3.11 has no ``os.timerfd_create`` (3.13 does), so it is reached through
ctypes; where that is unavailable the loop's own timers are used.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import struct
import time
from collections.abc import Callable

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


_SPEC = struct.Struct("@llll")  # struct itimerspec: interval (tv_sec, tv_nsec), then value (tv_sec, tv_nsec)


class WakeTimer:
    """Calls ``callback`` once at or just after an absolute time; re-arm with :meth:`arm`.

    The hot path re-arms without a method call: a callback that returns a time (a ``perf_counter``
    value) has the timer armed for it on the spot; one that returns None leaves it disarmed unless the
    callback called :meth:`arm` itself."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], float | None]) -> None:
        self._loop = loop
        self._callback = callback
        self._fd = -1
        self._handle: asyncio.TimerHandle | None = None
        # the itimerspec lives in a bytearray written with struct.pack_into and handed to the kernel by
        # address: cheaper than setting ctypes Structure fields and byref() per arming
        self._buf = bytearray(_SPEC.size)
        self._cbuf = (ctypes.c_char * _SPEC.size).from_buffer(self._buf)
        self._addr = ctypes.addressof(self._cbuf)
        self._settime: Callable[..., int] | None = None
        self._armed_in_callback = False
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = int(libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC))
        except (OSError, AttributeError):
            fd = -1
        if fd >= 0 and time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)":
            self._fd = fd
            # CDLL releases the GIL around the call: other threads (the checkpoint writer) get it here instead
            # of waiting for the interpreter's switch interval while the loop never idles
            settime = libc.timerfd_settime
            settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
            settime.restype = ctypes.c_int
            self._settime = settime
            loop.add_reader(fd, self._on_ready)
        elif fd >= 0:
            os.close(fd)

    @property
    def precise(self) -> bool:
        return self._fd >= 0

    def arm(self, at: float) -> None:
        """Wake at ``at`` (a ``perf_counter`` value); replaces any earlier arming."""
        settime = self._settime
        if settime is not None:
            sec = int(at)
            _SPEC.pack_into(self._buf, 0, 0, 0, sec, int((at - sec) * 1e9) or 1)  # all zero would disarm
            settime(self._fd, _TFD_TIMER_ABSTIME, self._addr, None)
            self._armed_in_callback = True
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_later(max(0.0, at - time.perf_counter()), self._fire)

    def _on_ready(self) -> None:
        # re-arming with timerfd_settime clears the expiry count, so the usual path needs no read();
        # if the callback did not re-arm, disarm (which also clears it) so epoll stops reporting it
        self._armed_in_callback = False
        at = self._callback()
        settime = self._settime
        if settime is None:  # closed meanwhile
            return
        if at is not None:
            sec = int(at)
            _SPEC.pack_into(self._buf, 0, 0, 0, sec, int((at - sec) * 1e9) or 1)
            settime(self._fd, _TFD_TIMER_ABSTIME, self._addr, None)
        elif not self._armed_in_callback:
            _SPEC.pack_into(self._buf, 0, 0, 0, 0, 0)
            settime(self._fd, 0, self._addr, None)

    def _fire(self) -> None:
        self._handle = None
        at = self._callback()
        if at is not None:
            self.arm(at)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
            self._settime = None
