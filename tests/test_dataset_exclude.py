"""``dataset.exclude`` (issue 37, First use): a case that can never be answered (longer than the
context, a judge that never answers it in format) is excluded explicitly, with its reason, and
the decision records the list. Manifest refusals, then real ``pytest --evalgate`` runs
(pytester) on a store that already holds the excluded case's records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from suitekit import make_cases, write_suite

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.load import evalgate_load_manifest

URLS = {
    "candidate": "simulated://?accuracy=1.0&seed=5",
    "baseline": "simulated://?accuracy=1.0&seed=6",
}
REASON = "longer than the 2k context of every candidate; split it (ticket 12)"


def _suite(folder: Path) -> Path:
    return write_suite(folder, URLS, cases=make_cases(["alpha", "beta"], 4))


def _exclude(path: Path, exclude: Any) -> Path:
    raw = yaml.safe_load(path.read_text())
    raw["dataset"]["exclude"] = exclude
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_excluded_cases_leave_the_suite_with_their_reasons(tmp_path: Path) -> None:
    path = _exclude(_suite(tmp_path / "s"), [{"case": "alpha-001", "reason": REASON}])
    manifest = evalgate_load_manifest(str(path))
    assert "alpha-001" not in manifest.evalgate_case_index() and len(manifest.cases) == 7
    assert [(e.case_id, e.reason) for e in manifest.exclusions] == [("alpha-001", REASON)]
    plain = evalgate_load_manifest(str(_exclude(path, [])))
    # the generation's definition is the same: stored answers of the other cases are reused
    assert plain.definition_digest == manifest.definition_digest


@pytest.mark.parametrize(
    ("exclude", "key", "reason"),
    [
        ([{"case": "nope", "reason": "r"}], "dataset.exclude[0].case", "no case 'nope'"),
        (
            [{"case": "alpha-001", "reason": "r"}, {"case": "alpha-001", "reason": "again"}],
            "dataset.exclude[1].case",
            "excluded twice",
        ),
        ([{"case": "alpha-001", "reason": " "}], "dataset.exclude[0].reason", "say why"),
        ([{"case": "alpha-001"}], "dataset.exclude.0.reason", "missing required key"),
    ],
)
def test_an_exclusion_is_refused_naming_the_key(
    tmp_path: Path, exclude: Any, key: str, reason: str
) -> None:
    path = _exclude(_suite(tmp_path / "s"), exclude)
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_manifest(str(path))
    assert caught.value.key == key and reason in caught.value.reason, caught.value


def test_every_case_excluded_is_refused(tmp_path: Path) -> None:
    path = _suite(tmp_path / "s")
    ids = [row["id"] for row in make_cases(["alpha", "beta"], 4)]
    _exclude(path, [{"case": case_id, "reason": "r"} for case_id in ids])
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_manifest(str(path))
    assert caught.value.key == "dataset.exclude" and "every case" in caught.value.reason


@pytest.mark.slow
def test_a_run_skips_the_excluded_case_and_the_decision_records_it(
    pytester: pytest.Pytester,
) -> None:
    path = _suite(pytester.path / "suite")
    args = ["--evalgate", "suite", "-p", "no:cacheprovider", "--evalgate-store=store"]
    first = pytester.runpytest(*args, "--evalgate-report=report1")
    assert first.ret == 0, first.stdout.str()  # the store now holds alpha-001's answers
    _exclude(path, [{"case": "alpha-001", "reason": REASON}])
    again = pytester.runpytest(*args, "--evalgate-report=report2")
    assert again.ret == 0, again.stdout.str()
    # 7 cases x 2 candidates, all reused; the excluded case's stored answers are no problem
    again.stdout.fnmatch_lines(["collected 14 items", "reused 14 results from the store, *"])
    again.stdout.fnmatch_lines(["identities completed 14/14, missing 0, errors none, *"])
    again.stdout.fnmatch_lines([f"excluded 1 case (dataset.exclude): alpha-001: {REASON}"])
    decision = json.loads((pytester.path / "report2" / "decision.json").read_text())
    assert decision["verdict"] == "pass"
    assert decision["exclusions"] == [{"case": "alpha-001", "reason": REASON}]
    assert decision["counts"]["expected"] == 14
    assert "exclusions" not in json.loads((pytester.path / "report1" / "decision.json").read_text())
