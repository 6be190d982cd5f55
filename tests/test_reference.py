"""docs/reference.md is the code's own reference (issue 37, First use): regenerated text equals
the file; every manifest key, dataset row field, policy key, rule kind, online and shadow rule
key, trust entry key and role has a meaning; one added without it fails, and so does a meaning
left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import BaseModel

from pytest_evalgate.attest import trust
from pytest_evalgate.cli.main import main
from pytest_evalgate.cli.reference import evalgate_reference_text
from pytest_evalgate.manifest import dataset, reference
from pytest_evalgate.manifest.schema import EvalgateManifestSchema
from pytest_evalgate.policy import load as policy_load
from pytest_evalgate.policy import reference as policy_reference

DOC = Path(__file__).resolve().parent.parent / "docs" / "reference.md"


def test_docs_reference_is_the_generated_text() -> None:
    text = evalgate_reference_text()
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


def _table_keys(text: str) -> set[str]:
    return {line.split("|")[1].strip().strip("`") for line in text.splitlines()
            if line.startswith("| `")}  # fmt: skip


def test_evalgate_reference_prints_the_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reference"]) == 0
    out = capsys.readouterr().out
    assert out == evalgate_reference_text()
    for section in ("## The manifest", "## Dataset rows", "## Gate policy", "## Trust files"):
        assert section in out


def test_every_row_field_the_loader_accepts_is_a_row() -> None:
    text = reference.evalgate_rows_reference()
    assert _table_keys(text) == set(dataset.EVALGATE_ROW_KEYS)
    assert {"id", "input", "messages", "turns", "expect", "cluster", "cost"} <= _table_keys(text)


def test_a_row_field_without_a_meaning_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference, "EVALGATE_ROW_KEYS", dataset.EVALGATE_ROW_KEYS | {"weight"})
    with pytest.raises(KeyError, match="weight has no meaning in EVALGATE_ROW_MEANINGS"):
        reference.evalgate_rows_reference()


def test_every_rule_kind_and_policy_key_is_documented_with_its_keys() -> None:
    text = policy_reference.evalgate_policy_reference()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines()
            if line.startswith("| `")}  # fmt: skip
    assert set(policy_reference.EVALGATE_RULE_MEANINGS) <= set(rows)
    assert len(policy_load.EVALGATE_RULE_MODELS) == len(policy_reference.EVALGATE_RULE_MEANINGS)
    assert "`margin`: float; >= 0.0, <= 1.0" in rows["non_inferior"]
    assert "`min_ratio`: float; > 0.0" in rows["perf_ratio_min"]
    assert "| `correction` | `none` \\| `bonferroni` \\| `holm` \\| `bh` |" in rows["correction"]
    assert "| `online[].window` | str |  | `10m` |" in rows["online[].window"]
    assert "| `shadow[].min_pairs` | int |  | `30` | >= 1" in rows["shadow[].min_pairs"]
    assert "`judge_score_delta` (min)" in text and "`judge_preference_delta` (max)" in text


def test_a_rule_kind_without_a_meaning_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    meanings = dict(policy_reference.EVALGATE_RULE_MEANINGS)
    del meanings["floor"]
    monkeypatch.setattr(policy_reference, "EVALGATE_RULE_MEANINGS", meanings)
    with pytest.raises(KeyError, match="floor has no meaning in EVALGATE_RULE_MEANINGS"):
        policy_reference.evalgate_policy_reference()


def test_a_shadow_key_without_a_meaning_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    meanings = dict(policy_reference.EVALGATE_SHADOW_MEANINGS)
    del meanings["min_pairs"]
    monkeypatch.setattr(policy_reference, "EVALGATE_SHADOW_MEANINGS", meanings)
    with pytest.raises(KeyError, match=r"shadow\[\]\.min_pairs has no meaning"):
        policy_reference.evalgate_policy_reference()


def test_every_trust_entry_key_and_role_is_documented() -> None:
    text = trust.evalgate_trust_reference()
    assert _table_keys(text) == set(trust.EVALGATE_TRUST_ENTRY_KEYS) | set(trust.EVALGATE_ROLES)


def test_a_role_without_a_meaning_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trust, "EVALGATE_ROLES", (*trust.EVALGATE_ROLES, "audit"))
    with pytest.raises(KeyError, match="audit"):
        trust.evalgate_trust_reference()
