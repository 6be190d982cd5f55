"""judge/agreement.py against scikit-learn, a hand-written bootstrap, and golden-set files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, cohen_kappa_score, confusion_matrix

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.judge import agreement, spec
from pytest_evalgate.judge import golden as golden_sets

SCALE = spec.EvalgateJudgeScale(1, 5, 4)
POINTS = list(SCALE.evalgate_points())


def _noisy_labels(seed: int, n: int, spread: int) -> tuple[list[int], list[int]]:
    """Human labels on 1..5 and a judge that is off by up to ``spread`` points."""
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 6, n)
    judge = np.clip(human + rng.integers(-spread, spread + 1, n), 1, 5)
    return [int(x) for x in human], [int(x) for x in judge]


# --------------------------------------------------------------------------- kappa = sklearn


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("weights", ["none", "quadratic"])
def test_kappa_equals_sklearn_on_ordinal_labels(seed: int, weights: str) -> None:
    human, judge = _noisy_labels(seed, 40 + 30 * seed, spread=1 + seed % 3)
    ours = agreement.evalgate_cohen_kappa(human, judge, POINTS, weights)  # type: ignore[arg-type]
    theirs = cohen_kappa_score(
        human, judge, labels=POINTS, weights=None if weights == "none" else "quadratic"
    )
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_quadratic_kappa_uses_every_point_of_the_scale_even_unused_ones() -> None:
    # Nobody used 3: distances still count 2 -> 4 as two steps, like sklearn given the labels.
    human = [1, 2, 2, 4, 5, 5, 1, 4, 2, 5]
    judge = [1, 2, 4, 4, 5, 4, 2, 4, 2, 5]
    ours = agreement.evalgate_cohen_kappa(human, judge, POINTS, "quadratic")
    assert ours == pytest.approx(
        cohen_kappa_score(human, judge, labels=POINTS, weights="quadratic")
    )
    dense = cohen_kappa_score(human, judge, weights="quadratic")  # labels from the data only
    assert ours != pytest.approx(dense)


def test_kappa_equals_sklearn_on_pairwise_preferences() -> None:
    rng = np.random.default_rng(4)
    human = [str(x) for x in rng.choice(["A", "B", "tie"], 300, p=[0.45, 0.4, 0.15])]
    judge = [h if rng.random() < 0.7 else str(rng.choice(["A", "B", "tie"])) for h in human]
    ours = agreement.evalgate_cohen_kappa(human, judge, agreement.EVALGATE_PREFERENCES)
    theirs = cohen_kappa_score(human, judge, labels=list(agreement.EVALGATE_PREFERENCES))
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_confusion_and_raw_agreement_equal_sklearn() -> None:
    human, judge = _noisy_labels(9, 150, spread=2)
    ours = agreement.evalgate_confusion(human, judge, POINTS)
    assert np.array_equal(ours, confusion_matrix(human, judge, labels=POINTS))
    result = agreement.evalgate_agreement(human, judge, POINTS, weights="quadratic", resamples=200)
    assert result.raw_agreement == pytest.approx(accuracy_score(human, judge))
    assert result.confusion == tuple(tuple(int(x) for x in row) for row in ours)
    assert result.n == 150 and result.labels == tuple(POINTS)


def test_kappa_extremes() -> None:
    assert agreement.evalgate_cohen_kappa([1, 2, 3, 4], [1, 2, 3, 4], POINTS) == 1.0
    opposite = agreement.evalgate_cohen_kappa([1, 1, 5, 5], [5, 5, 1, 1], POINTS, "quadratic")
    assert opposite == pytest.approx(-1.0)
    assert math.isnan(agreement.evalgate_cohen_kappa([3, 3, 3], [3, 3, 3], POINTS))
    assert math.isnan(agreement.evalgate_kappa_from_confusion(np.zeros((3, 3))))


@pytest.mark.parametrize(
    ("human", "judge", "match"),
    [([1, 2], [1], "2 human labels but 1"), ([1, 9], [1, 2], "9"), (["A"], ["Z"], "'Z'")],
)
def test_bad_label_lists_raise(human: list[Any], judge: list[Any], match: str) -> None:
    labels = agreement.EVALGATE_PREFERENCES if isinstance(human[0], str) else POINTS
    with pytest.raises(ValueError, match=match):
        agreement.evalgate_cohen_kappa(human, judge, labels)


def test_unknown_weights_raise() -> None:
    with pytest.raises(ValueError, match="quadratic"):
        agreement.evalgate_kappa_weights(3, "linear")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the interval


def _direct_kappa_bootstrap(
    human: list[int], judge: list[int], clusters: list[str], resamples: int, seed: int
) -> np.ndarray:
    """By hand: draw clusters (sorted labels) with replacement, pool their rows, ask sklearn."""
    labels = sorted(set(clusters))
    rows_of = {label: [i for i, c in enumerate(clusters) if c == label] for label in labels}
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    draws = rng.integers(0, len(labels), size=(resamples, len(labels)))
    out = []
    for row in draws:
        picked = [i for index in row for i in rows_of[labels[index]]]
        h, j = [human[i] for i in picked], [judge[i] for i in picked]
        out.append(cohen_kappa_score(h, j, labels=POINTS, weights="quadratic"))
    return np.array(out)


def test_the_kappa_interval_matches_a_direct_cluster_bootstrap() -> None:
    human, judge = _noisy_labels(2, 90, spread=1)
    clusters = [f"case-{i // 3:02d}" for i in range(90)]  # three golden rows per case
    result = agreement.evalgate_agreement(
        human, judge, POINTS, weights="quadratic", clusters=clusters, resamples=300, seed=5
    )
    boot = _direct_kappa_bootstrap(human, judge, clusters, 300, 5)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    assert (result.lo, result.hi) == pytest.approx((lo, hi), abs=1e-12)
    assert result.lo < result.kappa < result.hi
    assert result.kappa == pytest.approx(cohen_kappa_score(human, judge, weights="quadratic"))


def test_row_clusters_by_default_and_case_clusters_widen_the_interval() -> None:
    human, judge = _noisy_labels(6, 60, spread=2)
    rows = agreement.evalgate_agreement(human, judge, POINTS, weights="none", resamples=2000)
    same = agreement.evalgate_agreement(
        human, judge, POINTS, weights="none", clusters=[str(i) for i in range(60)], resamples=2000
    )
    assert (rows.lo, rows.hi) == (same.lo, same.hi)
    # Each row copied four times within its case: as rows the interval halves; by case it holds.
    copies = [x for x in human for _ in range(4)], [x for x in judge for _ in range(4)]
    by_case = [str(i) for i in range(60) for _ in range(4)]
    naive = agreement.evalgate_agreement(*copies, POINTS, weights="none", resamples=2000)
    honest = agreement.evalgate_agreement(
        *copies, POINTS, weights="none", clusters=by_case, resamples=2000
    )
    assert naive.kappa == honest.kappa == pytest.approx(rows.kappa)
    width = lambda r: r.hi - r.lo  # noqa: E731
    assert width(naive) < 0.65 * width(rows)
    assert width(honest) == pytest.approx(width(rows), rel=0.15)


def test_the_interval_is_seeded_and_reproducible() -> None:
    human, judge = _noisy_labels(1, 80, spread=1)
    one = agreement.evalgate_agreement(human, judge, POINTS, weights="quadratic", seed=3)
    assert one == agreement.evalgate_agreement(human, judge, POINTS, weights="quadratic", seed=3)
    other = agreement.evalgate_agreement(human, judge, POINTS, weights="quadratic", seed=4)
    assert (other.lo, other.hi) != (one.lo, one.hi)
    assert other.kappa == one.kappa


def test_an_undefined_resample_counts_as_no_agreement() -> None:
    # Two of three rows say 3/3; a resample of only those has no defined kappa: it counts 0.
    boot = agreement.evalgate_kappa_bootstrap(
        np.array([2 * 5 + 2, 2 * 5 + 2, 0]), 5, np.array(["a", "b", "c"]), "none", 400, 0
    )
    assert not np.isnan(boot).any()
    assert np.count_nonzero(boot == 0.0) > 50  # P(no "c" drawn) = (2/3)^3, about 30 %
    assert np.count_nonzero(boot == 1.0) > 50


def test_agreement_as_builtins() -> None:
    result = agreement.evalgate_agreement([3, 3], [3, 3], POINTS, weights="quadratic", resamples=50)
    doc = result.evalgate_json()
    assert doc["kappa"] is None and doc["interval"] == [0.0, 0.0]  # undefined, not a pass
    assert doc["raw_agreement"] == 1.0 and doc["n"] == 2 and doc["weights"] == "quadratic"
    assert doc["confusion"][2][2] == 2 and sum(map(sum, doc["confusion"])) == 2
    assert json.loads(json.dumps(doc)) == doc
    with pytest.raises(ValueError, match="at least one"):
        agreement.evalgate_agreement([], [], POINTS, weights="none")


# --------------------------------------------------------------------------- helpers by mode


@pytest.mark.parametrize(
    ("score", "label"), [(1, 1), (1.49, 1), (1.5, 2), (3.5, 4), (4.49, 4), (5, 5), (4.5, 5)]
)
def test_a_judges_score_becomes_the_nearest_scale_point(score: float, label: int) -> None:
    assert agreement.evalgate_pointwise_label(score, SCALE) == label


def test_pointwise_agreement_is_quadratic_over_the_scale_and_clustered_by_case() -> None:
    golden = [
        golden_sets.EvalgateGoldenPointwise(f"case-{i // 2}", f"answer {i}", label, i + 1)
        for i, label in enumerate([1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 3, 3])
    ]
    scores = [1, 2.6, 3, 4, 4.5, 5, 4, 2, 2, 1, 3, 4]
    result = agreement.evalgate_pointwise_agreement(golden, scores, SCALE, resamples=500, seed=1)
    judged = [agreement.evalgate_pointwise_label(s, SCALE) for s in scores]
    human = [row.label for row in golden]
    assert result.weights == "quadratic" and result.labels == (1, 2, 3, 4, 5)
    assert result.kappa == pytest.approx(
        cohen_kappa_score(human, judged, labels=POINTS, weights="quadratic")
    )
    direct = agreement.evalgate_agreement(
        human, judged, POINTS, weights="quadratic", clusters=[r.case_id for r in golden],
        resamples=500, seed=1,
    )  # fmt: skip
    assert (result.lo, result.hi) == (direct.lo, direct.hi)


def test_pairwise_agreement_is_unweighted_over_preferences() -> None:
    golden = [
        golden_sets.EvalgateGoldenPairwise(f"c{i}", "x", "y", pref, i + 1)  # type: ignore[arg-type]
        for i, pref in enumerate(["A", "B", "tie", "A", "B", "A"])
    ]
    result = agreement.evalgate_pairwise_agreement(
        golden, ["A", "B", "A", "A", "tie", "A"], resamples=200
    )
    assert result.weights == "none" and result.labels == ("A", "tie", "B")
    assert result.raw_agreement == pytest.approx(4 / 6)
    assert result.kappa == pytest.approx(
        cohen_kappa_score(
            ["A", "B", "tie", "A", "B", "A"], ["A", "B", "A", "A", "tie", "A"],
            labels=["A", "tie", "B"],
        )
    )  # fmt: skip


# --------------------------------------------------------------------------- golden sets


def _write(path: Path, rows: list[Any]) -> str:
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_a_pointwise_golden_set_loads(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "golden.jsonl",
        [
            {"case_id": "refund-001", "output": "Open Orders.", "label": 5},
            "",
            {"case_id": "refund-001", "output": "", "label": 1.0},
        ],
    )
    rows = golden_sets.evalgate_load_golden_pointwise(path, SCALE, case_ids={"refund-001"})
    assert rows == (
        golden_sets.EvalgateGoldenPointwise("refund-001", "Open Orders.", 5, 1),
        golden_sets.EvalgateGoldenPointwise("refund-001", "", 1, 3),
    )
    assert isinstance(rows[1].label, int)


def test_a_pairwise_golden_set_loads_and_load_golden_follows_the_mode(tmp_path: Path) -> None:
    row = {"case_id": "c1", "output_a": "yes", "output_b": "no", "preferred": "tie"}
    path = _write(tmp_path / "g.jsonl", [row, {**row, "preferred": "B"}])
    pairwise = spec.EvalgateJudgedEvaluator("r", "pairwise", "r.md", "x", "d", None)
    rows = golden_sets.evalgate_load_golden(path, pairwise)
    assert [r.preferred for r in rows] == ["tie", "B"]
    assert rows[0] == golden_sets.EvalgateGoldenPairwise("c1", "yes", "no", "tie", 1)
    pointwise = spec.EvalgateJudgedEvaluator("r", "pointwise", "r.md", "x", "d", SCALE)
    point_path = _write(tmp_path / "p.jsonl", [{"case_id": "c1", "output": "o", "label": 2}])
    assert golden_sets.evalgate_load_golden(point_path, pointwise)[0].label == 2  # type: ignore[union-attr]
    error = _golden_error(lambda: golden_sets.evalgate_load_golden(path, pointwise))
    assert error.key == "line 1: output_a"  # a pairwise file for a pointwise judge


POINT_ROW = {"case_id": "c1", "output": "text", "label": 4}


@pytest.mark.parametrize(
    ("bad", "key", "reason"),
    [
        ("{not json", "line 2", "not valid JSON"),
        ("[1, 2]", "line 2", "a row must be a JSON object"),
        ({**POINT_ROW, "labeler": "ann"}, "line 2: labeler", "unknown key"),
        ({"case_id": "c1", "output": "text"}, "line 2: label", "missing required key"),
        ({**POINT_ROW, "label": 3.5}, "line 2: label", "not an integer scale point"),
        ({**POINT_ROW, "label": True}, "line 2: label", "not an integer scale point"),
        ({**POINT_ROW, "label": "4"}, "line 2: label", "not an integer scale point"),
        ({**POINT_ROW, "label": 6}, "line 2: label", "outside the scale [1, 5]"),
        ({**POINT_ROW, "label": 0}, "line 2: label", "outside the scale [1, 5]"),
        ({**POINT_ROW, "case_id": ""}, "line 2: case_id", "not a non-empty string"),
        ({**POINT_ROW, "case_id": 7}, "line 2: case_id", "not a non-empty string"),
        ({**POINT_ROW, "case_id": "c9"}, "line 2: case_id", "no case 'c9' in the suite"),
        ({**POINT_ROW, "output": None}, "line 2: output", "not a string"),
    ],
)
def test_a_bad_pointwise_row_names_file_line_and_key(
    tmp_path: Path, bad: Any, key: str, reason: str
) -> None:
    path = _write(tmp_path / "golden.jsonl", [POINT_ROW, bad])
    error = _golden_error(
        lambda: golden_sets.evalgate_load_golden_pointwise(path, SCALE, case_ids={"c1", "c2"})
    )
    assert (error.source, error.key) == (path, key)
    assert reason in error.reason


PAIR_ROW = {"case_id": "c1", "output_a": "a", "output_b": "b", "preferred": "A"}


@pytest.mark.parametrize(
    ("bad", "key", "reason"),
    [
        ({**PAIR_ROW, "preferred": "a"}, "line 2: preferred", '"A", "B" or "tie"'),
        ({**PAIR_ROW, "preferred": "Tie"}, "line 2: preferred", '"A", "B" or "tie"'),
        ({**PAIR_ROW, "preferred": None}, "line 2: preferred", '"A", "B" or "tie"'),
        ({**PAIR_ROW, "output_b": 3}, "line 2: output_b", "not a string"),
        ({**PAIR_ROW, "label": 3}, "line 2: label", "unknown key"),
        ({"case_id": "c1", "output_a": "a", "preferred": "A"}, "line 2: output_b", "missing"),
    ],
)
def test_a_bad_pairwise_row_names_file_line_and_key(
    tmp_path: Path, bad: Any, key: str, reason: str
) -> None:
    path = _write(tmp_path / "golden.jsonl", [PAIR_ROW, bad])
    error = _golden_error(lambda: golden_sets.evalgate_load_golden_pairwise(path))
    assert (error.source, error.key) == (path, key)
    assert reason in error.reason


def _golden_error(call: Any) -> EvalgateConfigError:
    with pytest.raises(EvalgateConfigError) as caught:
        call()
    return caught.value


def test_an_empty_missing_or_binary_golden_set_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    error = _golden_error(lambda: golden_sets.evalgate_load_golden_pairwise(str(empty)))
    assert (error.key, error.reason) == ("-", "the golden set has no rows")
    missing = str(tmp_path / "absent.jsonl")
    error = _golden_error(lambda: golden_sets.evalgate_load_golden_pairwise(missing))
    assert error.source == missing and "cannot read" in error.reason
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    error = _golden_error(lambda: golden_sets.evalgate_load_golden_pairwise(str(binary)))
    assert "not UTF-8" in error.reason
