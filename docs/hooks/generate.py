"""mkdocs hooks: the pages generated at build time from the code and from files kept beside it.

- ``reference/cli.md``: every command, its options grouped as ``--help`` groups them (``rich_help_panel``),
  rendered from the typer application itself, so the page follows the commands;
- ``reference/schemas.md``: every ``schemas/*.json`` at the repository root (none yet is fine);
- ``internals/architecture.md``, ``internals/benchmarks.md``, ``contributing.md``, ``changelog.md``: the
  repository's own Markdown files, their links to other repository files rewritten for the site;
- ``<!-- satpoint-api -->`` in a page: one mkdocstrings block per public name of ``satpoint``.
"""

from __future__ import annotations

import html
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the page generators below need no mkdocs: the tests call them without it
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
#: repository files shown as pages: file -> page
INCLUDED = {
    "ARCHITECTURE.md": "internals/architecture.md",
    "benchmarks/RESULTS.md": "internals/benchmarks.md",
    "benchmarks/GRPC_NOTES.md": "internals/grpc-notes.md",
    "CONTRIBUTING.md": "contributing.md",
    "CHANGELOG.md": "changelog.md",
}
#: other repository files a page may link to
LINKED = {"README.md": "index.md", **INCLUDED}
_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)]*)?\)")
_CODE_SPAN = re.compile(r"(`+[^`]*`+)")


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """The package is imported from this checkout (the CLI reference and the API pages read it)."""
    src = str(ROOT / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    from mkdocs.structure.files import File

    for uri, text in generated_pages().items():
        files.append(File.generated(config, uri, content=text))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if "<!-- satpoint-api -->" in markdown:
        markdown = markdown.replace("<!-- satpoint-api -->", api_blocks())
    return markdown


def generated_pages() -> dict[str, str]:
    pages = {"reference/cli.md": cli_page(), "reference/schemas.md": schemas_page()}
    for source, uri in INCLUDED.items():
        path = ROOT / source
        if path.exists():
            pages[uri] = rewrite_links(path.read_text(), source, uri)
        elif source == "CHANGELOG.md":
            pages[uri] = "# Changelog\n\nThis checkout has no `CHANGELOG.md` yet.\n"
    return pages


# --- repository Markdown files ---------------------------------------------------------------------------


def rewrite_links(text: str, source: str, uri: str) -> str:
    """Links between repository files, made links between the site's pages; a link to a file that is not a
    page (a script, a folder) becomes its path in code, which the reader finds in the repository."""
    base = Path(source).parent
    depth = uri.count("/")

    def fix(m: re.Match[str]) -> str:
        label, target, anchor = m.group(1), m.group(2), m.group(3) or ""
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            return m.group(0)  # an absolute URL
        resolved = (base / target).as_posix()
        parts: list[str] = []
        for part in resolved.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part not in (".", ""):
                parts.append(part)
        path = "/".join(parts)
        if path in LINKED and (ROOT / path).exists():
            return f"[{label}]({'../' * depth}{LINKED[path]}{anchor})"
        return label if label.strip("`") == path else f"{label} (`{path}`)"

    return _LINK.sub(fix, text)


# --- the Python API ----------------------------------------------------------------------------------------


def api_blocks() -> str:
    """One mkdocstrings block per public name, in ``satpoint.__all__``'s order, from the module that
    defines it (``import satpoint`` resolves its names lazily, so they are not found by reading it)."""
    import satpoint

    exports: dict[str, str] = satpoint._EXPORTS
    renamed: dict[str, str] = getattr(satpoint, "_RENAMED", {})
    out = []
    for name in satpoint.__all__:
        if name not in exports:
            continue
        attr = renamed.get(name, name)
        out.append(
            f"::: {exports[name]}.{attr}\n    options:\n      show_root_heading: true\n      heading_level: 2\n"
            f'      heading: "satpoint.{name}"\n      toc_label: "satpoint.{name}"\n'
        )
    return "\n".join(out)


# --- the CLI reference -------------------------------------------------------------------------------------


def cli_page() -> str:
    import typer

    from satpoint.cli.main import app

    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="satpoint")
    lines = [
        "# Command-line reference",
        "",
        "Generated from the commands themselves when this site is built: the same text as `satpoint COMMAND --help`,",
        "options grouped as `--help` groups them.",
        "",
    ]
    lines += list(_command(root, ctx, "satpoint", 2))
    return "\n".join(lines) + "\n"


def _command(cmd: Any, ctx: Any, path: str, level: int) -> Iterator[str]:
    yield f"{'#' * level} `{path}`"
    yield ""
    help_text = (cmd.help or "").split("\f")[0].strip()
    if help_text:
        yield _text(help_text)
        yield ""
    pieces = " ".join(cmd.collect_usage_pieces(ctx))
    yield "```text"
    yield f"{path} {pieces}".rstrip()
    yield "```"
    yield ""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for param in cmd.get_params(ctx):
        if getattr(param, "hidden", False) or "--help" in getattr(param, "opts", ()):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            if param.param_type_name != "argument":
                continue
            record = (param.human_readable_name, param.help or "")
        panel = getattr(param, "rich_help_panel", None)
        if panel is None:
            panel = "Arguments" if param.param_type_name == "argument" else "Options"
        env = param.envvar if isinstance(param.envvar, str) else ", ".join(param.envvar or ())
        groups.setdefault(panel, []).append((record[0], record[1], env))
    for panel, rows in groups.items():
        yield f"**{panel}**"
        yield ""
        with_env = any(env for _, _, env in rows)
        yield "| option | meaning |" + (" environment |" if with_env else "")
        yield "| --- | --- |" + (" --- |" if with_env else "")
        for spelling, meaning, env in rows:
            cells = [f"`{spelling}`", _cell(meaning)] + ([f"`{env}`" if env else ""] if with_env else [])
            yield "| " + " | ".join(cells) + " |"
        yield ""
    if cmd.epilog:
        yield _text(cmd.epilog.strip())
        yield ""
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = sub.context_class(sub, info_name=name, parent=ctx)
            yield from _command(sub, sub_ctx, f"{path} {name}", min(level + 1, 4) if path == "satpoint" else 4)


def _text(text: str) -> str:
    """Help text as Markdown: what is not a code span is escaped (``p99<50ms``, ``[triton]``)."""
    out = []
    for part in _CODE_SPAN.split(text):
        if part.startswith("`"):
            out.append(part)
        else:
            part = html.escape(part, quote=False)
            out.append(re.sub(r"([\[\]*_\\|])", r"\\\1", part))
    return "".join(out)


def _cell(text: str) -> str:
    return _text(" ".join(text.split()))


# --- JSON Schemas ------------------------------------------------------------------------------------------


def schemas_page() -> str:
    folder = ROOT / "schemas"
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    lines = [
        "# JSON Schemas",
        "",
        "The JSON Schema of every document satpoint writes, as published in the repository's `schemas/` folder",
        "(generated from the typed models; a document's `schema_version` names the version it follows).",
        "",
    ]
    if not files:
        lines += [
            "This checkout has no `schemas/*.json` yet: the [results folder](results-folder.md) page",
            "describes the files and their fields.",
            "",
        ]
    for path in files:
        schema = json.loads(path.read_text())
        lines += [f"## `{path.name}`", ""]
        title, desc = schema.get("title"), schema.get("description")
        if title:
            lines += [f"**{_text(str(title))}**", ""]
        if desc:
            lines += [_text(str(desc)), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", ()))
            lines += ["| field | type | required | description |", "| --- | --- | --- | --- |"]
            for key, spec in props.items():
                lines.append(
                    f"| `{key}` | {_cell(_type(spec))} | {'yes' if key in required else ''} "
                    f"| {_cell(str(spec.get('description', '')))} |"
                )
            lines.append("")
        lines += [
            f'??? note "{path.name} in full"',
            "",
            "    ```json",
            *("    " + line for line in json.dumps(schema, indent=2).splitlines()),
            "    ```",
            "",
        ]
    return "\n".join(lines) + "\n"


def _type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        return spec["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in spec:
        return " or ".join(_type(s) for s in spec["anyOf"])
    kind = spec.get("type", "any")
    if kind == "array" and isinstance(spec.get("items"), dict):
        return f"array of {_type(spec['items'])}"
    if "enum" in spec:
        return " / ".join(json.dumps(v) for v in spec["enum"])
    return str(kind)
