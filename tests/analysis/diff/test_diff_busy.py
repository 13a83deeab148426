"""``satpoint diff`` calls no change from what was measured while the machine was busy with other work
(``summary.json``'s ``machine_busy``): the figure is the shared machine's, not the version's."""

from __future__ import annotations

from typing import Any

from satpoint.analysis.diff.busy import held_by_machine
from satpoint.analysis.diff.compare import Folder, diff_folders
from tests.analysis.diff.test_diff_run_spread import p50_at, run_folder
from tests.analysis.diff.test_diff_sides import find_doc, saturation


def busy(*segments: int, cores: float = 0.8) -> dict[str, Any]:
    stages = [{"segment": s, "target_rps": 100.0, "other_cores": cores} for s in segments]
    return {"threshold_cores": 0.25, "max_other_cores": cores, "stages": stages}


def diff(base: dict[str, Any], new: dict[str, Any], purposes: dict[int, str] | None = None) -> Any:
    return diff_folders(Folder("b", "find", base, {}, purposes or {}), Folder("n", "find", new, {}, purposes or {}))


def test_a_search_on_a_busy_machine_is_not_judged() -> None:
    """733.6 -> 459.2 rps: two finds of one unchanged server, the second while other work took 0.8 cores.  Not a
    regression; nor is a busy base's capacity, equal to a broken new one's, a no_change."""
    quiet, dropped = find_doc([(733.6, 766.1)]), find_doc([(459.2, 480.8)])
    assert saturation(diff(quiet, dropped)).verdict == "regression"
    m = saturation(diff(quiet, {**dropped, "machine_busy": busy(3, 7)}))
    assert m.verdict == "inconclusive" and m.busy
    assert "the new side's machine was busy with other work in 2 stages (up to 0.80 cores)" in m.text
    slow_base = {**find_doc([(459.2, 480.8)]), "machine_busy": busy(4)}
    assert saturation(diff(slow_base, dropped)).verdict == "inconclusive"
    # a busy stage that is not the search's (a profile, a flame graph) leaves the saturation point judged
    assert saturation(diff(quiet, {**dropped, "machine_busy": busy(9)}, {9: "profile"})).verdict == "regression"
    # a side that held no rate at all: the server's doing, whatever the machine
    failed = find_doc([], stages=[{"segment": 0, "target_rps": 50.0, "verdict": "failing"}], machine_busy=busy(0))
    assert saturation(diff(quiet, failed)).verdict == "regression"


def test_latency_at_a_rate_measured_on_a_busy_machine_is_not_judged_but_errors_are() -> None:
    base = run_folder("b", {100.0: 10.0, 500.0: 12.0}, 1)
    new = run_folder("n", {100.0: 10.0, 500.0: 30.0}, 11)
    assert p50_at(diff_folders(base, new), "500 rps").verdict == "regression"
    new.doc["machine_busy"] = busy(1)  # the 500 rps stage
    doc = diff_folders(base, new)
    m = p50_at(doc, "500 rps")
    assert m.verdict == "inconclusive" and "busy with other work" in m.text  # survives the Holm rejudging
    assert p50_at(doc, "100 rps").busy is None
    assert m in held_by_machine(doc.metrics)  # the gate's "not judged": diff exits 1, not 0
    errors = next(x for x in doc.metrics if x.metric == "error_rate" and x.point == "500 rps")
    assert errors.busy is None
