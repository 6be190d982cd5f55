"""What a new user reads in the terminal (issue 37, Reports): a configuration error without a
"collected 0 items" line above it, a resumed run that says how many results it reused, and a
no_regression row whose alpha reads as the test's level, not as a threshold to pass. Real
``pytest --evalgate`` runs (pytester, in-process) against simulated candidates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from suitekit import make_cases, write_suite

pytestmark = pytest.mark.slow

URLS = {
    "candidate": "simulated://?accuracy=1.0&seed=5",
    "baseline": "simulated://?accuracy=1.0&seed=6",
}


def _suite(folder: Path, **kwargs: object) -> Path:
    return write_suite(folder, URLS, cases=make_cases(["alpha", "beta"], 4), **kwargs)  # type: ignore[arg-type]


def _run(pytester: pytest.Pytester, *extra: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "--evalgate-store=store", *extra
    )


def test_a_configuration_error_is_not_under_a_collected_0_items_line(
    pytester: pytest.Pytester,
) -> None:
    path = _suite(pytester.path / "suite")
    path.write_text(path.read_text().replace("repetitions: 1", "repetitions: 0"))
    result = _run(pytester)
    assert result.ret == 4
    assert "collected 0 items" not in result.stdout.str()
    result.stderr.fnmatch_lines(["ERROR: */suite/evalgate.yaml: repetitions: *"])


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_resumed_run_says_how_many_results_it_reused(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    _suite(pytester.path / "suite")
    first = _run(pytester, *xdist)
    assert first.ret == 0, first.stdout.str()
    assert "from the store" not in first.stdout.str()  # nothing was stored before
    again = _run(pytester, *xdist)
    assert again.ret == 0, again.stdout.str()
    again.stdout.fnmatch_lines(["reused 16 results from the store, requested 0"])


def test_a_partly_resumed_run_counts_what_it_reused_and_requested(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester.path / "suite")
    first = _run(pytester, "--evalgate-candidate=baseline")
    assert "from the store" not in first.stdout.str()
    again = _run(pytester)
    again.stdout.fnmatch_lines(["reused 8 results from the store, requested 8"])


def test_no_regression_shows_its_alpha_as_the_test_level(pytester: pytest.Pytester) -> None:
    policy = {
        "version": "v1",
        "confidence": 0.95,
        "bootstrap": {"resamples": 200, "seed": 0},
        "rules": [{"slice": "all", "rule": "no_regression"}],
    }
    _suite(pytester.path / "suite", policy=policy)
    result = _run(pytester)
    lines = [line for line in result.stdout.lines if line.startswith("no_regression[all]")]
    assert len(lines) == 1, result.stdout.str()
    assert re.fullmatch(
        r"no_regression\[all\] +[+-]\d\.\d{4} +\[[+-]\d\.\d{4}, [+-]\d\.\d{4}\] +"
        r"α = 0\.05 \(test level\)  (pass|FAIL): .*adjusted p .*",
        lines[0],
    ), lines[0]
    assert "+0.0500" not in lines[0]
