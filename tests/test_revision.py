"""``PYTEST_EVALGATE_DEFINITION`` (the ``revision`` input of a Polyaxon worker): a pod whose
suite has another definition than the one it was rendered for refuses before any request."""

from __future__ import annotations

import json

import pytest
from suitekit import write_suite

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.manifest.revision import EVALGATE_DEFINITION_ENV, evalgate_check_definition

GOOD = "simulated://?accuracy=1.0&seed=1"
DIGEST = "ab" * 32


@pytest.mark.parametrize("expected", [None, "", DIGEST[:16], DIGEST])
def test_a_matching_or_absent_definition_passes(expected: str | None) -> None:
    evalgate_check_definition("s/evalgate.yaml", DIGEST, expected)


@pytest.mark.parametrize(
    ("expected", "reason"),
    [
        ("cd" * 8, "this suite's definition is abababababababab, but it was rendered for cdcd"),
        ("abab", "is not 16 to 64 lowercase hex digits"),
        ("ABABABABABABABAB", "is not 16 to 64 lowercase hex digits"),
    ],
)
def test_another_or_malformed_definition_is_refused(expected: str, reason: str) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_definition("s/evalgate.yaml", DIGEST, expected)
    assert caught.value.source == "s/evalgate.yaml"
    assert caught.value.key == "definition_digest"
    assert reason in caught.value.reason


def test_a_pod_rendered_for_another_definition_exits_4_before_any_request(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_suite(pytester.path / "suite", {"candidate": GOOD, "baseline": GOOD})
    digest = evalgate_load_manifest(str(path)).definition_digest
    log = pytester.path / "requests.jsonl"
    monkeypatch.setenv(EVALGATE_DEFINITION_ENV, "0" * 16)
    args = ["--evalgate", "suite", f"--evalgate-request-log={log}", "-p", "no:cacheprovider"]
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 4
    err = result.stderr.str()
    assert f"this suite's definition is {digest[:16]}, but it was rendered for 0000" in err
    assert not log.exists() or log.read_text() == ""
    # rendered for this definition, the same pod runs and gates
    monkeypatch.setenv(EVALGATE_DEFINITION_ENV, digest[:16])
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 0
    assert len([json.loads(line) for line in log.read_text().splitlines()]) > 0
