"""docs/reference.md is the schema's own reference (issue 37, First use): regenerated text
equals the file, every key has a meaning, and a key added without one fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import BaseModel

from pytest_evalgate.manifest import reference
from pytest_evalgate.manifest.schema import EvalgateManifestSchema

DOC = Path(__file__).resolve().parent.parent / "docs" / "reference.md"


def test_docs_reference_is_the_generated_text() -> None:
    text = reference.evalgate_manifest_reference()
    if os.environ.get("PYTEST_EVALGATE_WRITE_REFERENCE") == "1":
        DOC.write_text(text, encoding="utf-8")
    assert DOC.read_text(encoding="utf-8") == text, (
        "docs/reference.md is stale: PYTEST_EVALGATE_WRITE_REFERENCE=1 python -m pytest "
        "tests/test_reference.py"
    )


def test_every_key_of_the_schema_is_a_row_with_its_bounds() -> None:
    text = reference.evalgate_manifest_reference()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines()
            if line.startswith("| `")}  # fmt: skip
    assert set(rows) == set(reference.EVALGATE_KEY_MEANINGS)
    assert "| `budget.max_attempts` | int |  | `4` | >= 1, <= 20 |" in rows["budget.max_attempts"]
    assert "`chat` \\| `completions`" in rows["api"] and "`chat`" in rows["api"]
    assert "| yes |" in rows["candidates.<name>.model"]
    assert ">= -9223372036854775808, <= 9223372036854775807" in rows["generation.seed"]
    assert "not empty" in rows["judge.model"]


def test_a_key_without_a_meaning_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    meanings = dict(reference.EVALGATE_KEY_MEANINGS)
    del meanings["generation.top_p"]
    monkeypatch.setattr(reference, "EVALGATE_KEY_MEANINGS", meanings)
    with pytest.raises(KeyError, match=r"generation\.top_p has no meaning"):
        reference.evalgate_manifest_reference()


def test_a_meaning_for_a_key_that_is_gone_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    meanings = {**reference.EVALGATE_KEY_MEANINGS, "budget.burst": "gone"}
    monkeypatch.setattr(reference, "EVALGATE_KEY_MEANINGS", meanings)
    with pytest.raises(KeyError, match=r"a meaning for budget\.burst"):
        reference.evalgate_manifest_reference()


def test_a_new_schema_key_appears_as_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    class Extra(BaseModel):
        knob: int = 3

    class Schema(EvalgateManifestSchema):
        extra: Extra | None = None

    meanings = {**reference.EVALGATE_KEY_MEANINGS, "extra": "x", "extra.knob": "y"}
    monkeypatch.setattr(reference, "EVALGATE_KEY_MEANINGS", meanings)
    monkeypatch.setattr(reference, "EvalgateManifestSchema", Schema)
    assert "| `extra.knob` | int |  | `3` |  | y |" in reference.evalgate_manifest_reference()
