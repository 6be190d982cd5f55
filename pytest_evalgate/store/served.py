"""Which weights answered (SPEC 20): the models and fingerprints a candidate's records report.

``evalgate_served_by(records)`` folds committed records (``EvalgateRecord`` mappings, as
``store.reader`` returns them) into the set of ``model`` names and ``system_fingerprint``
values their endpoint reported, for the decision to record. It is pure: it reads the records'
members and nothing else, and it takes whichever records the caller passes (a view's
``results``, or its ``errors`` too: a ``model_mismatch`` error record keeps the model that
answered). Records written before the fields existed, and answers whose response carried
none, count in ``unreported`` and add no name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class EvalgateServedBy:
    """The reported ``models`` and ``system_fingerprints`` seen over some records, and how
    many of those records reported no model (``unreported``)."""

    models: frozenset[str]
    system_fingerprints: frozenset[str]
    unreported: int

    def evalgate_fields(self) -> dict[str, list[str] | int]:
        """Builtins for a decision record: each set as a sorted list."""
        return {
            "models": sorted(self.models),
            "system_fingerprints": sorted(self.system_fingerprints),
            "unreported": self.unreported,
        }


def evalgate_served_by(records: Iterable[Mapping[str, object]]) -> EvalgateServedBy:
    """The reported models and system fingerprints of ``records`` (a string member counts;
    a missing or null one does not)."""
    models: set[str] = set()
    fingerprints: set[str] = set()
    unreported = 0
    for record in records:
        model = record.get("model")
        if isinstance(model, str):
            models.add(model)
        else:
            unreported += 1
        fingerprint = record.get("system_fingerprint")
        if isinstance(fingerprint, str):
            fingerprints.add(fingerprint)
    return EvalgateServedBy(frozenset(models), frozenset(fingerprints), unreported)
