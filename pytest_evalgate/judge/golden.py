"""Golden sets: the people's labels a judge is measured against, read from JSON Lines.

Pointwise rows are ``{"case_id", "output", "label"}`` (an integer point of the scale), pairwise
rows ``{"case_id", "output_a", "output_b", "preferred"}`` (``"A"``, ``"B"`` or ``"tie"``, the
order of ``EVALGATE_PREFERENCES``, which are the pairwise agreement's categories). Every
problem is an ``EvalgateConfigError(path, "line N: key", reason)``; blank lines are skipped; an
empty set is refused. A row's ``case_id`` must be one of the suite's when ``case_ids`` is given.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.jsonlread import evalgate_json_value
from pytest_evalgate.judge.parse import EvalgateWinner
from pytest_evalgate.judge.spec import EvalgateJudgedEvaluator, EvalgateJudgeScale

EVALGATE_PREFERENCES: tuple[EvalgateWinner, ...] = ("A", "tie", "B")
_POINTWISE_KEYS = frozenset({"case_id", "output", "label"})
_PAIRWISE_KEYS = frozenset({"case_id", "output_a", "output_b", "preferred"})


@dataclass(frozen=True)
class EvalgateGoldenPointwise:
    """One human label: the case whose input the judge sees, the answer, its score."""

    case_id: str
    output: str
    label: int
    line: int


@dataclass(frozen=True)
class EvalgateGoldenPairwise:
    """One human preference between two answers to a case's input."""

    case_id: str
    output_a: str
    output_b: str
    preferred: EvalgateWinner
    line: int


def evalgate_load_golden(
    path: str, evaluator: EvalgateJudgedEvaluator, case_ids: Collection[str] | None = None
) -> tuple[EvalgateGoldenPointwise, ...] | tuple[EvalgateGoldenPairwise, ...]:
    """The golden set of ``evaluator``'s mode (see the module contract)."""
    if evaluator.mode == "pairwise":
        return evalgate_load_golden_pairwise(path, case_ids)
    if evaluator.scale is None:
        raise EvalgateConfigError(path, "-", "a pointwise golden set needs the evaluator's scale")
    return evalgate_load_golden_pointwise(path, evaluator.scale, case_ids)


def evalgate_load_golden_pointwise(
    path: str, scale: EvalgateJudgeScale, case_ids: Collection[str] | None = None
) -> tuple[EvalgateGoldenPointwise, ...]:
    """Pointwise golden rows; labels must be integer points of ``scale``."""
    rows = []
    for number, row in _golden_rows(path, _POINTWISE_KEYS):
        case_id = _case_id(path, number, row, case_ids)
        output = _text(path, number, row, "output")
        rows.append(
            EvalgateGoldenPointwise(case_id, output, _label(path, number, row, scale), number)
        )
    return tuple(rows)


def evalgate_load_golden_pairwise(
    path: str, case_ids: Collection[str] | None = None
) -> tuple[EvalgateGoldenPairwise, ...]:
    """Pairwise golden rows; ``preferred`` must be ``"A"``, ``"B"`` or ``"tie"``."""
    rows = []
    for number, row in _golden_rows(path, _PAIRWISE_KEYS):
        case_id = _case_id(path, number, row, case_ids)
        first, second = _text(path, number, row, "output_a"), _text(path, number, row, "output_b")
        preferred = _preferred(path, number, row)
        rows.append(EvalgateGoldenPairwise(case_id, first, second, preferred, number))
    return tuple(rows)


def _golden_rows(path: str, keys: frozenset[str]) -> list[tuple[int, Mapping[str, Any]]]:
    rows = [(number, _golden_row(path, number, line, keys)) for number, line in _lines(path)]
    if not rows:
        raise EvalgateConfigError(path, "-", "the golden set has no rows")
    return rows


def _lines(path: str) -> list[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8") as handle:
            return [(n, line) for n, line in enumerate(handle, start=1) if line.strip()]
    except OSError as exc:
        raise EvalgateConfigError(
            path, "-", f"cannot read the golden set: {exc.strerror}"
        ) from None
    except UnicodeDecodeError:
        raise EvalgateConfigError(path, "-", "the golden set is not UTF-8") from None


def _golden_row(path: str, number: int, line: str, keys: frozenset[str]) -> Mapping[str, Any]:
    where = f"line {number}"
    row = evalgate_json_value(path, where, line)  # NaN and Infinity refused, like datasets
    if not isinstance(row, dict):
        raise EvalgateConfigError(path, where, "a row must be a JSON object")
    for key in sorted(set(row) - keys):
        raise EvalgateConfigError(path, f"{where}: {key}", f"unknown key (expected {sorted(keys)})")
    for key in sorted(keys - set(row)):
        raise EvalgateConfigError(path, f"{where}: {key}", "missing required key")
    return row


def _case_id(
    path: str, number: int, row: Mapping[str, object], case_ids: Collection[str] | None
) -> str:
    value = row["case_id"]
    if not isinstance(value, str) or not value:
        raise EvalgateConfigError(path, f"line {number}: case_id", "not a non-empty string")
    if case_ids is not None and value not in case_ids:
        raise EvalgateConfigError(
            path, f"line {number}: case_id", f"no case {value!r} in the suite"
        )
    return value


def _text(path: str, number: int, row: Mapping[str, object], key: str) -> str:
    value = row[key]
    if not isinstance(value, str):
        raise EvalgateConfigError(path, f"line {number}: {key}", "not a string")
    return value


def _label(path: str, number: int, row: Mapping[str, Any], scale: EvalgateJudgeScale) -> int:
    value = row["label"]
    integral = isinstance(value, int | float) and not isinstance(value, bool)
    if not integral or not math.isfinite(value) or value != int(value):
        raise EvalgateConfigError(path, f"line {number}: label", "not an integer scale point")
    if int(value) not in scale.evalgate_points():
        reason = f"{int(value)} is outside the scale [{scale.min}, {scale.max}]"
        raise EvalgateConfigError(path, f"line {number}: label", reason)
    return int(value)


def _preferred(path: str, number: int, row: Mapping[str, object]) -> EvalgateWinner:
    value = row["preferred"]
    for choice in EVALGATE_PREFERENCES:
        if value == choice:
            return choice
    raise EvalgateConfigError(path, f"line {number}: preferred", 'must be "A", "B" or "tie"')
