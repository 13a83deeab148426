"""``schemas/*.json``: generated from the typed models, published in the repository, and what the tests check
every written document against (``tests.documents``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satpoint.metrics.documents import DOCUMENTS, ColdStartDataDoc, SweepDoc
from satpoint.reports.files.schemas import MODELS, differences, main, schema_name, write
from tests.documents import SCHEMAS, check_document


def test_the_published_schemas_are_what_the_models_generate() -> None:
    assert differences(SCHEMAS) == [], "run: python -m satpoint.reports.files.schemas write schemas/"


def test_the_check_sees_a_stale_a_missing_and_an_orphan_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path)
    assert main(["check", str(tmp_path)]) == 0
    (tmp_path / "sweep.schema.json").write_text("{}")
    (tmp_path / "diff.schema.json").unlink()
    (tmp_path / "old.schema.json").write_text("{}")
    assert main(["check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "sweep.schema.json: differs" in err and "diff.schema.json: missing" in err
    assert "old.schema.json: no model generates it" in err


def test_every_document_names_its_version_and_kind_in_its_schema() -> None:
    for name in MODELS:
        schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
        assert {"schema_version", "tool_version", "kind"} <= set(schema["required"]), name
    for name, model in DOCUMENTS.items():
        props = json.loads((SCHEMAS / f"{name}.schema.json").read_text())["properties"]
        assert props["schema_version"]["const"] == model.VERSION
        assert props["kind"].get("const") == (model.KIND or None)


def test_a_file_finds_its_schema_by_name_and_a_summary_by_kind() -> None:
    assert schema_name(Path("a/sweep.json"), {}) == "sweep"
    assert schema_name(Path("summary.json"), {"kind": "run"}) == "summary"
    assert schema_name(Path("summary.json"), {"kind": "find"}) == "find-summary"
    assert schema_name(Path("summary.json"), {"kind": "coldstart"}) == "coldstart-summary"
    assert schema_name(Path("notes.json"), {}) is None


def _sweep(**extra: object) -> dict[str, object]:
    doc = {**SweepDoc.envelope(), "created_unix": 1.0, "config": {}, "grid": [], "measurements": []}
    return {**doc, **extra}


def test_the_validation_refuses_a_wrong_kind_a_missing_field_and_an_unnamed_one(tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(_sweep()))
    assert check_document(path) == "sweep"
    for bad, why in (
        (_sweep(kind="find"), "'sweep' was expected"),
        ({k: v for k, v in _sweep().items() if k != "tool_version"}, "'tool_version' is a required property"),
        (_sweep(measurements=[{"point": "p01"}]), "is a required property"),
        (_sweep(invented=1), "fields its schema does not name: ['invented']"),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(AssertionError) as info:
            check_document(path)
        assert why in str(info.value)
    (tmp_path / "notes.json").write_text("{}")
    with pytest.raises(AssertionError, match="no schema describes"):
        check_document(tmp_path / "notes.json")


def test_a_written_document_keeps_only_what_was_set(tmp_path: Path) -> None:
    from satpoint.metrics.documents import write_document

    doc = {**ColdStartDataDoc.envelope(), "repetitions": [{"model": "a"}]}
    write_document(tmp_path / "coldstart.json", ColdStartDataDoc.model_validate(doc), indent=None)
    assert json.loads((tmp_path / "coldstart.json").read_text()) == doc  # no default filled in
    assert check_document(tmp_path / "coldstart.json") == "coldstart-data"


def test_report_names_what_a_folder_lacks(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from satpoint.cli.main import app

    r = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "is not a satpoint results folder" in r.output and "results.json" in r.output
