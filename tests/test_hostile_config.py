"""Hostile manifests and policies: duplicate keys, alias bombs, non-UTF-8 bytes, unsafe names."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.formats.yamlread import EvalgateYamlError, evalgate_load_yaml
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.policy.load import evalgate_load_policy
from tests.suitekit import write_suite

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


def test_plain_documents_load_as_safe_load_does() -> None:
    text = "a: 1\nb: [1, 2, {c: d}]\ne: &x {f: 1}\ng: *x\n"
    expected = {"a": 1, "b": [1, 2, {"c": "d"}], "e": {"f": 1}, "g": {"f": 1}}
    assert evalgate_load_yaml(text) == expected


def test_a_duplicate_key_is_refused_with_both_lines() -> None:
    expected = r"duplicate key 'margin' on line 3 \(first on line 2\)"
    with pytest.raises(EvalgateYamlError, match=expected):
        evalgate_load_yaml("rules:\n- margin: 0.01\n  margin: 0.5\n")


def test_a_duplicate_key_in_a_nested_mapping_is_refused() -> None:
    with pytest.raises(EvalgateYamlError, match="duplicate key 'x'"):
        evalgate_load_yaml("top:\n  inner: {x: 1, x: 2}\n")


def test_the_same_key_in_two_mappings_is_fine() -> None:
    assert evalgate_load_yaml("- {x: 1}\n- {x: 2}\n") == [{"x": 1}, {"x": 2}]


def test_an_alias_bomb_is_refused_quickly() -> None:
    started = time.monotonic()
    with pytest.raises(EvalgateYamlError, match="expands to more than 1000 values"):
        evalgate_load_yaml(BOMB, max_nodes=1000)
    assert time.monotonic() - started < 30  # a bound on a hang, not a speed claim


def test_the_default_bound_refuses_a_nine_to_the_ninth_expansion() -> None:
    with pytest.raises(EvalgateYamlError, match="nested aliases"):
        evalgate_load_yaml(BOMB)


def test_invalid_yaml_is_an_evalgate_yaml_error() -> None:
    with pytest.raises(EvalgateYamlError, match="not valid YAML"):
        evalgate_load_yaml("a: [1, 2\n")


def _suite(tmp_path: Path) -> Path:
    return write_suite(tmp_path, {"candidate": "simulated://", "baseline": "simulated://"})


def test_a_manifest_with_a_duplicate_key_names_the_file(tmp_path: Path) -> None:
    path = _suite(tmp_path)
    path.write_text(path.read_text() + "repetitions: 3\n")
    with pytest.raises(EvalgateConfigError, match="duplicate key 'repetitions'") as info:
        evalgate_load_manifest(str(path))
    assert info.value.source == str(path)


def test_a_manifest_that_is_not_utf8_is_refused_cleanly(tmp_path: Path) -> None:
    path = _suite(tmp_path)
    path.write_bytes(path.read_bytes() + b"\xff\xfe junk\n")
    with pytest.raises(EvalgateConfigError, match="not UTF-8") as info:
        evalgate_load_manifest(str(path))
    assert info.value.source == str(path)


def test_a_manifest_alias_bomb_is_refused(tmp_path: Path) -> None:
    path = _suite(tmp_path)
    nested = "".join("  " + line + "\n" for line in BOMB.splitlines())
    path.write_text(path.read_text() + "x-bomb:\n" + nested)
    with pytest.raises(EvalgateConfigError, match="nested aliases"):
        evalgate_load_manifest(str(path))


def test_a_policy_saying_margin_twice_is_refused(tmp_path: Path) -> None:
    policy = tmp_path / "gate.yaml"
    policy.write_text(
        "version: v1\nrules:\n  - slice: all\n    rule: non_inferior\n    margin: 0.01\n"
        "    margin: 0.5\n"
    )
    with pytest.raises(EvalgatePolicyError, match="duplicate key 'margin' on line 6") as info:
        evalgate_load_policy(policy)
    assert info.value.source == str(policy)


def test_a_policy_alias_bomb_is_refused(tmp_path: Path) -> None:
    policy = tmp_path / "gate.yaml"
    policy.write_text("version: v1\nrules: []\n" + BOMB)
    with pytest.raises(EvalgatePolicyError, match="nested aliases"):
        evalgate_load_policy(policy)


def test_a_policy_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    policy = tmp_path / "gate.yaml"
    policy.write_bytes(b"version: v1\nrules: \xff\n")
    with pytest.raises(EvalgatePolicyError, match="cannot read"):
        evalgate_load_policy(policy)


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "", "x" * 65, "tab\tname", "ü"])
def test_a_candidate_name_that_could_become_a_path_is_refused(tmp_path: Path, name: str) -> None:
    path = write_suite(tmp_path, {name: "simulated://", "baseline": "simulated://"})
    with pytest.raises(EvalgateConfigError, match="not a safe name") as info:
        evalgate_load_manifest(str(path))
    assert info.value.key == f"candidates.{name}"


@pytest.mark.parametrize("name", ["candidate", "r17-fp8", "Model_2.1", "x" * 64])
def test_ordinary_candidate_names_load(tmp_path: Path, name: str) -> None:
    path = write_suite(tmp_path, {name: "simulated://", "baseline": "simulated://"})
    assert name in evalgate_load_manifest(str(path)).candidates
