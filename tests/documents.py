"""Every JSON document in a results folder validates against its published schema (``schemas/``).

``assert_documents_valid(folder)`` is called by the end-to-end tests that write folders, so each kind of
document a command writes is checked where it is written, without runs of its own.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

from satpoint.reports.files.schemas import FOREIGN, schema_name

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


@functools.cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def check_document(path: Path) -> str:
    """Validate one file against its schema; also refuse a top-level field the schema does not name (the
    models accept unknown fields when reading, a writer must not invent them). Returns the schema's name."""
    doc: Any = json.loads(path.read_text())
    name = schema_name(path, doc)
    assert name is not None, f"{path}: a JSON file no schema describes"
    validator = _validator(name)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, f"{path} ({name}): " + "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])
    unknown = sorted(set(doc) - set(validator.schema["properties"]))
    assert not unknown, f"{path} ({name}): fields its schema does not name: {unknown}"
    return name


def assert_documents_valid(folder: Path) -> dict[str, str]:
    """Validate every JSON document under ``folder`` (recursively); returns {relative path: schema name}."""
    out = {}
    for path in sorted(folder.rglob("*.json")):
        if path.name in FOREIGN:
            continue
        out[str(path.relative_to(folder))] = check_document(path)
    assert out, f"{folder}: no JSON document"
    return out
