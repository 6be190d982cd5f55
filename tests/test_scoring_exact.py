"""scoring.py at its boundaries: each comparison where it flips, checked on both sides.

A threshold equal to the score passes and one a hair above fails; a gap equal to a tolerance
matches and a hair more does not; the relative tolerance is taken of the larger magnitude; a
number's sign, groups, fraction and exponent are each read exactly.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.scoring import (
    evalgate_make_scorer,
    evalgate_normalize,
    evalgate_parse_number,
    evalgate_passed,
    evalgate_threshold,
)


def test_passed_is_inclusive_at_the_threshold() -> None:
    assert evalgate_passed(0.5, 0.5) and not evalgate_passed(0.4999, 0.5)
    assert evalgate_passed(1.0) and not evalgate_passed(0.999)


def test_threshold_accepts_the_unit_interval_ends_as_floats() -> None:
    assert evalgate_threshold({}) == 1.0
    assert evalgate_threshold({"threshold": 0}) == 0.0
    one = evalgate_threshold({"threshold": 1})
    assert one == 1.0 and isinstance(one, float)
    assert evalgate_threshold({"threshold": 0.25}) == 0.25
    with pytest.raises(EvalgateConfigError, match=r"evaluator\.threshold.*1\.0001 is not in"):
        evalgate_threshold({"threshold": 1.0001}, "s.yaml")


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("+5 apples", Decimal("5")),
        ("\u22123.5", Decimal("-3.5")),
        ("-0.25", Decimal("-0.25")),
        ("1,234,567.5", Decimal("1234567.5")),
        ("1,23", Decimal("1")),  # not a thousands group: the number is 1
        (".5", Decimal("0.5")),
        ("2e3", Decimal("2E+3")),
        ("-1.5E-2", Decimal("-0.015")),
        ("$12 or 13", Decimal("12")),
        ("v2 then 7", Decimal("7")),
        ("no digits", None),
    ],
)
def test_parse_number_reads_each_part(text: str, number: Decimal | None) -> None:
    parsed = evalgate_parse_number(text)
    assert parsed == number
    if number is not None:
        assert parsed is not None and parsed.is_signed() == number.is_signed()


def test_absolute_tolerance_is_inclusive() -> None:
    scorer = evalgate_make_scorer("numeric", {"tolerance": 0.5}, {})
    assert scorer("10.5", "10") == 1.0 and scorer("9.5", "10") == 1.0
    assert scorer("10.51", "10") == 0.0 and scorer("9.49", "10") == 0.0
    assert scorer("no number", "10") == 0.0


def test_relative_tolerance_uses_the_larger_magnitude() -> None:
    scorer = evalgate_make_scorer("numeric", {"rel_tolerance": 0.1}, {})
    # |100 - 90| = 10 = 0.1 * max(100, 90): matches; against min it would be 9 < 10
    assert scorer("90", "100") == 1.0 and scorer("100", "90") == 1.0
    assert scorer("89.9", "100") == 0.0
    assert scorer("-90", "-100") == 1.0  # magnitudes, not signed values
    exact = evalgate_make_scorer("numeric", {}, {})
    assert exact("1.23456", "1.23457") == 0.0 and exact("1234.50", "1,234.5") == 1.0


def test_normalize_folds_case_spaces_accents_and_end_punctuation_only() -> None:
    assert evalgate_normalize("  Cafe\u0301   AU  Lait!? ") == "café au lait"
    assert evalgate_normalize("a.b") == "a.b"
    assert evalgate_normalize("...") == ""


def test_regex_strips_the_output_and_search_finds_inside() -> None:
    full = evalgate_make_scorer("regex", {}, {})
    search = evalgate_make_scorer("regex", {"search": True}, {})
    assert full("  42 \n", r"\d+") == 1.0 and full("x 42", r"\d+") == 0.0
    assert search("x 42 y", r"\d+") == 1.0 and search("x y", r"\d+") == 0.0


def test_a_bad_regex_option_names_file_and_key() -> None:
    with pytest.raises(EvalgateConfigError) as refused:
        evalgate_make_scorer("regex", {"search": "yes"}, {}, "suite/evalgate.yaml")
    assert (refused.value.source, refused.value.key) == ("suite/evalgate.yaml", "evaluator.scorer")
    assert refused.value.reason == "regex option search must be a bool, not 'yes'"


def test_the_gap_is_exact_across_far_apart_exponents() -> None:
    # 1e3 - 0.001 = 999.999 needs 7 digits; a context of 1 + 0 + 2 would round it to 1.00E+3
    scorer = evalgate_make_scorer("numeric", {"tolerance": 999.9995}, {})
    assert scorer("1e3", "0.001") == 1.0 and scorer("0.001", "1e3") == 1.0
    assert scorer("1e3", "0.0001") == 0.0  # 999.9999 is past the tolerance


def test_bad_numeric_and_python_scorers_name_file_and_key() -> None:
    with pytest.raises(EvalgateConfigError) as tolerance:
        evalgate_make_scorer("numeric", {"tolerance": -1}, {}, "s.yaml")
    assert (tolerance.value.source, tolerance.value.key) == ("s.yaml", "evaluator.scorer")
    assert tolerance.value.reason == "numeric option tolerance must be >= 0, not -1"
    with pytest.raises(EvalgateConfigError) as module:
        evalgate_make_scorer("python:no_such_module_here:fn", {}, {}, "s.yaml")
    assert (module.value.source, module.value.key) == ("s.yaml", "evaluator.scorer")
    assert module.value.reason.startswith("cannot import module 'no_such_module_here'")


def test_user_scores_at_the_interval_ends_are_accepted() -> None:
    extra = {"lo": lambda o, t: 0.0, "hi": lambda o, t: 1, "no": lambda o, t: False}
    assert evalgate_make_scorer("lo", {}, extra)("a", "b") == 0.0
    assert evalgate_make_scorer("hi", {}, extra)("a", "b") == 1.0
    assert evalgate_make_scorer("no", {}, extra)("a", "b") == 0.0
    over = evalgate_make_scorer("x", {}, {"x": lambda o, t: 1.0000001})
    with pytest.raises(EvalgateConfigError, match=r"returned 1\.0000001"):
        over("a", "b")
