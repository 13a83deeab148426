"""A host's clock offset against the driver, NTP style.

The driver reads its wall clock, asks the host for its own, and reads its wall clock again: with
``t_send`` and ``t_recv`` on the driver and ``t_host`` on the host, the host is ahead of the driver by
``offset = t_host - (t_send + t_recv) / 2``, give or take half the round trip (the host read its clock
somewhere within it).  Of several round trips the one with the shortest round trip bounds the offset
best: it is kept, and half its round trip is the uncertainty.

The offsets only place the hosts' runs on one timeline (the common start, per-second intervals).
Latency never crosses hosts: each host times its requests on its own monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClockSample:
    send_s: float  # driver wall clock when the request left
    host_s: float  # host wall clock when it answered
    recv_s: float  # driver wall clock when the answer came back

    @property
    def rtt_s(self) -> float:
        return self.recv_s - self.send_s

    @property
    def offset_s(self) -> float:
        return self.host_s - (self.send_s + self.recv_s) / 2


@dataclass(frozen=True)
class ClockOffset:
    """How far a host's wall clock is ahead of the driver's (``offset_s``), within ``± uncertainty_s``."""

    offset_s: float
    uncertainty_s: float
    rtt_s: float
    samples: int
    #: the spread of the offsets of all samples (a hint of NTP stepping the clock meanwhile)
    spread_s: float

    def describe(self) -> dict[str, float | int]:
        return {
            "offset_s": round(self.offset_s, 7),
            "uncertainty_s": round(self.uncertainty_s, 7),
            "rtt_s": round(self.rtt_s, 7),
            "samples": self.samples,
            "spread_s": round(self.spread_s, 7),
        }


def estimate_offset(samples: list[ClockSample]) -> ClockOffset:
    """The offset of the sample with the shortest round trip, uncertain by half that round trip."""
    if not samples:
        raise ValueError("no clock samples")
    best = min(samples, key=lambda s: s.rtt_s)
    offsets = [s.offset_s for s in samples]
    return ClockOffset(
        offset_s=best.offset_s,
        uncertainty_s=max(best.rtt_s, 0.0) / 2,
        rtt_s=best.rtt_s,
        samples=len(samples),
        spread_s=max(offsets) - min(offsets),
    )
