"""``dataset.exclude``: cases left out of a suite on purpose, each with its reason.

A case that can never be answered (longer than every candidate's context, a judge that never
answers it in format at temperature 0) kept the verdict ``incomplete`` on every run. Listed as
``dataset.exclude: [{case: ID, reason: "..."}]``, it is neither collected nor requested nor
counted; the decision records the list (``exclusions``), so the signed record says which cases
were left out and why. The generation's definition digest does not change: the other cases'
stored answers are reused, and the excluded case's stored records are read without complaint.

Refused, naming the key (exit 4, before any request): a case id the dataset lacks, one excluded
twice, a reason that is only white space, and an exclusion of every case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.dataset import EvalgateCase
from pytest_evalgate.manifest.schema import EvalgateExclusionSchema


@dataclass(frozen=True)
class EvalgateExclusion:
    """One excluded case and why."""

    case_id: str
    reason: str

    def evalgate_json(self) -> dict[str, str]:
        """As the decision records it."""
        return {"case": self.case_id, "reason": self.reason}


@dataclass(frozen=True)
class EvalgateExcluded:
    """The dataset split: the cases kept, the cases left out, and the exclusions in order."""

    kept: tuple[EvalgateCase, ...]
    left_out: tuple[EvalgateCase, ...]
    exclusions: tuple[EvalgateExclusion, ...]


def evalgate_exclude(
    source: str, cases: Sequence[EvalgateCase], exclude: Sequence[EvalgateExclusionSchema]
) -> EvalgateExcluded:
    """Split ``cases`` by ``exclude`` (see the module docstring for the refusals)."""
    known = {case.case_id for case in cases}
    exclusions: list[EvalgateExclusion] = []
    for index, entry in enumerate(exclude):
        key = f"dataset.exclude[{index}]"
        if entry.case not in known:
            raise EvalgateConfigError(
                source, f"{key}.case", f"no case {entry.case!r} in the dataset"
            )
        if any(e.case_id == entry.case for e in exclusions):
            raise EvalgateConfigError(source, f"{key}.case", f"{entry.case!r} is excluded twice")
        if not entry.reason.strip():
            reason = "say why the case is left out (the decision records it)"
            raise EvalgateConfigError(source, f"{key}.reason", reason)
        exclusions.append(EvalgateExclusion(entry.case, entry.reason.strip()))
    out = {e.case_id for e in exclusions}
    kept = tuple(case for case in cases if case.case_id not in out)
    if not kept:
        raise EvalgateConfigError(source, "dataset.exclude", "every case is excluded")
    left_out = tuple(case for case in cases if case.case_id in out)
    return EvalgateExcluded(kept, left_out, tuple(exclusions))
