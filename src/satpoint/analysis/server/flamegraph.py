"""What a py-spy recording says: the speedscope document as weighted stacks, and the top functions by
own time.  Pure functions of the document (https://www.speedscope.app/file-format-schema.json).

A speedscope file holds ``shared.frames`` (``name``, ``file``, ``line``) and ``profiles``; py-spy writes
one *sampled* profile per thread (named after its process and thread), whose ``samples`` are stacks
of frame indices from the root (outermost call) to the leaf (the function running), each with a
``weight`` (py-spy: seconds, 1 / rate; 1 when a file gives none).  With ``--subprocesses`` py-spy
puts a ``process PID:"command line"`` frame at the root of every stack.  A function's *own* time is
the share of samples whose leaf it is: where the CPU actually was, not what it called.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: the flame graph drawn from the recording (``reports.files.flamegraph_svg``), in the results folder
SVG_FILE = "flamegraph.svg"
#: functions listed in the summary and printed after the run
TOP_N = 12


@dataclass(frozen=True)
class Frame:
    name: str
    file: str | None = None
    line: int | None = None

    @property
    def label(self) -> str:
        where = f" ({self.file}:{self.line})" if self.file and self.line is not None else ""
        if self.file and self.line is None:
            where = f" ({self.file})"
        return f"{self.name}{where}"


#: one stack from the root (first) to the leaf (last), and its weight
Stack = tuple[tuple[Frame, ...], float]


def _frames(doc: Mapping[str, Any]) -> list[Frame]:
    out = []
    for f in (doc.get("shared") or {}).get("frames") or []:
        line = f.get("line")
        out.append(
            Frame(str(f.get("name", "?")), f.get("file") or None, int(line) if isinstance(line, (int, float)) else None)
        )
    return out


def stacks(doc: Mapping[str, Any], with_profile_root: bool = False) -> list[Stack]:
    """Every sampled stack of every profile (root first), with its weight.  ``with_profile_root`` puts
    the profile's name (py-spy: process and thread) under each stack as its outermost frame.  Evented
    profiles (not written by py-spy) are left out."""
    frames = _frames(doc)
    out: list[Stack] = []
    for prof in doc.get("profiles") or []:
        if prof.get("type") != "sampled":
            continue
        samples = prof.get("samples") or []
        weights = prof.get("weights") or []
        root = (Frame(str(prof.get("name") or "profile")),) if with_profile_root else ()
        for k, sample in enumerate(samples):
            w = float(weights[k]) if k < len(weights) else 1.0
            if w <= 0:
                continue
            stack = tuple(frames[i] for i in sample if 0 <= int(i) < len(frames))
            out.append(((*root, *stack), w))
    return out


def total_weight(doc: Mapping[str, Any]) -> float:
    """The sum of the samples' weights (py-spy: seconds, 1 / rate per sample)."""
    return sum(w for _, w in stacks(doc))


def sample_count(doc: Mapping[str, Any]) -> int:
    """How many samples the sampled profiles hold."""
    return sum(len(p.get("samples") or []) for p in doc.get("profiles") or [] if p.get("type") == "sampled")


def py_spy_counts(log_text: str) -> tuple[int | None, int | None]:
    """(samples, errors) from py-spy's closing line ``Samples: N Errors: M`` (None when absent).  Errors
    are samples it could not read (with ``--nonblocking``: a stack that changed while it was read)."""
    m = re.search(r"Samples:\s*(\d+)\s+Errors:\s*(\d+)", log_text)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def is_process_frame(f: Frame) -> bool:
    """py-spy's ``process PID:"command line"`` frame (``--subprocesses``), not a function."""
    return not f.file and f.name.startswith("process ")


def top_functions(doc: Mapping[str, Any], n: int = TOP_N) -> list[dict[str, Any]]:
    """The ``n`` functions with the most own time: ``{function, file, line, own_fraction, total_fraction}``
    (fractions of all samples; ``total_fraction``: samples with the function anywhere on the stack)."""
    own: dict[Frame, float] = {}
    anywhere: dict[Frame, float] = {}
    total = 0.0
    for stack, w in stacks(doc):
        if not stack:
            continue
        total += w
        own[stack[-1]] = own.get(stack[-1], 0.0) + w
        for f in set(stack):
            anywhere[f] = anywhere.get(f, 0.0) + w
    if total <= 0:
        return []
    # py-spy's root frame of a process (``process PID:"cmd"``) as a leaf: a sample with no Python frame
    # (a thread in C code); it counts in the total, but it is not a function
    ranked = sorted(
        ((f, w) for f, w in own.items() if not is_process_frame(f)),
        key=lambda kv: (-kv[1], kv[0].name, kv[0].file or "", kv[0].line or 0),
    )
    return [
        {
            "function": f.name,
            "file": f.file,
            "line": f.line,
            "own_fraction": round(w / total, 4),
            "total_fraction": round(anywhere[f] / total, 4),
        }
        for f, w in ranked[:n]
    ]


def profiles_seen(doc: Mapping[str, Any]) -> list[str]:
    """The names of the sampled profiles (py-spy: one per process and thread that ran)."""
    return [str(p.get("name") or "") for p in doc.get("profiles") or [] if p.get("type") == "sampled"]


def flamegraph_block(header: Mapping[str, Any], stage_docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """summary.json's ``flamegraph`` (None: none was asked for), from what the run recorded in its header:
    the files (``svg`` is drawn from ``speedscope`` when the report files are written), the stage it
    covered (``stage``: 1-based row of ``stages[]``), how long, the top functions by own time, or why
    there is no flame graph (``error``)."""
    fg = header.get("flamegraph")
    if not isinstance(fg, Mapping):
        return None
    seg, idx = fg.get("segment"), fg.get("stage")
    number = next(
        (n for n, s in enumerate(stage_docs, 1) if s.get("segment") == seg and s.get("index") == idx),
        None,
    )
    speedscope = fg.get("speedscope")
    return {
        "svg": SVG_FILE if speedscope else None,
        "speedscope": speedscope,
        "segment": seg,
        "stage": number,
        "target_rps": fg.get("target_rps"),
        "seconds": fg.get("seconds"),
        "from_s": fg.get("from_s"),
        "to_s": fg.get("to_s"),
        "samples": fg.get("samples"),
        "errors": fg.get("errors"),
        "profiles": list(fg.get("profiles") or []),
        "top": list(fg.get("top") or []),
        "pid": fg.get("pid"),
        "command": fg.get("command"),
        "native": fg.get("native"),
        "rate_hz": fg.get("rate_hz"),
        "nonblocking": fg.get("nonblocking"),
        "cpus": fg.get("cpus"),
        "log": fg.get("log"),
        "error": fg.get("error"),
    }
