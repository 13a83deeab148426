"""report.html's hysteresis section, from a folder made offline by the metastable queue twin."""

from __future__ import annotations

from pathlib import Path

from satpoint.reports.html.report import write_report
from tests.analysis.search.test_hysteresis import find_with_hysteresis


def test_the_report_shows_the_step_down_and_the_figures(tmp_path: Path) -> None:
    out = tmp_path / "find"
    s = find_with_hysteresis(out, metastable=True)
    page = write_report([out], tmp_path / "report.html").read_text()
    assert '<a href="#hysteresis">' in page and 'id="hysteresis"' in page
    section = page[page.index('id="hysteresis"') : page.index('id="details"')]
    assert "metastable" in section and s["hysteresis"]["explanation"].split(",")[0] in section
    steps = s["hysteresis"]["steps"]
    assert section.count(">overloaded<") + section.count(">draining<") + section.count(">recovered<") == len(steps)
    assert 'id="hyst-0"' in section  # the plot of completions against the offered rate
