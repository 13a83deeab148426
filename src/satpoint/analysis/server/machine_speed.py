"""Did the machine run at the same speed on both sides of a diff?  ``summary.json``'s ``machine_speed``: the
reference workload's time before each segment (``engine.machine_speed``), and its fastest over the run.

``satpoint diff`` compares the two sides' fastest times: the speed the machine ran at when nothing shared the
core.  A slower segment is contention at that moment (the server still busy from the stage before, another
process: the busy-machine check's), not the machine's speed: A/A pairs of find on the embedded MLServer timed
it bimodally, about 325 or 480 µs a segment, and the medians of two runs with equal capacities differed 1.3x
while their fastest agreed within 2 % (benchmarks/RESULTS.md).  The workload is the same on both sides
whatever the server version, so a ratio beyond ``SPEED_TOLERANCE`` says the machine changed
between the runs (a neighbour VM, a hyperthread sibling busy outside this VM, a lower clock: nothing that the
busy-machine check, which sees this VM's processes only, can show): a server figure measured there is the
machine's as much as the version's, and diff holds it back (``diff_busy``) rather than call a change.

What it cannot see: a slowdown that only lasts while the load runs (the busy-machine check covers other
processes; a neighbour that wakes with the load is covered by neither), and a server that burns CPU while
idle on the generator's CPUs, which reads as a slower machine (diff then holds its figures back and exits 1:
the gate does not pass)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: the two sides' reference times may differ by this much (either way) before the machine counts as changed:
#: above the spread of the fastest time between runs on one quiet machine (benchmarks/RESULTS.md), below the
#: run-to-run spread of a saturation point (``diff --run-spread``, 10 %)
SPEED_TOLERANCE = 0.08


def machine_speed_block(generators: Sequence[tuple[int, Mapping[str, Any]]]) -> dict[str, Any] | None:
    """From each segment's generator block (index, block): the reference times and the fastest of them (None
    when no segment measured one: a folder from before, or a fleet's run)."""
    seen = {i: float(g["reference_us"]) for i, g in generators if isinstance(g.get("reference_us"), int | float)}
    if not seen:
        return None
    return {"reference_us": round(min(seen.values()), 2), "segments": seen}


def speed_ratio(base: Mapping[str, Any], new: Mapping[str, Any]) -> float | None:
    """The new side's reference time over the base's (above 1: the new side's machine ran slower), from two
    summaries; None when either side did not measure it.  Like with like: the side with more segments is
    taken at the expected fastest of as many of its segments as the other side has (``expected_fastest``), so
    a run's one segment is not held against the fastest of a find's fifteen."""
    b, n = base.get("machine_speed"), new.get("machine_speed")
    if not isinstance(b, Mapping) or not isinstance(n, Mapping):
        return None
    rb, rn = b.get("reference_us"), n.get("reference_us")
    if not isinstance(rb, int | float) or not isinstance(rn, int | float) or rb <= 0 or rn <= 0:
        return None
    sb, sn = _times(b), _times(n)
    if sb and sn:
        k = min(len(sb), len(sn))
        rb, rn = expected_fastest(sb, k), expected_fastest(sn, k)
    return float(rn) / float(rb)


def _times(block: Mapping[str, Any]) -> list[float]:
    seg = block.get("segments")
    return [float(v) for v in seg.values() if isinstance(v, int | float) and v > 0] if isinstance(seg, Mapping) else []


def expected_fastest(times: Sequence[float], k: int) -> float:
    """The expected fastest of ``k`` of ``times`` drawn without replacement: Σ x(i) · C(N − i, k − 1) / C(N, k)
    over the times sorted fastest first (k = N: the fastest)."""
    xs, n = sorted(times), len(times)
    k = max(1, min(k, n))
    total = math.comb(n, k)
    return sum(x * math.comb(n - i, k - 1) for i, x in enumerate(xs, start=1)) / total


def speed_changed(ratio: float | None, tolerance: float = SPEED_TOLERANCE) -> str | None:
    """Why the two sides cannot be compared, when the machine's speed changed beyond ``tolerance`` between
    them (None: the same speed, or not measured)."""
    if ratio is None or 1 / (1 + tolerance) <= ratio <= 1 + tolerance:
        return None
    slower, factor = ("new", ratio) if ratio > 1 else ("base", 1 / ratio)
    return (
        f"the {slower} side's machine ran slower: a fixed reference workload took {factor:.2f}x as long before "
        f"its stages (more than {1 + tolerance:.2f}x: the machine changed between the runs)"
    )
