"""``evalgate trend SUITE --candidates A B C`` (issue 16): checkpoints of one suite side by side.

A real run of the simulator fills the store with three checkpoints; the trend's rates are the
cases of each slice read straight from the segment files, and its intervals equal
``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``. An incomplete or invalid store of
a checkpoint is reported and left out, never used; a bad candidate name is a usage error.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import binomtest
from suitekit import make_cases, write_suite

from pytest_evalgate.aggregate.trend import evalgate_trend
from pytest_evalgate.cli import main
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.store import evalgate_open_store

CHECKPOINTS = {
    "ckpt-100": "simulated://?accuracy=0.55&seed=1",
    "ckpt-200": "simulated://?accuracy=0.7&seed=2&accuracy.beta=0.8",
    "ckpt-300": "simulated://?accuracy=0.85&seed=3",
}
POLICY: dict[str, Any] = {
    "version": "single-v1",
    "candidate": "ckpt-300",
    "baseline": None,
    "rules": [{"slice": "all", "rule": "min_rate", "min": 0.0}],
}


@pytest.fixture
def suite(pytester: pytest.Pytester) -> Path:
    path = write_suite(
        pytester.path / "suite",
        CHECKPOINTS,
        cases=make_cases(["alpha", "beta"], 40),
        repetitions=2,
        policy=POLICY,
    )
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider", "-q")
    assert result.ret == 0, result.stdout.str()
    return path


def _stored_passes(store: Path) -> dict[str, dict[str, list[bool]]]:
    """Candidate name -> case id -> passed of each repetition, read from the segments."""
    found: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for segment in store.rglob("*.jsonl"):
        for line in segment.read_text().splitlines():
            record = json.loads(line)
            if "checksum" in record and "identity" in record:
                identity = record["identity"]
                found[identity["candidate"]][identity["case_id"]].append(bool(record["passed"]))
    return found


def _trend(*args: str) -> int:
    return main(["trend", "suite", "--store", ".evalgate", *args])


def test_rates_and_intervals_equal_binomtest_on_the_stored_cases(
    suite: Path, pytester: pytest.Pytester
) -> None:
    manifest = evalgate_load_manifest(str(suite))
    trend = evalgate_trend(evalgate_open_store(".evalgate"), manifest, list(CHECKPOINTS))
    stored = _stored_passes(pytester.path / ".evalgate")
    assert trend.slices == ("all", "alpha", "beta") and trend.complete
    assert [point.candidate for point in trend.points] == list(CHECKPOINTS)
    for point in trend.points:
        cases = stored[point.candidate]
        assert len(cases) == 80 and all(len(reps) == 2 for reps in cases.values())
        for name in trend.slices:
            mine = [
                all(reps) for case, reps in cases.items() if name in ("all", case.rsplit("-", 1)[0])
            ]
            k, n = sum(mine), len(mine)
            cell = point.cells[name]
            ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
            assert (cell.passed, cell.cases, cell.rate) == (k, n, k / n)
            assert cell.lo == pytest.approx(ci.low, abs=1e-12)
            assert cell.hi == pytest.approx(ci.high, abs=1e-12)
    rates = [point.cells["all"].rate for point in trend.points]
    assert rates == sorted(rates) and rates[0] < rates[-1]  # the checkpoints improve


def test_the_command_prints_the_table_and_writes_trend_png(
    suite: Path, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    import matplotlib.image

    (pytester.path / "taken").write_text("a file, not a folder")
    assert _trend("--candidates", *CHECKPOINTS, "--png", "taken/trend.png") == 4
    assert capsys.readouterr().err.startswith("evalgate trend: ")
    assert _trend("--candidates", *CHECKPOINTS, "--png", "out/trend.png") == 0
    out = capsys.readouterr().out.splitlines()
    manifest = evalgate_load_manifest(str(suite))
    trend = evalgate_trend(evalgate_open_store(".evalgate"), manifest, list(CHECKPOINTS))
    cell = trend.points[1].cells["beta"]
    row = (
        f"{cell.passed}/{cell.cases} {100 * cell.rate:.1f} %  "
        f"[{100 * cell.lo:.1f} %, {100 * cell.hi:.1f} %]"
    )
    assert any(line.split() == ["ckpt-200", *row.split()] for line in out), out
    assert out[0].startswith("trend of test-suite (definition ")
    assert out[-1] == "wrote out/trend.png"
    png = pytester.path / "out" / "trend.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    pixels = matplotlib.image.imread(str(png))
    assert pixels.shape[0] > 200 and pixels.shape[1] > 600
    assert len({tuple(p) for p in pixels.reshape(-1, pixels.shape[2])[::7].tolist()}) > 20


def _segments(store: Path, candidate: str) -> list[Path]:
    return sorted(p for p in store.rglob("*.jsonl") if f"/{candidate}-" in p.as_posix())


def test_an_incomplete_checkpoint_is_reported_not_used(
    suite: Path, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    _segments(pytester.path / ".evalgate", "ckpt-200")[0].unlink()
    capsys.readouterr()
    assert _trend("--candidates", *CHECKPOINTS) == 1
    out = capsys.readouterr().out
    assert "ckpt-200: incomplete, not shown: only " in out
    rows = [line.split() for line in out.splitlines()]
    assert ["ckpt-200", "incomplete"] in [row[-2:] for row in rows]
    assert (pytester.path / "trend.png").stat().st_size > 10_000  # the others are drawn
    manifest = evalgate_load_manifest(str(suite))
    trend = evalgate_trend(evalgate_open_store(".evalgate"), manifest, list(CHECKPOINTS))
    assert trend.points[1].status == "incomplete" and dict(trend.points[1].cells) == {}
    assert trend.points[0].cells and trend.points[2].cells


def test_an_invalid_checkpoint_is_reported_not_used(
    suite: Path, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = _segments(pytester.path / ".evalgate", "ckpt-100")[0]
    lines = segment.read_text().splitlines()
    record = json.loads(lines[0])
    record["passed"] = not record["passed"]  # the checksum no longer holds
    segment.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    capsys.readouterr()
    assert _trend("--candidates", "ckpt-100", "ckpt-300") == 1
    out = capsys.readouterr().out
    assert (
        "ckpt-100: invalid, not shown: the store failed verification (1 problem(s), first: " in out
    )


@pytest.mark.parametrize(
    ("names", "reason"),
    [
        (["ckpt-100", "ckpt-999"], "no candidate 'ckpt-999' in the manifest (candidates: ckpt-100"),
        (["ckpt-100", "ckpt-100"], "'ckpt-100' is named twice"),
    ],
)
def test_a_bad_candidate_name_exits_4(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], names: list[str], reason: str
) -> None:
    write_suite(pytester.path / "suite", CHECKPOINTS, cases=make_cases(["alpha"], 2))
    assert _trend("--candidates", *names) == 4
    err = capsys.readouterr().err
    assert err.startswith("evalgate trend: ") and "evalgate.yaml: candidates: " in err
    assert reason in err


def test_a_confidence_outside_the_open_interval_exits_4(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    write_suite(pytester.path / "suite", CHECKPOINTS, cases=make_cases(["alpha"], 2))
    assert _trend("--candidates", "ckpt-100", "--confidence", "1.0") == 4
    assert "--confidence: must lie in (0.5, 1)" in capsys.readouterr().err


def test_the_cells_follow_the_confidence_asked_for() -> None:
    from pytest_evalgate.aggregate.trend import _cell

    for k, n, level in ((0, 30, 0.9), (17, 40, 0.99), (40, 40, 0.8)):
        cell = _cell(k, n, level)
        ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
        assert cell.lo == pytest.approx(ci.low, abs=1e-12) and cell.hi == pytest.approx(
            ci.high, abs=1e-12
        )
