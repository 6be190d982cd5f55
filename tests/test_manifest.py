"""Manifest validation: every refusal names the file, the key (or line) and the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from suitekit import write_suite

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.datasetpin import evalgate_pin
from pytest_evalgate.manifest.load import evalgate_candidate_key, evalgate_load_manifest

URL = "simulated://?accuracy=1.0"


def _write(tmp_path: Path, **changes: object) -> Path:
    path = write_suite(tmp_path / "s", {"candidate": URL, "baseline": URL})
    data = yaml.safe_load(path.read_text())
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for part in parents:
            node = node[part]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _refused(path: Path) -> EvalgateConfigError:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_load_manifest(str(path))
    return info.value


def test_a_valid_manifest_loads_with_digests(tmp_path: Path) -> None:
    manifest = evalgate_load_manifest(str(_write(tmp_path)))
    assert len(manifest.cases) == 12 and manifest.categories == ("alpha", "beta")
    assert len(manifest.definition_digest) == 64
    assert manifest.candidates["candidate"].key.startswith("candidate-")


def test_unknown_key(tmp_path: Path) -> None:
    error = _refused(_write(tmp_path, budget__max_conncurrency=3))
    assert error.key == "budget.max_conncurrency" and error.reason == "unknown key"
    assert str(error).startswith(str(tmp_path / "s" / "evalgate.yaml"))


def test_missing_key(tmp_path: Path) -> None:
    error = _refused(_write(tmp_path, evaluator=None))
    assert error.key == "evaluator" and error.reason == "missing required key"


def test_wrong_type(tmp_path: Path) -> None:
    error = _refused(_write(tmp_path, repetitions="many"))
    assert error.key == "repetitions" and "integer" in error.reason


def test_shards_below_one(tmp_path: Path) -> None:
    error = _refused(_write(tmp_path, shards=0))
    assert error.key == "shards" and ">= 1" in error.reason


@pytest.mark.parametrize("seed", [2**63, -(2**63) - 1, 10**29])
def test_a_seed_beyond_64_bits_is_refused_naming_the_key(tmp_path: Path, seed: int) -> None:
    # Every server refuses it (vLLM: int64; llama.cpp: a 32/64-bit seed) at the first request.
    error = _refused(_write(tmp_path, generation={"temperature": 0.0, "seed": seed}))
    bound = "less than or equal to 9223372036854775807" if seed > 0 else "greater than or equal"
    assert error.key == "generation.seed" and bound in error.reason, error.reason


def test_a_64_bit_seed_loads(tmp_path: Path) -> None:
    manifest = evalgate_load_manifest(str(_write(tmp_path, generation={"seed": 2**63 - 1})))
    assert manifest.generation.seed == 2**63 - 1


def test_judge_equal_to_a_candidate(tmp_path: Path) -> None:
    judge = {"model": "model-candidate", "base_url": URL, "revision": "j1"}
    error = _refused(_write(tmp_path, judge=judge))
    assert error.key == "judge.model" and "is the model under test" in error.reason


def test_judge_on_a_candidates_base_url(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        candidates__candidate__base_url="http://127.0.0.1:8000/v1",
        judge={"model": "judge-x", "base_url": "HTTP://127.0.0.1:8000/v1/", "revision": "j1"},
    )
    error = _refused(path)
    assert error.key == "judge.base_url" and "'candidate'" in error.reason


def test_dataset_digest_differs_from_the_pin(tmp_path: Path) -> None:
    path = _write(tmp_path)
    with (path.parent / "cases.jsonl").open("a") as handle:
        handle.write(json.dumps({"id": "x-1", "input": "q", "target": "a", "category": "x"}) + "\n")
    error = _refused(path)
    assert error.key == "dataset.sha256" and "differs from the pin" in error.reason


def _rewrite_cases(path: Path, text: str) -> None:
    (path.parent / "cases.jsonl").write_text(text)
    evalgate_pin(str(path))


def test_duplicate_case_ids(tmp_path: Path) -> None:
    path = _write(tmp_path)
    row = json.dumps({"id": "a-1", "input": "q", "target": "a", "category": "x"})
    _rewrite_cases(path, row + "\n" + row + "\n")
    error = _refused(path)
    assert error.source.endswith("cases.jsonl")
    assert error.key == "line 2: id 'a-1'" and "duplicate case id (first on line 1)" in error.reason


def test_unreadable_row(tmp_path: Path) -> None:
    path = _write(tmp_path)
    _rewrite_cases(path, '{"id": "a-1", "input": "q", "target": "a", "category": "x"}\n{not json\n')
    error = _refused(path)
    assert error.key == "line 2" and "not valid JSON" in error.reason


def test_row_without_a_target(tmp_path: Path) -> None:
    path = _write(tmp_path)
    _rewrite_cases(path, '{"id": "a-1", "input": "q", "category": "x"}\n')
    error = _refused(path)
    assert error.key == "line 1: id 'a-1': target"


def test_unpinned_dataset(tmp_path: Path) -> None:
    error = _refused(_write(tmp_path, dataset__sha256=None))
    assert error.key == "dataset.sha256" and "evalgate pin" in error.reason


def test_pin_writes_the_digest_and_keeps_the_rest(tmp_path: Path) -> None:
    path = _write(tmp_path)
    (path.parent / "cases.jsonl").write_text(
        '{"id": "a-1", "input": "q", "target": "a", "category": "x"}\n'
    )
    before = yaml.safe_load(path.read_text())
    digest = evalgate_pin(str(path))
    after = yaml.safe_load(path.read_text())
    assert after["dataset"]["sha256"] == digest != before["dataset"]["sha256"]
    assert {k: v for k, v in after.items() if k != "dataset"} == {
        k: v for k, v in before.items() if k != "dataset"
    }
    assert len(evalgate_load_manifest(str(path)).cases) == 1


def test_definition_digest_ignores_transport_but_not_meaning(tmp_path: Path) -> None:
    base = evalgate_load_manifest(str(_write(tmp_path / "a"))).definition_digest
    transport = _write(tmp_path / "b", budget={"max_concurrency": 64}, shards=8)
    assert evalgate_load_manifest(str(transport)).definition_digest == base
    meaning = _write(tmp_path / "c", generation={"temperature": 0.7, "max_tokens": 16})
    assert evalgate_load_manifest(str(meaning)).definition_digest != base
    prompt = _write(tmp_path / "d", prompt={"revision": "p2", "template": "{input}"})
    assert evalgate_load_manifest(str(prompt)).definition_digest != base


def test_candidate_key_changes_with_pins_only() -> None:
    one = evalgate_candidate_key("candidate", "m", {"weights_digest": "sha256:aa"})
    assert one == evalgate_candidate_key("candidate", "m", {"weights_digest": "sha256:aa"})
    assert one != evalgate_candidate_key("candidate", "m", {"weights_digest": "sha256:bb"})
    assert one != evalgate_candidate_key("candidate", "m2", {"weights_digest": "sha256:aa"})


@pytest.mark.parametrize("seed", [1e29, "1e29", 7.0, True, float("inf")])
def test_a_float_string_or_bool_seed_is_refused_naming_the_file_and_key(
    tmp_path: Path, seed: object
) -> None:
    # ``seed: 1e29`` in YAML is a string (YAML 1.1 floats need a dot), ``1.0e+29`` a float:
    # neither reaches a server, which would refuse it at the first request (issue 37).
    path = _write(tmp_path, generation={"temperature": 0.0, "seed": seed})
    error = _refused(path)
    assert error.key == "generation.seed" and "integer" in error.reason, error.reason
    assert error.source == str(path)
