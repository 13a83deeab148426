"""flamegraph.svg: a flame graph drawn from py-spy's speedscope recording (no script, no network).

py-spy writes one format per recording; satpoint records speedscope (every sample's stack with files
and lines, which also gives the top functions) and draws the SVG here.  Classic layout: the outermost
call at the bottom, callees stacked above, each frame as wide as the share of samples it was on the
stack for; siblings in name order (the x axis is not time).  The first level is the process (py-spy's
``process PID:"command line"`` frame): MLServer's main process (the HTTP/gRPC handling) and each
worker (``spawn_main``: the model's predict) stand side by side.  Hovering a frame shows its name,
file:line and share.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from satpoint.analysis.server.flamegraph import Frame, stacks

WIDTH = 1200
FRAME_H = 17
PAD_TOP = 44
PAD_BOTTOM = 10
FONT_PX = 11
CHAR_PX = 6.6  # average glyph width of the font at FONT_PX
#: frames narrower than this share of all samples are not drawn (they would be invisible anyway)
MIN_FRACTION = 0.001


@dataclass
class _Node:
    frame: Frame
    value: float = 0.0  # summed weights: the width
    count: int = 0  # samples
    children: dict[Frame, _Node] = field(default_factory=dict)


def build_tree(doc: Mapping[str, Any]) -> _Node:
    """Stacks merged into a tree (threads of one process merge; py-spy's ``process PID:...`` root frame
    keeps processes apart)."""
    root = _Node(Frame("all"))
    for stack, w in stacks(doc):
        root.value += w
        root.count += 1
        node = root
        for f in stack:
            child = node.children.get(f)
            if child is None:
                child = node.children[f] = _Node(f)
            child.value += w
            child.count += 1
            node = child
    return root


def _colour(name: str, profile_level: bool) -> str:
    if profile_level:
        return "rgb(200,200,215)"
    h = int(hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()[:8], 16)
    return f"rgb({205 + h % 50},{90 + (h >> 8) % 120},{40 + (h >> 16) % 50})"


def _depth(node: _Node, min_value: float) -> int:
    kids = [c for c in node.children.values() if c.value >= min_value]
    return 1 + max((_depth(c, min_value) for c in kids), default=0)


def render_svg(doc: Mapping[str, Any], title: str = "py-spy flame graph") -> str:
    """The whole SVG document for a speedscope document (a note instead of frames when it holds none)."""
    root = build_tree(doc)
    total = root.value
    min_value = total * MIN_FRACTION
    levels = _depth(root, min_value) if total > 0 else 1
    height = PAD_TOP + levels * FRAME_H + PAD_BOTTOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="Verdana, DejaVu Sans, sans-serif" font-size="{FONT_PX}">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#fdfaf3"/>',
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="15">{escape(title)}</text>',
        f'<text x="{WIDTH / 2}" y="34" text-anchor="middle" fill="#666">{root.count} samples; width = share '
        "of samples on the stack, outermost call at the bottom; hover a frame for file:line and share</text>",
    ]
    if total <= 0:
        out.append(f'<text x="{WIDTH / 2}" y="{PAD_TOP + 12}" text-anchor="middle">no samples recorded</text>')
        out.append("</svg>")
        return "\n".join(out)
    scale = WIDTH / total

    def draw(node: _Node, x: float, level: int) -> None:
        w = node.value * scale
        y = height - PAD_BOTTOM - (level + 1) * FRAME_H
        share = node.value / total
        tip = f"{node.frame.label}: {node.count} samples, {share:.2%}"
        fill = _colour(node.frame.name, level <= 1)
        text = ""
        room = int((w - 6) / CHAR_PX)
        if room >= 3:
            name = node.frame.name if level > 0 else f"all ({root.count} samples)"
            shown = name if len(name) <= room else name[: room - 2] + ".."
            text = f'<text x="{x + 3:.1f}" y="{y + FRAME_H - 5}">{escape(shown)}</text>'
        out.append(
            f"<g><title>{escape(tip)}</title>"
            f'<rect x="{x:.2f}" y="{y}" width="{max(w - 0.5, 0.1):.2f}" height="{FRAME_H - 1}" fill="{fill}" rx="2"/>'
            f"{text}</g>"
        )
        cx = x
        for key in sorted(node.children, key=lambda f: (f.name, f.file or "", f.line or 0)):
            child = node.children[key]
            if child.value >= min_value:
                draw(child, cx, level + 1)
            cx += child.value * scale

    draw(root, 0.0, 0)
    out.append("</svg>")
    return "\n".join(out)


def write_flamegraph_svg(speedscope: Path, out: Path, title: str = "py-spy flame graph") -> Path | None:
    """Draw ``out`` from the speedscope file (None, and nothing written, when it cannot be read)."""
    try:
        doc = json.loads(speedscope.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render_svg(doc, title), encoding="utf-8")
    tmp.replace(out)
    return out
