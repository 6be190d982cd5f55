"""The manifest's ``private:`` key (SPEC section 12): categories that are held-out sets.

``private: [heldout-billing, ...]`` names categories of the dataset whose cases were never
published; the ``public_private_gap`` rule (``gate_private.py``) compares a candidate's gain on
them with its gain on public categories. Like ``tiers``, it is outside the definition digest: it
says how to read results, not what a result means, so marking a category private keeps every
stored record valid.

Refused, naming the manifest, the key and the reason: an entry that is not a category of the
dataset, an entry given twice, and a cluster shared between a private and a public case (a
held-out case whose passage or template is public is not held out, and the rule's bootstrap
resamples each group's clusters on their own).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from pytest_evalgate.errors import EvalgateConfigError


class _Case(Protocol):
    @property
    def case_id(self) -> str: ...
    @property
    def category(self) -> str: ...
    @property
    def cluster(self) -> str: ...


def evalgate_private_categories(
    path: str, private: Sequence[str], cases: Iterable[_Case]
) -> tuple[str, ...]:
    """The checked ``private`` categories of a manifest at ``path`` (order kept)."""
    rows = list(cases)
    known = sorted({case.category for case in rows})
    for position, name in enumerate(private):
        key = f"private[{position}]"
        if name not in known:
            reason = f"no category {name!r} in the dataset; categories: {', '.join(known)}"
            raise EvalgateConfigError(path, key, reason)
        if name in private[:position]:
            raise EvalgateConfigError(path, key, f"{name!r} is listed twice")
    _check_clusters(path, set(private), rows)
    return tuple(private)


def _check_clusters(path: str, private: set[str], cases: Sequence[_Case]) -> None:
    public_of: dict[str, str] = {}
    for case in cases:
        if case.category not in private:
            public_of.setdefault(case.cluster, case.case_id)
    for case in cases:
        other = public_of.get(case.cluster)
        if case.category in private and other is not None:
            reason = (
                f"private case {case.case_id!r} shares cluster {case.cluster!r} with public case "
                f"{other!r}: a held-out set must not share passages with public ones"
            )
            raise EvalgateConfigError(path, "private", reason)
