"""The metastable sim's known rates and its ``--metastable`` value, pure arithmetic (no I/O, no clock).

``satpoint sim --metastable HIGH,LOW,FACTOR`` (see ``satpoint.servers.sim.server``): the rates a test or a report
can compare a measurement with, from the sim's slots, service time and degradation factor.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from satpoint.errors import ConfigError


def parse_metastable(text: str) -> tuple[int, int, float]:
    """``HIGH,LOW,FACTOR`` (the ``--metastable`` value) as numbers; ConfigError if it is not that shape.

    The values themselves are checked by ``SimConfig``."""
    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) != 3:
            raise ValueError
        return int(parts[0]), int(parts[1]), float(parts[2])
    except ValueError:
        raise ConfigError(
            "sim: --metastable takes HIGH,LOW,FACTOR (e.g. 20,2,2.5: integers HIGH > LOW >= 0, FACTOR > 1), "
            f"got {text!r}"
        ) from None


#: ``satpoint sim --metastable``'s help
METASTABLE_HELP = (
    "metastable: degraded once more than HIGH requests wait for a slot, until fewer than LOW do; "
    "services started degraded take FACTOR x (e.g. 20,2,2.5; docs: internals/validation.md)"
)


def metastable_fields(text: str | None) -> dict[str, Any]:
    """``SimConfig`` keyword arguments for a ``--metastable`` value (none for None)."""
    if text is None:
        return {}
    high, low, factor = parse_metastable(text)
    return {"metastable_high": high, "metastable_low": low, "metastable_factor": factor}


class MetastableFigures(NamedTuple):
    """The known rates of a metastable sim (requests per second, long-run, without pauses)."""

    #: offered load above this builds a queue without bound, which passes HIGH: the server tips over
    collapse_rps: float
    #: completion rate while degraded (goodput collapsed): ``slots / (service_s * factor)``
    degraded_capacity_rps: float
    #: offered load below this drains a degraded server's queue below LOW, and service returns to normal;
    #: 0 when LOW is 0 (fewer than 0 waiting never happens: once degraded, always degraded)
    recovery_rps: float


def collapse_rps(slots: int, service_ms: float) -> float:
    """Offered load above which a metastable sim tips over: its normal capacity ``slots / S``."""
    return slots / (service_ms / 1000.0)


def degraded_capacity_rps(slots: int, service_ms: float, factor: float) -> float:
    """A degraded metastable sim's completion rate: ``slots / (S * factor)``."""
    return slots / (service_ms / 1000.0 * factor)


def recovery_rps(slots: int, service_ms: float, factor: float, low: int) -> float:
    """Offered load below which a degraded metastable sim recovers: its degraded capacity (its queue
    drains, so falls below LOW); 0 if LOW is 0 (it never recovers)."""
    return degraded_capacity_rps(slots, service_ms, factor) if low > 0 else 0.0


def metastable_figures(slots: int, service_ms: float, factor: float, low: int) -> MetastableFigures:
    """All three known rates of a metastable sim."""
    return MetastableFigures(
        collapse_rps(slots, service_ms),
        degraded_capacity_rps(slots, service_ms, factor),
        recovery_rps(slots, service_ms, factor, low),
    )
