"""The report's HTML tables; every text that comes from a results folder goes through ``esc``."""

from __future__ import annotations

import html
import json
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from satpoint.redact import redact_header_line, redact_text, redact_url
from satpoint.reports.html.data import FolderData
from satpoint.reports.html.plots import verdict_colour

MAX_VALUE_CHARS = 400


def esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def fmt_num(v: Any, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "–"
        return f"{v:.{digits}f}"
    return esc(v)


def fmt_ms(v: Any) -> str:
    if v is None:
        return "–"
    v = float(v)
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def fmt_rps(v: Any) -> str:
    return "–" if v is None else f"{float(v):,.1f}"


def fmt_time(unix: Any) -> str:
    if unix is None:
        return "–"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(unix)))
    except (TypeError, ValueError, OverflowError):
        return esc(unix)


def verdict_badge(v: str) -> str:
    return f'<span class="verdict" style="background:{verdict_colour(v)}">{esc(v or "–")}</span>'


def table(head: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """Cells are HTML already (callers escape); head cells are escaped here."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    c = f' class="{esc(cls)}"' if cls else ""
    return f"<table{c}><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def kv_table(pairs: Iterable[tuple[str, str]], cls: str = "kv") -> str:
    """Key/value rows; keys are escaped here, values are HTML already."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    return f'<table class="{esc(cls)}"><tbody>{rows}</tbody></table>'


def _ranges(xs: list[int]) -> str:
    if not xs:
        return ""
    out, start, prev = [], xs[0], xs[0]
    for x in [*xs[1:], None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(out)


def value_html(v: Any) -> str:
    """A readable, escaped rendering of one config value."""
    if v is None:
        return '<span class="muted">–</span>'
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        return esc(f"{v:g}") if isinstance(v, float) else esc(v)
    if isinstance(v, list):
        if not v:
            return '<span class="muted">(none)</span>'
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v) and v == sorted(set(v)) and len(v) > 3:
            return esc(_ranges(v))
        if all(not isinstance(x, dict | list) for x in v):
            return esc(_clip(", ".join(str(x) for x in v)))
    text = v if isinstance(v, str) else json.dumps(v, default=str, sort_keys=True)
    return esc(_clip(str(text)))


def _clip(s: str) -> str:
    return s if len(s) <= MAX_VALUE_CHARS else s[: MAX_VALUE_CHARS - 1] + "…"


def flatten(d: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, str]]:
    """Nested dicts as dotted keys; lists of dicts and deep values are shown as compact JSON."""
    if not isinstance(d, dict):
        return [(prefix or "value", value_html(d))]
    out: list[tuple[str, str]] = []
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v and depth < 4:
            out.extend(flatten(v, key, depth + 1))
        else:
            out.append((key, value_html(v)))
    return out


def target_pairs(target: dict[str, Any]) -> list[tuple[str, str]]:
    """The results header's target as table rows; URL and headers redacted again (``satpoint.redact``),
    for folders written before results.json was redacted."""
    t = dict(target)
    headers = t.pop("headers", None)
    meta = t.pop("metadata", None)
    if isinstance(t.get("url"), str):
        t["url"] = redact_url(t["url"])
    pairs = flatten(t)
    if headers:
        if isinstance(headers, list):
            shown: Any = [redact_header_line(str(h)) for h in headers]
        else:
            shown = redact_text(str(headers))
        pairs.append(("headers", value_html(shown)))
    if isinstance(meta, dict):
        pairs.extend(flatten(meta, "metadata"))
    elif meta is not None:
        pairs.append(("metadata", value_html(meta)))
    return pairs


# --------------------------------------------------------------------------- per-folder tables


def stage_table(f: FolderData) -> str:
    head = [
        "#",
        "seg",
        "purpose",
        "target",
        "offered",
        "throughput",
        "err %",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "svc p99",
        "lag p99",
        "late %",
        "verdict",
        "reasons",
    ]
    segs = {s.index: s for s in f.results.segments}
    rows = []
    for i, s in enumerate(f.summary.get("stages", []), start=1):
        lat, svc, lag = s["latency_ms"], s["service_ms"], s["send_lag_ms"]
        seg = segs.get(int(s["segment"]))
        reasons = s.get("reasons") or []
        errs = s.get("errors") or {}
        extra = [f"errors: {', '.join(f'{k}={v}' for k, v in sorted(errs.items()))}"] if errs else []
        if s.get("interrupted"):
            window = f"{s['window_start_s']:.1f}–{s['window_end_s']:.1f} s"
            extra.append(f"interrupted: figures over what was measured ({window} on the segment's clock)")
        rows.append(
            [
                str(i),
                esc(s["segment"]),
                esc(seg.purpose if seg else ""),
                esc(f"{s['target_rps']:g}"),
                fmt_rps(s["offered_rps"]),
                fmt_rps(s["throughput_rps"]),
                f"{100 * s['error_rate']:.2f}",
                fmt_ms(lat.get("p50")),
                fmt_ms(lat.get("p90")),
                fmt_ms(lat.get("p99")),
                fmt_ms(lat.get("max")),
                fmt_ms(svc.get("p99")),
                fmt_ms(lag.get("p99")),
                f"{100 * s['late_fraction']:.1f}",
                verdict_badge(str(s.get("verdict", ""))),
                '<span class="reasons">' + "<br>".join(esc(r) for r in [*reasons, *extra]) + "</span>",
            ]
        )
    if not rows:
        return '<p class="muted">no stage was recorded</p>'
    return table(head, rows, "stages")


def latency_at_table(f: FolderData) -> str:
    rows = []
    for r in f.summary.get("latency_at") or []:
        lat = r.get("latency_ms", {})
        frac = r.get("fraction")
        rows.append(
            [
                "–" if frac is None else f"{100 * float(frac):.0f} %",
                fmt_rps(r.get("offered_rps")),
                fmt_rps(r.get("throughput_rps")),
                fmt_ms(lat.get("p50")),
                fmt_ms(lat.get("p90")),
                fmt_ms(lat.get("p99")),
                fmt_ms(lat.get("max")),
                verdict_badge(str(r.get("verdict", ""))),
            ]
        )
    if not rows:
        return (
            '<p class="muted">no latency profile was recorded '
            "(the search found no saturation point or was cut short)</p>"
        )
    head = ["of saturation", "offered", "throughput", "p50 ms", "p90 ms", "p99 ms", "max ms", "verdict"]
    return table(head, rows, "stages")


def segments_table(f: FolderData) -> str:
    rows = []
    for seg in f.results.segments:
        cpu = seg.generator.get("cpu_s")
        rows.append(
            [
                esc(seg.index),
                esc(seg.purpose),
                esc(", ".join(f"{s.target_rps:g}:{s.ramp_s:g}:{s.hold_s:g}" for s in seg.stages)),
                esc(seg.arrival),
                esc(seg.seed),
                fmt_time(seg.started_unix) if seg.started_unix > 0 else "–",
                f"{f.offsets.get(seg.index, 0.0):.1f}",
                esc(len(seg.records)),
                fmt_num(cpu, 2) if isinstance(cpu, int | float) else "–",
                "yes" if seg.interrupted else "",
            ]
        )
    head = [
        "seg",
        "purpose",
        "stages (rps:ramp:hold)",
        "arrival",
        "seed",
        "started",
        "at (s)",
        "requests",
        "gen CPU s",
        "interrupted",
    ]
    return table(head, rows, "stages")


def headline_rows(folders: list[FolderData]) -> list[tuple[str, list[str]]]:
    """(row name, one HTML cell per folder) for the comparison table at the top."""

    def row(name: str, fn: Any) -> tuple[str, list[str]]:
        return name, [fn(f) for f in folders]

    def tgt(f: FolderData, k: str) -> str:
        return esc(redact_url(str(f.summary.get("target", {}).get(k) or "–")))

    def stable_max(f: FolderData) -> str:
        st = [s for s in f.summary.get("stages", []) if s.get("verdict") == "stable"]
        return fmt_rps(max(s["offered_rps"] for s in st)) + " rps" if st else "–"

    def gen(f: FolderData) -> str:
        g = f.summary.get("generator", {})
        us = g.get("cpu_us_per_request")
        return f"{g.get('requests', 0):,} requests" + (f", {us:.1f} µs CPU each" if us is not None else "")

    rows = [
        row("kind", lambda f: esc(f.kind)),
        row("target URL", lambda f: tgt(f, "url")),
        row("model", lambda f: tgt(f, "model")),
        row("protocol", lambda f: tgt(f, "protocol")),
        row("created", lambda f: fmt_time(f.summary.get("created_unix"))),
        row("tool version", lambda f: esc(f.summary.get("tool_version") or "–")),
        row("generator", gen),
        row("stages judged", lambda f: esc(len(f.summary.get("stages", [])))),
        row("highest stable offered rate", stable_max),
    ]
    if any(f.kind == "find" for f in folders):
        rows += [
            row("saturation point", lambda f: _rps_cell(f.summary.get("saturation_rps"), strong=True)),
            row("first unstable rate", lambda f: _rps_cell(f.summary.get("unstable_rps"))),
            row("max throughput (overloaded)", lambda f: _rps_cell(f.summary.get("max_throughput_rps"))),
            row("precision (asked / achieved)", _precision),
            row("search finished", lambda f: fmt_num((f.summary.get("search") or {}).get("finished"))),
            row("per-replica target", lambda f: _rec(f, "target_rps_per_replica", strong=True)),
            row("margin", lambda f: _margin(f)),
            row("replicas for peak", _replicas),
            row("min replicas", lambda f: _rec(f, "min_replicas", plain=True)),
        ]
    return rows


def _rps_cell(v: Any, strong: bool = False) -> str:
    if v is None:
        return '<span class="muted">–</span>'
    s = f"{float(v):,.1f} rps"
    return f"<strong>{s}</strong>" if strong else s


def _precision(f: FolderData) -> str:
    if f.kind != "find":
        return "–"
    asked = f.summary.get("precision")
    got = f.summary.get("precision_achieved")
    a = f"±{100 * float(asked):.1f} %" if asked is not None else "–"
    g = f"±{100 * float(got):.1f} %" if got is not None else "–"
    return f"{a} / {g}"


def _rec(f: FolderData, key: str, strong: bool = False, plain: bool = False) -> str:
    r = f.summary.get("recommendation") or {}
    v = r.get(key)
    if v is None:
        return '<span class="muted">–</span>'
    return esc(v) if plain else _rps_cell(v, strong)


def _margin(f: FolderData) -> str:
    r = f.summary.get("recommendation") or {}
    m = r.get("margin")
    return "–" if m is None else f"{100 * float(m):.0f} %"


def _replicas(f: FolderData) -> str:
    r = f.summary.get("recommendation") or {}
    if r.get("replicas") is None:
        return '<span class="muted">– (no --peak-rps given)</span>' if r else "–"
    return f"<strong>{esc(r['replicas'])}</strong> for a peak of {fmt_rps(r.get('peak_rps'))} rps"


def headline_table(folders: list[FolderData]) -> str:
    head = "<th></th>" + "".join(
        f'<th><span class="swatch" style="background:{esc(f.colour)}"></span>{esc(f.label)}</th>' for f in folders
    )
    body = "".join(
        f"<tr><th>{esc(name)}</th>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
        for name, cells in headline_rows(folders)
    )
    return f'<table class="headline"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def warnings_html(folders: list[FolderData]) -> str:
    items = []
    many = len(folders) > 1
    for f in folders:
        for w in [*f.summary.get("warnings", []), *f.summary.get("find_notes", [])]:
            who = f"<strong>{esc(f.label)}</strong>: " if many else ""
            items.append(f"<li>{who}{esc(w)}</li>")
    if not items:
        return ""
    return f'<div class="warnings" id="warnings"><h2>Warnings</h2><ul>{"".join(items)}</ul></div>'


def folder_details(f: FolderData) -> str:
    h = f.header
    host = dict(h.get("host") or {})
    versions = host.pop("versions", None)
    server = h.get("server")
    tool = [("tool version", esc(h.get("tool_version", "–"))), ("schema", esc(h.get("schema_version", "–")))]
    parts = [
        f'<div class="card"><h3><span class="swatch" style="background:{esc(f.colour)}"></span>{esc(f.label)}</h3>',
        f'<p class="muted path">{esc(f.path)}</p>',
        "<h4>Target</h4>",
        kv_table(target_pairs(h.get("target") or {})),
        "<h4>Configuration</h4>",
        kv_table(flatten(h.get("config") or {})),
        "<h4>Server</h4>",
        kv_table(flatten(server)) if server else '<p class="muted">not recorded</p>',
        "<h4>Versions</h4>",
        kv_table(tool + (flatten(versions) if isinstance(versions, dict) else [])),
        "<h4>Host</h4>",
        kv_table(flatten(host)),
        "</div>",
    ]
    return "".join(parts)
