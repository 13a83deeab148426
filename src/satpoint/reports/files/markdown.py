"""``satpoint diff``'s Markdown summary (``--markdown FILE``, and ``$GITHUB_STEP_SUMMARY`` in GitHub Actions)."""

from __future__ import annotations

from satpoint.analysis.diff.verdict import DiffDoc, MetricDiff, Side, format_figure

#: GitHub refuses a step summary over 1 MiB: the details are cut before that
MAX_BYTES = 1_000_000
_MARK = {"regression": "❌ regression", "improvement": "✅ improvement", "no_change": "✅ no change",
         "inconclusive": "⚠️ inconclusive"}  # fmt: skip


def _side(s: Side, unit: str) -> str:
    if s.value is None:
        return "-"
    if s.low is None:
        return f"{format_figure(s.value, unit)} (n={s.n})"
    hi = "∞" if s.high is None else format_figure(s.high, unit)
    return f"{format_figure(s.value, unit)} ({format_figure(s.low, unit)}–{hi}, n={s.n})"


def _change(m: MetricDiff) -> str:
    if m.change is None:
        return "-"
    if m.absolute:
        return f"{m.change * 100:+.2f} pt"
    return f"{m.change * 100:+.1f} %"


def _tail(doc: DiffDoc) -> str:
    tail = "" if doc.tail_tolerance is None else f", p90/p99 {doc.tail_tolerance * 100:.3g} %"
    return tail + ("" if doc.run_spread is None else f", run spread {doc.run_spread * 100:.3g} %")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def diff_markdown(doc: DiffDoc) -> str:
    """The verdicts as GitHub-flavoured Markdown: a headline, one table row per metric, the evidence."""
    head = [
        f"## satpoint diff: {_MARK[doc.verdict]}",
        "",
        f"{doc.compared} results: base `{_cell(str(doc.base.get('dir')))}`"
        + (f" point `{doc.base['point']}`" if doc.base.get("point") else "")
        + f", new `{_cell(str(doc.new.get('dir')))}`"
        + (f" point `{doc.new['point']}`" if doc.new.get("point") else "")
        + f"; tolerance {doc.tolerance * 100:.3g} %{_tail(doc)} (error rate {doc.error_tolerance * 100:.3g} "
        "percentage points).",
        "",
        " · ".join(f"{k.replace('_', ' ')}: {v}" for k, v in doc.counts.items()),
        "",
        "| metric | at | base (range, n) | new (range, n) | change | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    rows = [
        f"| {m.metric} | {_cell(m.point)} | {_side(m.base, m.unit)} | {_side(m.new, m.unit)} | {_change(m)} | "
        f"{_MARK[m.verdict]} |"
        for m in doc.metrics
    ]
    hold = doc.target_hold
    if hold is not None:
        mark = {True: "✅", False: "❌", None: "⚠️"}[hold.held]
        head[2:2] = [f"**{mark} {_cell(hold.text)}**", ""]
    tail = [""] + [f"- {_cell(n)}" for n in doc.notes]
    details = ["", "<details><summary>evidence</summary>", ""]
    details += [f"- **{_MARK[m.verdict]}** {_cell(m.text)}" for m in doc.metrics]
    details += ["", "</details>", ""]
    text = "\n".join(head + rows + tail + details)
    if len(text.encode()) > MAX_BYTES:
        text = "\n".join(head + rows + tail + ["", "(the evidence is in diff.json: too long for a summary)", ""])
    if len(text.encode()) > MAX_BYTES:
        text = text.encode()[: MAX_BYTES - 100].decode(errors="ignore") + "\n\n(cut: the rest is in diff.json)\n"
    return text
