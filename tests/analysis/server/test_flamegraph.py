"""analysis.server.flamegraph and reports.files.flamegraph_svg on a small hand-made speedscope document."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from satpoint.analysis.server.flamegraph import (
    flamegraph_block,
    profiles_seen,
    py_spy_counts,
    sample_count,
    stacks,
    top_functions,
    total_weight,
)
from satpoint.reports.files.flamegraph_svg import build_tree, render_svg, write_flamegraph_svg

#: as py-spy 0.4 writes it (``--subprocesses``: a ``process PID:"cmd"`` frame at each stack's root;
#: weights in seconds at 100 Hz): the main process handles requests (and encodes), the worker predicts
DOC: dict[str, Any] = {
    "$schema": "https://www.speedscope.app/file-format-schema.json",
    "shared": {
        "frames": [
            {"name": "<module>", "file": "mlserver/cli/main.py", "line": 1},
            {"name": "handle", "file": "mlserver/rest/endpoints.py", "line": 10},
            {"name": "predict", "file": "sklearn/linear_model/_base.py", "line": 20},
            {"name": "encode", "file": "mlserver/codecs/numpy.py", "line": 5},
            {"name": 'process 1:"mlserver start"', "file": "", "line": 0},
            {"name": 'process 2:"spawn_main"', "file": "", "line": 0},
        ]
    },
    "profiles": [
        {
            "type": "sampled",
            "name": 'Process 1 Thread 1 "MainThread"',
            "unit": "seconds",
            "startValue": 0,
            "endValue": 0.04,
            "samples": [[4, 0, 1, 2], [4, 0, 1, 2], [4, 0, 1, 3], [4, 0, 1]],
            "weights": [0.01, 0.01, 0.01, 0.01],
        },
        {
            "type": "sampled",
            "name": "Process 2 Thread 7",
            "unit": "seconds",
            "startValue": 0,
            "endValue": 0.02,
            "samples": [[5, 0, 2], [5, 0, 2], [5]],
            "weights": [0.01, 0.01, 0.01],
        },
        {"type": "evented", "name": "ignored", "events": []},
    ],
}


def test_stacks_run_from_the_root_to_the_leaf_with_their_weights() -> None:
    got = stacks(DOC)
    assert len(got) == 7 == sample_count(DOC) and abs(total_weight(DOC) - 0.07) < 1e-9
    first, w = got[0]
    assert [f.name for f in first] == ['process 1:"mlserver start"', "<module>", "handle", "predict"] and w == 0.01
    rooted, _ = stacks(DOC, with_profile_root=True)[-2]
    assert rooted[0].name == "Process 2 Thread 7" and rooted[-1].name == "predict"
    assert py_spy_counts("py-spy> Wrote speedscope file. Samples: 906 Errors: 52\n") == (906, 52)
    assert py_spy_counts("") == (None, None)
    assert profiles_seen(DOC) == ['Process 1 Thread 1 "MainThread"', "Process 2 Thread 7"]


def test_top_functions_rank_own_time() -> None:
    top = top_functions(DOC)
    # <module> never ran itself; the worker's sample without a Python frame counts, but is no function
    assert [t["function"] for t in top] == ["predict", "encode", "handle"]
    predict = top[0]
    assert predict["own_fraction"] == round(4 / 7, 4)  # 2 samples in each process
    assert predict["total_fraction"] == round(4 / 7, 4)
    assert (predict["file"], predict["line"]) == ("sklearn/linear_model/_base.py", 20)
    assert top[1]["own_fraction"] == top[2]["own_fraction"] == round(1 / 7, 4)
    assert top[2]["total_fraction"] == round(4 / 7, 4)  # handle is on the stack of 4 of the 7 samples
    assert top_functions(DOC, n=1) == top[:1]
    assert top_functions({"profiles": []}) == []


def test_the_svg_draws_every_frame_in_proportion(tmp_path: Path) -> None:
    tree = build_tree(DOC)
    assert tree.count == 7 and len(tree.children) == 2  # one child per process (py-spy's root frames)
    svg = render_svg(DOC, "test <graph>")
    root = ET.fromstring(svg)  # well-formed XML (names are escaped)
    titles = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert sum(t.startswith("predict (sklearn/linear_model/_base.py:20): 2 samples, 28.57%") for t in titles) == 2
    assert any(t.startswith("all: 7 samples, 100.00%") for t in titles)
    assert any(t.startswith('process 2:"spawn_main": 3 samples') for t in titles)
    widths = {
        (g.find("{http://www.w3.org/2000/svg}title").text or "").split(":")[0]: float(  # type: ignore[union-attr]
            g.find("{http://www.w3.org/2000/svg}rect").get("width", "0")  # type: ignore[union-attr]
        )
        for g in root.iter("{http://www.w3.org/2000/svg}g")
    }
    assert abs(widths["all"] - 1200 + 0.5) < 0.01  # the root spans the width
    assert "test &lt;graph&gt;" in svg
    assert "no samples recorded" in render_svg({"profiles": []})
    src = tmp_path / "p.json"
    src.write_text(json.dumps(DOC))
    out = write_flamegraph_svg(src, tmp_path / "flamegraph.svg")
    assert out is not None and out.read_text().startswith("<svg")
    src.write_text("{not json")
    assert write_flamegraph_svg(src, tmp_path / "other.svg") is None


def test_the_summary_block_names_the_stage_and_keeps_the_error() -> None:
    assert flamegraph_block({}, []) is None
    stages = [{"segment": 0, "index": 0}, {"segment": 3, "index": 0}]
    block = flamegraph_block(
        {"flamegraph": {"segment": 3, "stage": 0, "speedscope": "profile.speedscope.json", "top": [], "seconds": 9.5}},
        stages,
    )
    assert block is not None and block["stage"] == 2 and block["svg"] == "flamegraph.svg" and block["seconds"] == 9.5
    failed = flamegraph_block({"flamegraph": {"error": "no ptrace permission"}}, stages)
    assert failed is not None and failed["svg"] is None and failed["error"] == "no ptrace permission"
