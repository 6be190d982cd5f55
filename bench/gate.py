"""Benchmark: ``evalgate_evaluate`` against per-resample Python loops, on the same data, one run.

Data: 40,000 paired cases in 50 categories (800 each), clusters of 4 (10,000 clusters), binary
scores. Policy: ``non_inferior`` on ``"*"`` (50 slice rules) plus ``all``, 10,000 resamples.

Two loop baselines run on a subset of resamples and are scaled linearly to 10,000 (each
resample costs the same, so the scaling is fair; the subset size is printed):

- textbook: for each resample, draw 10,000 clusters with replacement, gather their cases,
  recompute every slice's mean and the overall mean from the resampled cases;
- lean loop: for each resample and each slice, draw that slice's clusters and divide the sum of
  the drawn cluster sums by the sum of their sizes (numpy inside, one Python step per slice).

Run: ``python bench/gate.py`` from the repo. Prints times and ratios; asserts nothing.
"""

from __future__ import annotations

import time

import numpy as np

from pytest_evalgate import stats
from pytest_evalgate.aggregate.paired import EvalgateGateInput as BenchInput
from pytest_evalgate.gate import rules as gate
from pytest_evalgate.policy import values as policy_values

CASES, CATEGORIES, CLUSTER, RESAMPLES = 40_000, 50, 4, 10_000


def make_input() -> BenchInput:
    rng = np.random.default_rng(0)
    per = CASES // CATEGORIES
    categories = np.repeat(np.array([f"cat{i:02d}" for i in range(CATEGORIES)]), per)
    clusters = np.array([f"k{i // CLUSTER}" for i in range(CASES)])
    cand = (rng.random(CASES) < 0.80).astype(float)
    base = (rng.random(CASES) < 0.80).astype(float)
    return BenchInput(
        case_ids=tuple(f"case-{i:06d}" for i in range(CASES)),
        categories=categories,
        clusters=clusters,
        candidate_scores=cand,
        baseline_scores=base,
        candidate_fail_counts=(cand < 0.5).astype(int),
        candidate_trials=np.ones(CASES, dtype=int),
    )


def textbook_loop(data: BenchInput, resamples: int) -> float:
    """Seconds for ``resamples`` iterations of the textbook cluster bootstrap over all slices."""
    diffs = data.candidate_scores - data.baseline_scores
    labels, inverse = np.unique(data.clusters, return_inverse=True)
    members = [np.flatnonzero(inverse == c) for c in range(labels.size)]
    names = np.unique(data.categories)
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    for _ in range(resamples):
        drawn = rng.integers(0, labels.size, labels.size)
        cases = np.concatenate([members[c] for c in drawn])
        sample, cats = diffs[cases], data.categories[cases]
        _ = [sample.mean()] + [sample[cats == name].mean() for name in names]
    return time.perf_counter() - start


def lean_loop(data: BenchInput, resamples: int) -> float:
    """Seconds for ``resamples`` iterations of a per-slice loop over precomputed cluster sums."""
    diffs = data.candidate_scores - data.baseline_scores
    groups = [(diffs, data.clusters)] + [
        (diffs[data.categories == name], data.clusters[data.categories == name])
        for name in np.unique(data.categories)
    ]
    sums = [stats.evalgate_cluster_sums(d, c) for d, c in groups]
    rng = np.random.default_rng(2)
    start = time.perf_counter()
    for _ in range(resamples):
        for total, size in sums:
            drawn = rng.integers(0, total.size, total.size)
            _ = total[drawn].sum() / size[drawn].sum()
    return time.perf_counter() - start


def main() -> None:
    data = make_input()
    rules = (
        policy_values.EvalgateRule("non_inferior", 0, slice="all", threshold=0.02),
        policy_values.EvalgateRule("non_inferior", 1, slice="*", threshold=0.05),
    )
    policy = policy_values.EvalgatePolicy(version="bench", rules=rules, resamples=RESAMPLES, seed=0)
    start = time.perf_counter()
    result = gate.evalgate_evaluate(policy, data)
    ours = time.perf_counter() - start
    subset_textbook, subset_lean = 100, 1_000
    textbook = textbook_loop(data, subset_textbook) * RESAMPLES / subset_textbook
    lean = lean_loop(data, subset_lean) * RESAMPLES / subset_lean
    print(f"data: {CASES} cases, {CASES // CLUSTER} clusters, {CATEGORIES} slices + all")
    print(f"rules evaluated: {len(result.rules)}, resamples: {RESAMPLES}")
    print(f"evalgate_evaluate:      {ours:8.2f} s")
    print(f"textbook loop (scaled): {textbook:8.2f} s  ({subset_textbook} resamples measured)")
    print(f"lean loop (scaled):     {lean:8.2f} s  ({subset_lean} resamples measured)")
    print(f"speed-up vs textbook:   {textbook / ours:8.1f} x")
    print(f"speed-up vs lean loop:  {lean / ours:8.1f} x")


if __name__ == "__main__":
    main()
