"""report.html: one self-contained page (plotly.js inlined once, no network) from one or more results folders.

Several folders are overlaid (e.g. before / after a tuning change): each folder is one trace group,
labelled with its folder name, in its own colour.  The page records whether every plot drew and any
script error in ``<body data-plots data-drawn data-errors>`` and shows a red box if something failed,
so a broken report is visible to a reader and checkable by a headless browser.
"""

from __future__ import annotations

import os
from pathlib import Path

from plotly.offline import get_plotlyjs

from satpoint.redact import redact_url
from satpoint.reports.html.data import MAX_POINTS, FolderData, folder_labels, load_folder
from satpoint.reports.html.embed import figure_html
from satpoint.reports.html.hysteresis import has_hysteresis, hysteresis_figures, hysteresis_plot, hysteresis_table
from satpoint.reports.html.plots import folder_colour, plots_for
from satpoint.reports.html.server import server_section
from satpoint.reports.html.stream import has_stream, stream_section
from satpoint.reports.html.tables import (
    esc,
    fmt_time,
    folder_details,
    headline_table,
    latency_at_table,
    segments_table,
    stage_table,
    warnings_html,
)
from satpoint.reports.html.trace import has_trace, trace_section
from satpoint.reports.per_model import has_models, models_section

__all__ = ["render_report", "write_report"]


CSS = """
:root { --fg:#1f2328; --muted:#6a737d; --line:#d8dee4; --bg:#f6f8fa; --red:#b42318; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
       color: var(--fg); background: white; }
main { max-width: 1400px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 19px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 4px 0 6px; }
h4 { font-size: 13px; margin: 14px 0 4px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
.sub { color: var(--muted); margin: 0 0 10px; }
.muted { color: var(--muted); }
.path { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; word-break: break-all; }
nav { font-size: 13px; margin: 6px 0 12px; }
nav a { margin-right: 12px; color: #0969da; text-decoration: none; }
table { border-collapse: collapse; margin: 6px 0 14px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 4px 8px; vertical-align: top; }
thead th { background: var(--bg); position: sticky; top: 0; }
table.stages td { text-align: right; white-space: nowrap; }
table.stages td:last-child { text-align: left; white-space: normal; min-width: 260px; }
table.headline th { text-align: left; background: var(--bg); }
table.headline td { min-width: 180px; }
table.kv th { text-align: left; font-weight: 500; background: var(--bg); width: 36%; word-break: break-word; }
table.kv td { word-break: break-word; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
              font-size: 12px; }
.scroll { overflow-x: auto; }
.verdict { color: white; border-radius: 4px; padding: 1px 6px; font-size: 12px; white-space: nowrap; }
.reasons { font-size: 12px; color: #444; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 6px;
          vertical-align: -1px; }
.warnings, .report-errors { border: 2px solid var(--red); background: #fef3f2; color: var(--red);
                           border-radius: 6px; padding: 4px 16px; margin: 14px 0; }
.warnings h2, .report-errors h2 { border: none; margin: 8px 0 0; color: var(--red); }
.report-errors { display: none; }
.plot { border: 1px solid var(--line); border-radius: 6px; margin: 14px 0; padding: 4px; }
.cards { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.card { flex: 1 1 420px; min-width: 0; border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; }
.card table.kv { width: 100%; }
footer { margin-top: 32px; color: var(--muted); font-size: 12px; }
"""

#: in <head>, before any plot script: remember every script error, failed resource load, rejected promise
#: and console.error
HEAD_JS = """
window.satpointErrors = [];
window.addEventListener('error', function (e) {
  var t = e && e.target;
  if (t && t !== window && (t.src || t.href)) {
    window.satpointErrors.push('failed to load ' + (t.src || t.href));
  } else {
    window.satpointErrors.push(String(e && (e.message || e.type) || e));
  }
}, true);
window.addEventListener('unhandledrejection', function (e) {
  window.satpointErrors.push('unhandled rejection: ' + String(e && e.reason));
});
(function () {
  var orig = console.error;
  console.error = function () {
    window.satpointErrors.push(Array.prototype.map.call(arguments, String).join(' '));
    return orig.apply(console, arguments);
  };
})();
"""

#: at the end of <body>: publish what drew (for readers and headless checks), show failures
TAIL_JS = """
window.addEventListener('load', function () {
  setTimeout(function () {
    var divs = document.querySelectorAll('.plotly-graph-div');
    var drawn = 0;
    for (var i = 0; i < divs.length; i++) { if (divs[i].querySelector('.main-svg')) { drawn++; } }
    var b = document.body, errs = window.satpointErrors || [];
    if (typeof Plotly === 'undefined') { errs.push('plotly.js did not load'); }
    b.dataset.plots = String(divs.length);
    b.dataset.drawn = String(drawn);
    b.dataset.svgs = String(document.querySelectorAll('.js-plotly-plot .main-svg').length);
    b.dataset.errors = JSON.stringify(errs);
    if (errs.length || drawn < divs.length) {
      var box = document.getElementById('report-errors');
      var list = document.getElementById('report-errors-list');
      var msgs = errs.slice();
      if (drawn < divs.length) { msgs.unshift((divs.length - drawn) + ' of ' + divs.length + ' plots did not draw'); }
      for (var j = 0; j < msgs.length; j++) {
        var li = document.createElement('li'); li.textContent = msgs[j]; list.appendChild(li);
      }
      box.style.display = 'block';
    }
    b.dataset.ready = '1';
  }, 50);
});
"""


def page_head(title: str) -> list[str]:
    """A report page up to its heading: styles, the error catcher, plotly.js inlined, the box that shows
    what did not draw.  Every report page starts with it and ends with ``page_tail``."""
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{CSS}</style>",
        f"<script>{HEAD_JS}</script>",
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body><main>",
        f"<h1>{esc(title)}</h1>",
    ]


REPORT_ERRORS_BOX = (
    '<div class="report-errors" id="report-errors"><h2>The report could not draw everything</h2>'
    '<ul id="report-errors-list"></ul></div>'
)


def page_tail() -> str:
    """The end of a report page: the self-check that publishes what drew (``<body data-…>``)."""
    return f"</main><script>{TAIL_JS}</script></body></html>"


def _title(folders: list[FolderData]) -> str:
    kinds = sorted({f.kind for f in folders})
    if len(folders) == 1:
        return f"satpoint {folders[0].kind} report: {folders[0].label}"
    return f"satpoint comparison ({', '.join(kinds)}): " + " vs ".join(f.label for f in folders)


def _subtitle(folders: list[FolderData]) -> str:
    parts = []
    for f in folders:
        t = f.summary.get("target", {})
        sw = f'<span class="swatch" style="background:{esc(f.colour)}"></span>' if len(folders) > 1 else ""
        url = redact_url(str(t.get("url") or "?"))
        parts.append(
            f"<div>{sw}<strong>{esc(f.kind)}</strong> · {esc(t.get('protocol') or '?')} "
            f'<span class="path">{esc(url)}</span> · model <strong>{esc(t.get("model") or "?")}'
            f"</strong> · created {fmt_time(f.summary.get('created_unix'))} · satpoint "
            f"{esc(f.summary.get('tool_version') or '?')}</div>"
        )
    return f'<div class="sub">{"".join(parts)}</div>'


def _flamegraph_link(f: FolderData, report_dir: Path | None) -> str | None:
    """The flame graph's SVG relative to the report (None: there is none)."""
    fg = f.summary.get("flamegraph") or {}
    svg = str(fg.get("svg") or "")
    if not svg or not (f.path / svg).exists():
        return None
    target = (f.path / svg).resolve()
    if report_dir is None:
        return target.as_uri()
    return Path(os.path.relpath(target, report_dir.resolve())).as_posix()


def render_report(folders: list[FolderData], report_dir: Path | None = None) -> str:
    """The whole page as one string (``report_dir``: where it will be written, for relative links)."""
    if not folders:
        raise ValueError("a report needs at least one results folder")
    many = len(folders) > 1
    title = _title(folders)
    has_find = any(f.kind == "find" for f in folders)
    has_server = any(f.summary.get("observed") or f.summary.get("flamegraph") for f in folders)
    nav = ['<a href="#summary">summary</a>', '<a href="#plots">plots</a>', '<a href="#stages">stages</a>']
    if has_server:
        nav.append('<a href="#server">server</a>')
    if has_find:
        nav.append('<a href="#latency-at">latency at load</a>')
    if any(has_hysteresis(f) for f in folders):
        nav.append('<a href="#hysteresis">hysteresis</a>')
    if any(has_trace(f) for f in folders):
        nav.append('<a href="#trace">replayed trace</a>')
    if any(has_stream(f) for f in folders):
        nav.append('<a href="#stream">streams</a>')
    if any(has_models(f) for f in folders):
        nav.append('<a href="#models">models</a>')
    nav.append('<a href="#details">configuration</a>')
    out = [
        *page_head(title),
        _subtitle(folders),
        f"<nav>{''.join(nav)}</nav>",
        REPORT_ERRORS_BOX,
        warnings_html(folders),
        '<h2 id="summary">Summary</h2>',
        f'<div class="scroll">{headline_table(folders)}</div>',
        '<p class="muted">latency = done − intended send time (coordinated-omission free); '
        "svc = done − actual send; lag = actual send − intended; all figures are over each stage's "
        "steady window (the hold after its settle time).</p>",
        '<h2 id="plots">Plots</h2>',
    ]
    for p in plots_for(folders):
        out.append(f'<div class="plot" data-title="{esc(p.title)}">{figure_html(p.build(folders), p.div_id)}</div>')
    out.append('<h2 id="stages">Stages</h2>')
    for f in folders:
        if many:
            out.append(f'<h3><span class="swatch" style="background:{esc(f.colour)}"></span>{esc(f.label)}</h3>')
        out.append(f'<div class="scroll">{stage_table(f)}</div>')
    out.extend(trace_section(folders))
    out.extend(stream_section(folders))
    out.extend(models_section(folders, figure_html))
    if has_server:
        out.append('<h2 id="server">Inside the server</h2>')
        for f in folders:
            if not (f.summary.get("observed") or f.summary.get("flamegraph")):
                continue
            if many:
                out.append(f'<h3><span class="swatch" style="background:{esc(f.colour)}"></span>{esc(f.label)}</h3>')
            out.append(server_section(f, _flamegraph_link(f, report_dir)))
    if has_find:
        out.append('<h2 id="latency-at">Latency at fractions of the saturation point</h2>')
        for f in folders:
            if f.kind != "find":
                continue
            if many:
                out.append(f'<h3><span class="swatch" style="background:{esc(f.colour)}"></span>{esc(f.label)}</h3>')
            out.append(f'<div class="scroll">{latency_at_table(f)}</div>')
    if any(has_hysteresis(f) for f in folders):
        out.append('<h2 id="hysteresis">Tipped over: where the server recovers (hysteresis)</h2>')
        for n, f in enumerate(folders):
            if not has_hysteresis(f):
                continue
            if many:
                out.append(f'<h3><span class="swatch" style="background:{esc(f.colour)}"></span>{esc(f.label)}</h3>')
            h = f.summary["hysteresis"]
            out.append(hysteresis_figures(h))
            out.append(
                f'<div class="plot">{figure_html(hysteresis_plot(h, h.get("saturation_rps")), f"hyst-{n}")}</div>'
            )
            out.append(f'<div class="scroll">{hysteresis_table(h)}</div>')
    out.append('<h2 id="details">Configuration, versions and host</h2>')
    out.append('<div class="cards">' + "".join(folder_details(f) for f in folders) + "</div>")
    out.append('<h2 id="segments">Segments</h2>')
    for f in folders:
        if many:
            out.append(f"<h3>{esc(f.label)}</h3>")
        out.append(f'<div class="scroll">{segments_table(f)}</div>')
    out.append(
        "<footer>Generated by satpoint from the results folder(s) above; "
        "<code>satpoint report DIR [DIR...]</code> rewrites it offline.</footer>"
    )
    out.append(page_tail())
    return "\n".join(out)


def load_folders(dirs: list[Path], max_points: int = MAX_POINTS) -> list[FolderData]:
    labels = folder_labels(dirs)
    return [
        load_folder(d, lab, folder_colour(i), max_points) for i, (d, lab) in enumerate(zip(dirs, labels, strict=True))
    ]


def write_report(dirs: list[Path], out: Path) -> Path:
    """Write one self-contained report.html for ``dirs`` (several folders are overlaid) and return its path."""
    if not dirs:
        raise ValueError("write_report needs at least one results folder")
    out = Path(out)
    page = render_report(load_folders([Path(d) for d in dirs]), out.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out
