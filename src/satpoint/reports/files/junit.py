"""``satpoint diff --junit FILE``: one JUnit test case per metric and point (junitparser).

A regression is a failure; a figure the gate cannot pass on (held back by the machine, busy or changed in
speed, or a change for the worse left undecided: exit 1) an error of type ``unjudged``; another inconclusive
verdict is skipped (with ``--fail-on-inconclusive`` every inconclusive one is a failure, exit 3); improvements
and no change pass.
The evidence is each case's message and ``system-out``."""

from __future__ import annotations

from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from satpoint.analysis.diff.verdict import DiffDoc


def diff_junit(doc: DiffDoc, fail_on_inconclusive: bool = False) -> JUnitXml:
    suite = TestSuite(f"satpoint diff ({doc.compared})")
    for key, value in (
        ("base", doc.base.get("dir")),
        ("new", doc.new.get("dir")),
        ("tolerance", doc.tolerance),
        ("tail_tolerance", doc.tail_tolerance),
        ("error_tolerance", doc.error_tolerance),
        ("verdict", doc.verdict),
    ):
        suite.add_property(key, str(value))
    for m in doc.metrics:
        case = TestCase(f"{m.metric} @ {m.point}", classname=f"satpoint.diff.{doc.compared}", time=0.0)
        unjudged = bool(m.busy) or m.worse_undecided
        if m.verdict == "regression" or (m.verdict == "inconclusive" and fail_on_inconclusive):
            case.result = [Failure(m.text, m.verdict)]
        elif unjudged:
            case.result = [Error(m.text, "unjudged")]
        elif m.verdict == "inconclusive":
            case.result = [Skipped(m.text)]
        case.system_out = m.text
        suite.add_testcase(case)
    hold = doc.target_hold
    if hold is not None:
        case = TestCase(f"baseline target @ {hold.rate_rps:g} rps", classname=f"satpoint.diff.{doc.compared}", time=0.0)
        if hold.held is False or (hold.held is None and fail_on_inconclusive):
            case.result = [Failure(hold.text, "regression" if hold.held is False else "inconclusive")]
        elif hold.held is None and hold.busy:
            case.result = [Error(hold.text, "unjudged")]
        elif hold.held is None:
            case.result = [Skipped(hold.text)]
        case.system_out = hold.text
        suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    return xml


def write_junit(doc: DiffDoc, path: Path, fail_on_inconclusive: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    diff_junit(doc, fail_on_inconclusive).write(str(path), pretty=True)
