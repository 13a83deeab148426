"""Was the machine busy with other work while it measured?  A local server's figures (its capacity, its
latency) are the machine's as much as the version's: another process on its CPUs, on their hyperthread
siblings, or a neighbour VM's steal lowers them, and two runs of one unchanged server on a shared machine
differed by 37 % that way (benchmarks/RESULTS.md).  The observer records every CPU's busy time and the CPU
time of the server's and satpoint's own processes (``metrics.observed``); the rest, per stage, is
``machine_other_cores`` (``server_side``).  A stage where other work took ``BUSY_OTHER_CORES`` or more is
*busy*: said in the summary (``machine_busy``, a warning), and ``satpoint diff`` calls no change from it
(``diff_busy``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: other work, in cores averaged over a stage's steady window, that makes the stage busy: a quarter of a
#: core (on a quiet machine the rest is the kernel's own, a few hundredths: benchmarks/RESULTS.md)
BUSY_OTHER_CORES = 0.25


def machine_busy_block(stage_docs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``summary.json``'s ``machine_busy``: the most other work seen in a stage, and the busy stages
    (None when the machine was not watched: no local server observed, or a folder from before)."""
    seen = [
        (d, float(v))
        for d in stage_docs
        if isinstance(d.get("server"), Mapping) and (v := d["server"].get("machine_other_cores")) is not None
    ]
    if not seen:
        return None
    busy = [
        {"segment": int(d["segment"]), "target_rps": d.get("target_rps"), "other_cores": v}
        for d, v in seen
        if v >= BUSY_OTHER_CORES
    ]
    return {"threshold_cores": BUSY_OTHER_CORES, "max_other_cores": round(max(v for _, v in seen), 4), "stages": busy}


def busy_warning(block: Mapping[str, Any] | None) -> str | None:
    """The summary's warning when some stage was busy (None otherwise)."""
    if not block or not block.get("stages"):
        return None
    n = len(block["stages"])
    return (
        f"BUSY MACHINE: other work took up to {block['max_other_cores']:.2f} cores of this machine in {n} "
        f"stage{'s' if n > 1 else ''} (at least {block['threshold_cores']:g} each): the server's figures there "
        "are the shared machine's, not the version's (satpoint diff calls no change from them); measure on a "
        "quiet machine or give the server CPUs of its own"
    )


def busy_segments(summary: Mapping[str, Any]) -> dict[int, float]:
    """The busy stages of a summary: segment -> other work in cores ({} when none, or not watched)."""
    block = summary.get("machine_busy")
    if not isinstance(block, Mapping):
        return {}
    return {int(s["segment"]): float(s["other_cores"]) for s in block.get("stages") or []}
