"""Unit tests for ``pytest_evalgate.scoring``: every scorer, its options and its errors."""

from __future__ import annotations

import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.scoring import (
    EVALGATE_BUILTIN_SCORERS,
    EvalgateScorer,
    evalgate_make_scorer,
    evalgate_normalize,
    evalgate_parse_number,
    evalgate_passed,
    evalgate_threshold,
)


def make(
    name: str, extra: dict[str, EvalgateScorer] | None = None, **options: Any
) -> EvalgateScorer:
    return evalgate_make_scorer(name, options, extra or {}, source="suite/evalgate.yaml")


def test_builtin_names() -> None:
    assert EVALGATE_BUILTIN_SCORERS == ("exact", "normalized", "contains", "regex", "numeric")


# -- exact -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "target", "score"),
    [
        ("REFUSE", "REFUSE", 1.0),
        ("  REFUSE\n", "REFUSE", 1.0),  # surrounding whitespace is transport
        ("REFUSE", "\tREFUSE ", 1.0),
        ("refuse", "REFUSE", 0.0),  # case is content
        ("REFUSE.", "REFUSE", 0.0),
        ("net  30", "net 30", 0.0),  # inner whitespace is content
        ("café", "café", 1.0),
        ("cafe\u0301", "caf\u00e9", 0.0),  # exact means exact code points
        ("", "", 1.0),
    ],
)
def test_exact(output: str, target: str, score: float) -> None:
    assert make("exact")(output, target) == score


# -- normalized --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "target", "score"),
    [
        ("Yes.", "yes", 1.0),
        ("  YES!!  ", "yes", 1.0),
        ("Net   30\n days?", "net 30 days", 1.0),
        ("STRASSE", "straße", 1.0),  # casefold, not lower
        ("cafe\u0301", "CAF\u00c9", 1.0),  # NFC: decomposed accent equals composed
        ("net\u00a030", "net 30", 1.0),  # no-break space is whitespace
        ("no", "yes", 0.0),
        ("yes, definitely", "yes", 0.0),
        ("$1,284.50", "$1284.50", 0.0),  # not a numeric scorer
        ("...", "", 1.0),
        ("v1.2", "v1", 0.0),  # only surrounding punctuation goes
    ],
)
def test_normalized(output: str, target: str, score: float) -> None:
    assert make("normalized")(output, target) == score


def test_normalize_strips_only_surrounding_punctuation() -> None:
    assert evalgate_normalize("  Hello,\tWorld?! ") == "hello, world"
    assert evalgate_normalize("U.S.A.") == "u.s.a"


# -- contains ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "target", "score"),
    [
        ("The refund window is 30 days.", "30 days", 1.0),
        ("The REFUND window is 30   days", "refund window", 1.0),
        ("Sure! The answer is: Yes.", "yes", 1.0),
        ("Ihre Straße ist korrekt", "STRASSE", 1.0),
        ("not now", "no", 0.0),  # whole words only
        ("$120", "12", 0.0),
        ("it costs 12 dollars", "12", 1.0),
        ("nothing here", "refund", 0.0),
    ],
)
def test_contains(output: str, target: str, score: float) -> None:
    assert make("contains")(output, target) == score


def test_contains_refuses_empty_target() -> None:
    with pytest.raises(EvalgateConfigError, match="empty target"):
        make("contains")("anything", " ?! ")


# -- regex -------------------------------------------------------------------------------------


def test_regex_fullmatch_by_default() -> None:
    scorer = make("regex")
    assert scorer("  INV-4821 \n", r"INV-\d{4}") == 1.0
    assert scorer("Invoice INV-4821", r"INV-\d{4}") == 0.0
    assert scorer("INV-48210", r"INV-\d{4}") == 0.0


def test_regex_search_option() -> None:
    scorer = make("regex", search=True)
    assert scorer("Invoice INV-4821 is paid", r"INV-\d{4}") == 1.0
    assert scorer("Invoice pending", r"INV-\d{4}") == 0.0


def test_regex_unicode() -> None:
    assert make("regex")("Zürich", r"z\w+ch|Z\w+ch") == 1.0
    assert make("regex")("日本", r"\w{2}") == 1.0


def test_regex_compile_error_names_pattern() -> None:
    with pytest.raises(EvalgateConfigError) as info:
        make("regex")("x", "INV-(\\d+")
    assert repr("INV-(\\d+") in info.value.reason
    assert "does not compile" in info.value.reason
    assert info.value.source == "suite/evalgate.yaml"


def test_regex_search_option_must_be_bool() -> None:
    with pytest.raises(EvalgateConfigError, match="search must be a bool"):
        make("regex", search="yes")


# -- numeric -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("The total is $1,284.50.", Decimal("1284.50")),
        ("-42", Decimal("-42")),
        ("balance: \u22127.25 EUR", Decimal("-7.25")),  # Unicode minus sign
        ("-$5.00 credit", Decimal("-5.00")),
        ("about 1.5e3 tokens", Decimal("1500")),
        (".5 of it", Decimal("0.5")),
        ("12.5%", Decimal("12.5")),
        ("١٢٣ items", Decimal("123")),  # Arabic-Indic digits
        ("1,2345", Decimal("1")),  # a malformed thousands group is not a separator
        ("model v2 says 7", Decimal("7")),  # a digit glued to a word is not a number
        ("no digits here", None),
    ],
)
def test_parse_number(text: str, number: Decimal | None) -> None:
    assert evalgate_parse_number(text) == number


@pytest.mark.parametrize(
    ("output", "target", "score"),
    [
        ("1,234.50", "1234.5", 1.0),
        ("The refund is $1,284.50.", "1284.50", 1.0),
        ("-3", "-3", 1.0),
        ("-3", "3", 0.0),
        ("0.30000000000000004", "0.3", 0.0),  # float noise is a different number
        ("0.3", "0.3", 1.0),
        ("123456", "123457", 0.0),  # differ in the 6th significant digit
        ("1.23456", "1.23457", 0.0),
        ("1.000001", "1", 0.0),
        ("12345678901234567890123456789012", "12345678901234567890123456789013", 0.0),
        ("no number", "5", 0.0),
        ("14 days, then 30", "14", 1.0),  # the first number counts
        ("30 then 14", "14", 0.0),
    ],
)
def test_numeric_exact_by_default(output: str, target: str, score: float) -> None:
    assert make("numeric")(output, target) == score


def test_numeric_absolute_tolerance() -> None:
    scorer = make("numeric", tolerance=0.01)
    assert scorer("10.01", "10") == 1.0  # boundary is inclusive and exact (no float 0.01)
    assert scorer("9.99", "10") == 1.0
    assert scorer("10.011", "10") == 0.0


def test_numeric_relative_tolerance() -> None:
    scorer = make("numeric", rel_tolerance=0.001)
    assert scorer("1001", "1000") == 1.0
    assert scorer("1002", "1000") == 0.0
    assert scorer("-1001", "-1000") == 1.0


def test_numeric_either_tolerance_suffices() -> None:
    scorer = make("numeric", tolerance="0.5", rel_tolerance=0.01)
    assert scorer("100.9", "100") == 1.0  # relative
    assert scorer("0.4", "0") == 1.0  # absolute (relative of 0 is 0)
    assert scorer("102", "100") == 0.0


def test_numeric_tolerance_keeps_huge_numbers_exact() -> None:
    scorer = make("numeric", tolerance=1)
    big = "1" + "0" * 40
    assert scorer(big[:-1] + "1", big) == 1.0
    assert scorer(big[:-1] + "2", big) == 0.0


@pytest.mark.parametrize("bad", [-0.1, "abc", True, float("nan"), [1]])
def test_numeric_bad_tolerance(bad: object) -> None:
    with pytest.raises(EvalgateConfigError, match="tolerance must be >= 0"):
        make("numeric", tolerance=bad)


def test_numeric_target_without_number() -> None:
    with pytest.raises(EvalgateConfigError, match="holds no number") as info:
        make("numeric")("5", "five")
    assert info.value.key == "target"


# -- names, options, thresholds ----------------------------------------------------------------


def test_unknown_scorer_lists_valid_names() -> None:
    with pytest.raises(EvalgateConfigError) as info:
        make("exakt", extra={"support_refusal": lambda o, t: 1.0})
    assert info.value.key == "evaluator.scorer"
    assert info.value.source == "suite/evalgate.yaml"
    for name in (*EVALGATE_BUILTIN_SCORERS, "support_refusal", "python:pkg.mod:fn"):
        assert name in info.value.reason
    assert "'exakt'" in info.value.reason


def test_unknown_option_lists_valid_options() -> None:
    with pytest.raises(EvalgateConfigError) as info:
        make("numeric", tolerence=0.1)
    assert info.value.key == "evaluator.scorer"
    assert "tolerence" in info.value.reason
    assert "rel_tolerance" in info.value.reason
    assert "threshold" in info.value.reason


def test_option_of_another_scorer_is_unknown() -> None:
    with pytest.raises(EvalgateConfigError, match="search"):
        make("exact", search=True)


def test_judge_is_reserved_for_the_judging_stage() -> None:
    scorer = make("judge")
    with pytest.raises(EvalgateConfigError, match="graded by its judge"):
        scorer("an answer", "a target")
    with pytest.raises(EvalgateConfigError, match="may not redefine"):
        make("exact", extra={"judge": lambda o, t: 1.0})


def test_extra_may_not_shadow_builtin() -> None:
    with pytest.raises(EvalgateConfigError, match="may not redefine"):
        make("normalized", extra={"exact": lambda o, t: 1.0})


def test_threshold() -> None:
    assert evalgate_passed(1.0)
    assert not evalgate_passed(0.99)
    assert evalgate_passed(0.5, threshold=0.5)
    assert not evalgate_passed(0.49, threshold=0.5)
    assert evalgate_threshold({}) == 1.0
    assert evalgate_threshold({"threshold": 0.7}) == 0.7
    assert make("exact", threshold=0.5)("a", "a") == 1.0  # threshold is valid for every scorer


@pytest.mark.parametrize("bad", [1.5, -0.1, "high", True])
def test_threshold_out_of_range(bad: object) -> None:
    with pytest.raises(EvalgateConfigError, match="not in"):
        make("exact", threshold=bad)


# -- hook-registered and python: scorers -------------------------------------------------------


def test_extra_scorer_is_used_and_checked() -> None:
    extra: dict[str, EvalgateScorer] = {
        "length": lambda o, t: float(len(o) == len(t)),
        "broken": lambda o, t: 2.0,
    }
    assert make("length", extra=extra)("abc", "xyz") == 1.0
    with pytest.raises(EvalgateConfigError, match=r"'broken' returned 2\.0"):
        make("broken", extra=extra)("a", "b")


@pytest.fixture
def scorer_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable module of user scorers with a unique name, on sys.path for this test."""
    name = f"evalgate_user_scorers_{tmp_path.name.replace('-', '_')}"
    source = textwrap.dedent(
        """
        def starts(output, target):
            return output.startswith(target)

        def half(output, target):
            return 0.5

        def text(output, target):
            return "yes"

        def too_big(output, target):
            return 3

        def nan(output, target):
            return float("nan")

        def none(output, target):
            return None

        not_callable = 42
        """
    )
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_python_scorer_bool_and_float(scorer_module: str) -> None:
    starts = make(f"python:{scorer_module}:starts")
    assert starts("REFUSE: no", "REFUSE") == 1.0
    assert starts("ok", "REFUSE") == 0.0
    assert make(f"python:{scorer_module}:half")("a", "b") == 0.5


@pytest.mark.parametrize(
    ("fn", "shown"),
    [("text", "'yes' (str)"), ("too_big", "3 (int)"), ("nan", "nan (float)"), ("none", "None")],
)
def test_python_scorer_bad_return(scorer_module: str, fn: str, shown: str) -> None:
    scorer = make(f"python:{scorer_module}:{fn}")
    with pytest.raises(EvalgateConfigError) as info:
        scorer("a", "b")
    assert f"python:{scorer_module}:{fn}" in info.value.reason
    assert shown in info.value.reason


def test_python_scorer_missing_module() -> None:
    with pytest.raises(EvalgateConfigError, match="cannot import module 'no_such_mod_xyz'"):
        make("python:no_such_mod_xyz:fn")


def test_python_scorer_module_raising_on_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "evalgate_bad_import_mod.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EvalgateConfigError, match="RuntimeError: boom"):
        make("python:evalgate_bad_import_mod:fn")


def test_python_scorer_missing_or_uncallable_attribute(scorer_module: str) -> None:
    with pytest.raises(EvalgateConfigError, match="no callable 'missing'"):
        make(f"python:{scorer_module}:missing")
    with pytest.raises(EvalgateConfigError, match="no callable 'not_callable'"):
        make(f"python:{scorer_module}:not_callable")


@pytest.mark.parametrize("name", ["python:", "python:mod", "python::fn"])
def test_python_scorer_malformed_name(name: str) -> None:
    with pytest.raises(EvalgateConfigError, match=r"python:pkg\.mod:fn"):
        make(name)


def test_python_scorer_accepts_only_threshold(scorer_module: str) -> None:
    assert make(f"python:{scorer_module}:half", threshold=0.5)("a", "b") == 0.5
    with pytest.raises(EvalgateConfigError, match="unknown option"):
        make(f"python:{scorer_module}:half", tolerance=1)
