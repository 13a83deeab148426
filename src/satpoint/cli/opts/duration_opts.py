"""Durations on every time option: ``500ms``, ``30s``, ``2m``, ``1h`` (and ``us``), or a bare number in the
option's own unit (seconds, or milliseconds for a ``*_ms`` option), as before.  A command's arguments are
rewritten to the option's unit before they are parsed (``in_units``), so every time option takes them."""

from __future__ import annotations

import re
from collections.abc import Sequence

#: time option (its longest spelling) -> seconds in one unit of it
UNIT_S: dict[str, float] = {
    **dict.fromkeys(
        ("--timeout", "--drain", "--duration", "--budget-s", "--cooldown", "--ramp", "--min-hold", "--max-hold",
         "--find-budget-s", "--ready-timeout", "--max-batch-time", "--pause-every",
         "--idle-timeout", "--call-timeout", "--budget", "--search-budget"),
        1.0,
    ),
    **dict.fromkeys(
        ("--think", "--service", "--wake-window", "--slow-headers", "--stream-first", "--stream-gap", "--slo-p99-ms"),
        1e-3,
    ),
    "--trace-stage": 1.0,
    "--pause": 1.0,
}  # fmt: skip
#: old spelling -> new one, the unit out of the name (the same unit; the old spelling still works, hidden)
RENAMED = {
    "--think-ms": "--think", "--service-ms": "--service", "--wake-window-ms": "--wake-window",
    "--slow-headers-ms": "--slow-headers", "--stream-first-ms": "--stream-first", "--stream-gap-ms": "--stream-gap",
    "--trace-stage-s": "--trace-stage", "--pause-s": "--pause",
}  # fmt: skip
_SUFFIX_S = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)(us|µs|ms|s|m|h)$")

#: said in the help of every command that has a time option
DURATION_HELP = "Times take 500ms, 30s, 2m or 1h; a bare number is in the option's unit (seconds; ms for *-ms)."


def to_unit(text: str, unit_s: float) -> str:
    """``text`` in the option's unit if it is a duration with a suffix (``2m`` -> ``120`` for seconds),
    else ``text`` unchanged (a bare number, or something the option's own parsing refuses)."""
    m = _DURATION.match(text.strip())
    if m is None:
        return text
    return f"{float(m.group(1)) * _SUFFIX_S[m.group(2)] / unit_s:.12g}"


def in_units(args: Sequence[str], flags: dict[str, float]) -> list[str]:
    """A command's arguments with every old spelling of a time option in ``flags`` (spelling -> seconds per
    unit) given its new one (``RENAMED``), and every value turned into the option's unit: ``--ramp 500ms`` ->
    ``--ramp 0.5``, ``--think-ms=1s`` -> ``--think=1000``."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        flag, eq, value = arg.partition("=")
        flag = new if (new := RENAMED.get(flag)) in flags else flag
        if eq and flag in flags:
            out[i] = f"{flag}={to_unit(value, flags[flag])}"
        elif flag in flags and i + 1 < len(out):
            out[i], out[i + 1] = flag, to_unit(out[i + 1], flags[flag])
    return out
