"""Helpers that once stood in two or three modules have one implementation each: percentiles in ms
(``metrics.percentiles``), "is this text a number" (``config.is_number``), the default results folder's
name (``metrics.results.default_out``)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "satpoint"


def _defs(names: set[str]) -> list[str]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in names:
                out.append(f"{path.relative_to(SRC)}:{node.name}")
    return out


def _modules_with(text: str) -> list[str]:
    return [str(p.relative_to(SRC)) for p in sorted(SRC.rglob("*.py")) if text in p.read_text()]


def test_percentiles_in_ms_are_computed_in_one_place() -> None:
    assert _defs({"pct_ms", "_pct_ms"}) == ["metrics/percentiles.py:pct_ms"]


def test_is_number_is_defined_once() -> None:
    assert _defs({"is_number", "_is_number"}) == ["config.py:is_number"]


def test_the_results_folder_name_is_made_in_one_place() -> None:
    assert _modules_with("%Y%m%d-%H%M%S") == ["metrics/results.py"]
    assert _defs({"default_out", "_stamp"}) == ["metrics/results.py:default_out"]
