"""The ``public_private_gap`` rule (SPEC section 12): a memoriser gains on public slices only.

Contracts
---------
- ``{rule: public_private_gap, public: [..], private: [..], max_gap: g}``. Per paired case
  ``d = candidate - baseline`` (the mean over repetitions, as for every paired rule); the gap is
  the paired difference-in-differences ``mean(d over public cases) - mean(d over private
  cases)``: how much more the candidate gained over the baseline on public items than on
  held-out ones. The rule passes when the upper end of its interval is ``<= g``.
- The interval is a cluster bootstrap stratified by group: each resample draws the public
  clusters with replacement and, independently, the private clusters (``stats``' seeded,
  chunked helpers; the public draw is seeded ``[*seed, 0]``, the private ``[*seed, 1]``). Its
  ends are the ``(1 -/+ confidence) / 2`` percentiles, so the upper bound on its own is a
  one-sided test at ``(1 - confidence) / 2`` (2.5 % at 0.95), like every bound of the gate. The
  rule must pass on its own (no multiplicity correction), as ``non_inferior`` and ``floor``.
- The clustered SE is that of a difference of two independent means,
  ``sqrt(se_public^2 + se_private^2)``, with a t interval on ``min(C_public, C_private) - 1``
  degrees of freedom reported beside it.
- Not evaluated (and not passed) when a group has fewer than 2 clusters among the paired cases.
- Policy checks: the lists are non-empty, without repeats and disjoint (at load); against the
  manifest (``evalgate_check_gap_rules``), every entry is a category of the suite, every private
  entry is declared ``private:`` and no public entry is. A ``baseline: null`` policy refuses the
  rule (it is paired; ``gate_single``).
- ``evalgate_gap_rule`` returns the numbers of an ``EvalgateRuleResult`` as a mapping; the gate
  builds the result (this module imports nothing of the gate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from pytest_evalgate import stats
from pytest_evalgate.gate.numbers import EvalgateRuleNumbers
from pytest_evalgate.stats import EvalgateSeed


def evalgate_gap_name(private: Sequence[str]) -> str:
    """The target in the rule's name: ``public_private_gap[<private joined by +>]``."""
    return "+".join(private)


def _sub_seed(seed: EvalgateSeed, stream: int) -> list[int]:
    base = [seed] if isinstance(seed, int) else list(seed)
    return [*base, stream]


def _not_evaluated(reason: str, counts: EvalgateRuleNumbers) -> EvalgateRuleNumbers:
    return {**counts, "passed": False, "evaluated": False, "reason": reason}


def evalgate_gap_rule(
    diffs: npt.ArrayLike,
    categories: npt.ArrayLike,
    clusters: npt.ArrayLike,
    public: Sequence[str],
    private: Sequence[str],
    max_gap: float,
    *,
    confidence: float,
    resamples: int,
    seed: EvalgateSeed,
) -> EvalgateRuleNumbers:
    """The numbers, pass and reason of one ``public_private_gap`` rule (see the module contract).

    ``diffs``, ``categories`` and ``clusters`` are per paired case (candidate minus baseline).
    """
    d = np.asarray(diffs, dtype=np.float64)
    cats = np.asarray(categories).astype(str)
    clus = np.asarray(clusters).astype(str)
    groups = [_group(d, cats, clus, names) for names in (public, private)]
    sizes = [int(np.unique(c).size) for _, c in groups]
    counts: EvalgateRuleNumbers = {
        "n_cases": sum(v.size for v, _ in groups),
        "n_clusters": sum(sizes),
        "limit": max_gap,
    }
    if min(sizes) < 2:
        which = "public" if sizes[0] < 2 else "private"
        reason = f"not evaluated: {min(sizes)} {which} cluster(s); an interval needs at least 2"
        return _not_evaluated(reason, counts)
    boot = _boot_gap(groups, resamples, seed)
    estimate = float(groups[0][0].mean() - groups[1][0].mean())
    lo, hi = stats.evalgate_percentile_interval(boot, confidence)
    se, dof = _gap_se(groups)
    t_lo, t_hi = stats.evalgate_t_interval(estimate, se, dof, confidence)
    numbers: EvalgateRuleNumbers = {
        **counts, "estimate": estimate, "lo": lo, "hi": hi, "se": se, "t_lo": t_lo, "t_hi": t_hi,
    }  # fmt: skip
    return {**numbers, **_verdict(numbers, max_gap, public, private, confidence)}


def _group(
    d: npt.NDArray[np.float64],
    cats: npt.NDArray[np.str_],
    clus: npt.NDArray[np.str_],
    names: Sequence[str],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.str_]]:
    mask = np.isin(cats, list(names))
    return d[mask], clus[mask]


def evalgate_gap_bootstrap(
    public: tuple[npt.ArrayLike, npt.ArrayLike],
    private: tuple[npt.ArrayLike, npt.ArrayLike],
    resamples: int,
    seed: EvalgateSeed,
) -> npt.NDArray[np.float64]:
    """The bootstrap distribution of the gap: ``(diffs, clusters)`` of each group, clusters
    resampled within each group, the public draw seeded ``[*seed, 0]``, the private ``[*seed,
    1]``."""
    groups = [(np.asarray(v, np.float64), np.asarray(c).astype(str)) for v, c in (public, private)]
    return _boot_gap(groups, resamples, seed)


def _boot_gap(
    groups: Sequence[tuple[npt.NDArray[np.float64], npt.NDArray[np.str_]]],
    resamples: int,
    seed: EvalgateSeed,
) -> npt.NDArray[np.float64]:
    means = []
    for stream, (values, clusters) in enumerate(groups):
        sums, sizes = stats.evalgate_cluster_sums(values, clusters)
        totals, counts = stats.evalgate_bootstrap_totals(
            sums, sizes, resamples, _sub_seed(seed, stream)
        )
        means.append(totals / counts)
    return means[0] - means[1]


def _gap_se(
    groups: Sequence[tuple[npt.NDArray[np.float64], npt.NDArray[np.str_]]],
) -> tuple[float, int]:
    parts = [stats.evalgate_clustered_se(values, clusters) for values, clusters in groups]
    se = math.sqrt(sum(part[1] ** 2 for part in parts))
    return se, min(part[2] for part in parts)


def _verdict(
    numbers: EvalgateRuleNumbers,
    max_gap: float,
    public: Sequence[str],
    private: Sequence[str],
    confidence: float,
) -> EvalgateRuleNumbers:
    est, lo, hi = numbers["estimate"], numbers["lo"], numbers["hi"]
    where = f"public {'+'.join(public)} vs private {'+'.join(private)}"
    if hi <= max_gap:
        reason = f"passes: gap {est:+.4f} ({where}), upper bound {hi:+.4f} <= {max_gap}"
        return {"passed": True, "reason": reason}
    if lo > max_gap:
        reason = (
            f"memorising: the candidate gained {est:+.4f} more over the baseline on {where} "
            f"(lower bound {lo:+.4f} > max_gap {max_gap})"
        )
        return {"passed": False, "reason": reason}
    variance = numbers["se"] ** 2 * numbers["n_cases"]  # design-effect variance per case
    needed = stats.evalgate_cases_needed(variance, max_gap - est, confidence)
    head = f"too little evidence: gap {est:+.4f} ({where}), upper bound {hi:+.4f} > {max_gap}"
    if needed is None or est >= max_gap:
        return {"passed": False, "reason": f"{head}; more cases at this gap would not pass"}
    more = max(1, needed - int(numbers["n_cases"]))
    return {"passed": False, "reason": f"{head}; about {more} more cases would settle it"}
