"""The manifest's code-scoring keys (``manifest_code.py``): strict validation with file, key and
reason; what enters the definition digest; other suites' digests untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from suitekit import write_suite

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest

URL = "simulated://?code=1"
CODE = {"revision": "t1", "scorer": "code", "language": "python", "extract": "fenced"}
REPO = Path(__file__).resolve().parent.parent


def _write(tmp_path: Path, evaluator: dict[str, Any] | None = None, **top: Any) -> Path:
    extra: dict[str, Any] = {"evaluator": evaluator or dict(CODE), **top}
    return write_suite(tmp_path / "s", {"candidate": URL, "baseline": URL}, extra=extra)


def _load(path: Path) -> EvalgateManifest:
    return evalgate_load_manifest(str(path))


def _refused(path: Path) -> EvalgateConfigError:
    with pytest.raises(EvalgateConfigError) as info:
        _load(path)
    assert str(info.value).startswith(str(path))  # the file is named
    return info.value


def test_a_code_suite_loads_with_its_sandbox_defaults(tmp_path: Path) -> None:
    manifest = _load(_write(tmp_path))
    assert manifest.sandbox is not None
    assert manifest.sandbox.isolation == "auto"
    assert (manifest.sandbox.timeout_s, manifest.sandbox.max_concurrency) == (10.0, 4)
    assert manifest.definition["evaluator"]["pass_at_k"] is None
    assert manifest.definition["sandbox"]["memory_mb"] == 512


def test_language_and_extract_default_to_python_and_fenced(tmp_path: Path) -> None:
    manifest = _load(_write(tmp_path, {"revision": "t1", "scorer": "code"}))
    evaluator = manifest.definition["evaluator"]
    assert (evaluator["language"], evaluator["extract"]) == ("python", "fenced")
    spelled = _load(_write(tmp_path / "b"))
    assert spelled.definition_digest == manifest.definition_digest


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("language", "rust", "must be one of python, got 'rust'"),
        ("extract", "last", "must be one of fenced, got 'last'"),
        ("pass_at_k", 0, "must be an integer >= 1"),
    ],
)
def test_bad_code_evaluator_keys_are_refused(
    tmp_path: Path, key: str, value: object, reason: str
) -> None:
    error = _refused(_write(tmp_path, {**CODE, key: value}))
    assert (error.key, error.reason) == (f"evaluator.{key}", reason)


def test_pass_at_k_above_the_repetitions_is_refused(tmp_path: Path) -> None:
    path = write_suite(
        tmp_path / "s",
        {"candidate": URL, "baseline": URL},
        repetitions=2,
        extra={"evaluator": {**CODE, "pass_at_k": 3}},
    )
    error = _refused(path)
    assert error.key == "evaluator.pass_at_k"
    assert "needs at least 3 repetitions per case; repetitions is 2" in error.reason


def test_pass_at_k_up_to_the_repetitions_loads(tmp_path: Path) -> None:
    path = write_suite(
        tmp_path / "s",
        {"candidate": URL, "baseline": URL},
        repetitions=3,
        extra={"evaluator": {**CODE, "pass_at_k": 3}},
    )
    assert _load(path).evaluator.pass_at_k == 3


@pytest.mark.parametrize("key", ["language", "extract", "pass_at_k"])
def test_code_keys_under_another_scorer_are_refused(tmp_path: Path, key: str) -> None:
    value = 1 if key == "pass_at_k" else "python" if key == "language" else "fenced"
    error = _refused(_write(tmp_path, {"revision": "e1", "scorer": "exact", key: value}))
    assert error.key == f"evaluator.{key}"
    assert error.reason == "only for scorer: code (this suite's scorer is 'exact')"


def test_a_sandbox_block_without_scorer_code_is_refused(tmp_path: Path) -> None:
    error = _refused(_write(tmp_path, {"revision": "e1", "scorer": "exact"}, sandbox={}))
    assert (error.key, error.reason) == ("sandbox", "a sandbox block is only for scorer: code")


@pytest.mark.parametrize(
    ("sandbox", "key", "fragment"),
    [
        ({"isolaton": "auto"}, "sandbox.isolaton", "unknown key"),
        ({"isolation": "docker"}, "sandbox.isolation", "'auto', 'bwrap', 'unshare' or 'none'"),
        ({"timeout_s": 0}, "sandbox.timeout_s", "greater than 0"),
        ({"max_concurrency": 0}, "sandbox.max_concurrency", "greater than or equal to 1"),
        ({"memory_mb": 8}, "sandbox.memory_mb", "greater than or equal to 32"),
        ({"processes": "many"}, "sandbox.processes", "valid integer"),
        ({"runtime_class": "Bad Name"}, "sandbox.runtime_class", "pattern"),
    ],
)
def test_bad_sandbox_values_name_the_key(
    tmp_path: Path, sandbox: dict[str, Any], key: str, fragment: str
) -> None:
    error = _refused(_write(tmp_path, sandbox=sandbox))
    assert error.key == key and fragment in error.reason, error.reason


def test_isolation_none_is_accepted_only_written_out(tmp_path: Path) -> None:
    defaulted = _load(_write(tmp_path, sandbox={}))
    assert defaulted.sandbox is not None and defaulted.sandbox.isolation == "auto"
    written = _load(_write(tmp_path / "b", sandbox={"isolation": "none"}))
    assert written.sandbox is not None and written.sandbox.isolation == "none"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("timeout_s", 3.0),
        ("memory_mb", 256),
        ("cpu_s", 3),
        ("processes", 16),
        ("open_files", 32),
        ("file_size_mb", 4),
        ("work_mb", 32),
    ],
)
def test_every_limit_is_in_the_definition_digest(tmp_path: Path, key: str, value: object) -> None:
    base = _load(_write(tmp_path / "a", sandbox={}))
    changed = _load(_write(tmp_path / "b", sandbox={key: value}))
    assert changed.definition_digest != base.definition_digest


@pytest.mark.parametrize(
    ("key", "value"),
    [("isolation", "unshare"), ("max_concurrency", 1), ("runtime_class", "gvisor")],
)
def test_transport_keys_leave_the_digest_alone(tmp_path: Path, key: str, value: object) -> None:
    base = _load(_write(tmp_path / "a", sandbox={}))
    changed = _load(_write(tmp_path / "b", sandbox={key: value}))
    assert changed.definition_digest == base.definition_digest
    assert key not in changed.definition["sandbox"]


def test_pass_at_k_and_language_are_in_the_digest(tmp_path: Path) -> None:
    path = write_suite(
        tmp_path / "a",
        {"candidate": URL, "baseline": URL},
        repetitions=2,
        extra={"evaluator": CODE},
    )
    with_k = write_suite(
        tmp_path / "b",
        {"candidate": URL, "baseline": URL},
        repetitions=2,
        extra={"evaluator": {**CODE, "pass_at_k": 2}},
    )
    assert _load(path).definition_digest != _load(with_k).definition_digest


def test_other_suites_get_no_code_keys_in_their_definition(tmp_path: Path) -> None:
    path = write_suite(tmp_path / "s", {"candidate": URL, "baseline": URL})
    manifest = _load(path)
    assert manifest.sandbox is None and "sandbox" not in manifest.definition
    assert set(manifest.definition["evaluator"]) == {"revision", "scorer", "options"}


def test_the_example_suites_keep_their_definition_digests() -> None:
    # Pinned before code scoring existed: records and decisions of these suites stay valid.
    tiny = _load(REPO / "suites" / "tiny" / "evalgate.yaml")
    support = _load(REPO / "suites" / "support" / "evalgate.yaml")
    assert tiny.definition_digest == (
        "ab26701634a7aee40e6d1bf3b9f899da89e9481d9f02d0a0db6cad4c926964b9"
    )
    assert support.definition_digest == (
        "a396d91413578acd2ecac47f6be842eec423812351326853aee29bb113eef824"
    )


def test_the_code_example_suite_loads() -> None:
    manifest = _load(REPO / "suites" / "code" / "evalgate.yaml")
    assert len(manifest.cases) >= 60
    assert manifest.evaluator.pass_at_k == 2 and manifest.repetitions == 3
    assert manifest.sandbox is not None and manifest.sandbox.isolation == "auto"


def test_yaml_of_the_code_example_names_every_sandbox_key() -> None:
    raw = yaml.safe_load((REPO / "suites" / "code" / "evalgate.yaml").read_text())
    assert set(raw["sandbox"]) >= {"isolation", "max_concurrency", "timeout_s", "memory_mb"}
