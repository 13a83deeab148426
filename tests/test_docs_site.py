"""The generated pages of the documentation site follow what they are generated from: every command and
option of the command line, every ``schemas/*.json``, every public name of the Python API."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import typer

import satpoint
from satpoint.cli.main import app

ROOT = Path(__file__).resolve().parents[1]


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks_generate", ROOT / "docs" / "hooks" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_has_every_command_and_option() -> None:
    page = _hooks().cli_page()
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="satpoint")
    seen = 0
    for name in root.list_commands(ctx):
        cmd = root.get_command(ctx, name)
        assert cmd is not None
        if cmd.hidden:
            continue
        assert f"`satpoint {name}`" in page
        for param in cmd.params:
            if param.hidden or param.param_type_name != "option":
                continue
            assert max(param.opts, key=len) in page, (name, param.opts)
            seen += 1
    assert seen > 100  # every command's options, not a page that lost them


def test_the_schema_page_renders_every_schema_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = _hooks()
    monkeypatch.setattr(hooks, "ROOT", tmp_path)
    assert "no `schemas/*.json` yet" in hooks.schemas_page()  # the folder may be absent
    (tmp_path / "schemas").mkdir()
    schema = satpoint.RunSummary.model_json_schema()
    (tmp_path / "schemas" / "run-summary.json").write_text(json.dumps(schema))
    page = hooks.schemas_page()
    assert "## `run-summary.json`" in page
    assert all(f"| `{field}` |" in page for field in schema["properties"])


def test_the_api_page_documents_every_public_name() -> None:
    blocks = _hooks().api_blocks()
    for name in satpoint.__all__:
        if name in ("__version__", "SCHEMA_VERSION"):
            continue
        assert f'heading: "satpoint.{name}"' in blocks


def test_links_between_repository_files_become_links_between_pages() -> None:
    hooks = _hooks()
    text = "[README.md](README.md), [GRPC_NOTES.md](GRPC_NOTES.md), [`ray_two_nodes.py`](ray_two_nodes.py)"
    out = hooks.rewrite_links(text, "benchmarks/RESULTS.md", "internals/benchmarks.md")
    assert "[GRPC_NOTES.md](../internals/grpc-notes.md)" in out
    assert "[README.md](../index.md)" not in out  # benchmarks/README.md is not a page: its path instead
    assert "`benchmarks/README.md`" in out and "`benchmarks/ray_two_nodes.py`" in out
