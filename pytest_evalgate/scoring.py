"""Scorers: turn one (output, target) pair into a score in [0, 1]. Pure; never imports pytest.

A scorer is a plain function ``scorer(output, target) -> float``. ``evalgate_make_scorer`` builds
one from the manifest's ``evaluator.scorer`` name and its options; ``evalgate_passed`` turns a
score into a pass with the ``threshold`` option (default 1.0: only a full score passes).

Built-in scorers (``EVALGATE_BUILTIN_SCORERS``):

``exact``
    ``output.strip() == target.strip()``. Leading and trailing whitespace is transport (a
    trailing newline, a space after the role marker), not content, so it is ignored; anything
    inside the text, including case and inner spacing, must match.
``normalized``
    Both sides through ``evalgate_normalize``: Unicode NFC, case-folded, whitespace runs
    collapsed to one space, surrounding ``.!?`` stripped; then equal.
``contains``
    The normalized target occurs in the normalized output as whole words (see
    ``_contains``); an empty target is refused rather than matching everything.
``regex``
    The target is a Python regex; ``re.fullmatch`` on the stripped output, or ``re.search``
    with option ``search: true``. A pattern that does not compile is an ``EvalgateConfigError``
    naming the pattern.
``numeric``
    The first number in the output against the first number in the target, compared exactly
    as ``Decimal`` ("1,234.50" == "1234.5"; 0.1 + 0.2 issues cannot arise). Options
    ``tolerance`` (absolute) and ``rel_tolerance`` (relative to the larger magnitude) widen
    the match; with both, either suffices (as ``math.isclose``). Never rounds to significant
    digits: 1.23456 and 1.23457 differ unless a tolerance says otherwise.

Besides these, a name registered by a ``pytest_evalgate_scorers`` hook (passed in as ``extra``)
or ``python:pkg.mod:fn`` (an importable function) may be used. Their results are checked: a
bool or a real number in [0, 1], anything else is an ``EvalgateConfigError``. ``judge`` is
reserved: a judged suite's answers are graded by the judging stage, and its scorer refuses to
be called.
"""

from __future__ import annotations

import importlib
import numbers
import re
import unicodedata
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation, localcontext
from functools import lru_cache
from typing import Any, Protocol

from pytest_evalgate.errors import EvalgateConfigError


class EvalgateScorer(Protocol):
    """What a scorer is: ``scorer(output, target) -> score`` with the score in [0, 1].

    A plain function of two strings fits; a scorer registered through the
    ``pytest_evalgate_scorers`` hook may also return a bool (True is 1.0); anything else is
    refused as a configuration error when it is called.
    """

    def __call__(self, output: str, target: str, /) -> float: ...


EVALGATE_BUILTIN_SCORERS: tuple[str, ...] = ("exact", "normalized", "contains", "regex", "numeric")
"""Names of the scorers this module implements."""

_KEY = "evaluator.scorer"
# graded by their stage: the judge, the tool loop (dialogue), multiple choice (runner.choice)
_RESERVED = ("judge", "tools", "choice")
_PYTHON_PREFIX = "python:"
_COMMON_OPTIONS = frozenset({"threshold"})
_OPTIONS: dict[str, frozenset[str]] = {
    "tools": frozenset({"answer_scorer"}),  # the final answer's text scorer (default contains)
    "choice": frozenset({"target_delimiter", "metric"}),  # SPEC 18 (manifest.choice)
    "regex": frozenset({"search"}),
    "numeric": frozenset({"tolerance", "rel_tolerance"}),
}

# A number: optional sign (ASCII or U+2212 minus), optional currency symbol, digits with
# optional comma thousands groups (only well-formed groups of three), optional fraction and
# exponent. The look-behind keeps "v2" or "A1" style tokens from yielding a number mid-word.
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+\u2212])?[$€£¥]?"
    r"(?P<digits>(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)"
    r"(?P<exp>[eE][-+]?\d+)?"
)


def evalgate_normalize(text: str) -> str:
    """Normalized form used by ``normalized`` and ``contains``.

    Unicode NFC (composed and decomposed accents are the same text), case-folded, every run of
    whitespace collapsed to one space, then surrounding spaces and ``.!?`` stripped.
    """
    folded = unicodedata.normalize("NFC", text).casefold()
    return " ".join(folded.split()).strip(" .!?")


def evalgate_parse_number(text: str) -> Decimal | None:
    """The first number in ``text`` as an exact ``Decimal``, or None if there is none.

    Thousands separators (``1,234.50``), a leading currency symbol, a sign (also the Unicode
    minus) and an exponent are understood; digits of any script that ``Decimal`` reads count.
    """
    match = _NUMBER.search(text)
    if match is None:
        return None
    sign = "-" if match["sign"] in ("-", "\u2212") else ""
    digits = match["digits"].replace(",", "")
    return Decimal(sign + digits + (match["exp"] or ""))


def evalgate_passed(score: float, threshold: float = 1.0) -> bool:
    """A case passes when its score is at least ``threshold`` (the ``threshold`` option)."""
    return score >= threshold


def evalgate_threshold(options: Mapping[str, object], source: str = "evalgate.yaml") -> float:
    """The ``threshold`` option (default 1.0), checked to be a number in [0, 1]."""
    value = options.get("threshold", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise EvalgateConfigError(source, "evaluator.threshold", f"{value!r} is not in [0, 1]")
    return float(value)


def evalgate_make_scorer(
    name: str,
    options: Mapping[str, object],
    extra: Mapping[str, EvalgateScorer],
    source: str = "evalgate.yaml",
) -> EvalgateScorer:
    """Build the scorer called ``name`` with ``options``; errors name ``source``.

    ``extra`` holds scorers registered by ``pytest_evalgate_scorers`` hooks; they may not
    shadow a built-in or reserved name. Unknown names, unknown options and bad option values
    raise ``EvalgateConfigError(source, "evaluator.scorer", reason)``; the reason lists what
    is valid. ``python:`` functions are imported here, so an import error surfaces before
    any request is sent.
    """
    _check_extra(extra, source)
    _check_options(name, options, source)
    evalgate_threshold(options, source)
    if name in _BUILDERS:
        return _BUILDERS[name](options, source)
    if name in _RESERVED:
        return _judged_elsewhere
    if name in extra:
        return _checked(name, extra[name], source)
    if name.startswith(_PYTHON_PREFIX):
        return _checked(name, _import_scorer(name, source), source)
    raise EvalgateConfigError(source, _KEY, f"unknown scorer {name!r}; {_valid_names(extra)}")


def _judged_elsewhere(output: str, target: str) -> float:
    """``scorer: judge``: the judging stage grades answers (runner/judging.py), never this."""
    raise EvalgateConfigError("evalgate.yaml", _KEY, "a judged answer is graded by its judge")


def _valid_names(extra: Mapping[str, EvalgateScorer]) -> str:
    names = [*EVALGATE_BUILTIN_SCORERS, *sorted(extra), "python:pkg.mod:fn"]
    return "valid scorers: " + ", ".join(names)


def _check_extra(extra: Mapping[str, EvalgateScorer], source: str) -> None:
    # A hook that silently replaced ``exact`` would change what every stored score means
    # while the manifest (and so the definition digest) still says ``exact``.
    clash = sorted(set(extra) & {*EVALGATE_BUILTIN_SCORERS, *_RESERVED})
    if clash:
        reason = f"pytest_evalgate_scorers may not redefine built-in scorers {clash}"
        raise EvalgateConfigError(source, _KEY, reason)


def _check_options(name: str, options: Mapping[str, object], source: str) -> None:
    allowed = _COMMON_OPTIONS | _OPTIONS.get(name, frozenset())
    unknown = sorted(set(options) - allowed)
    if unknown:
        reason = (
            f"unknown option(s) {unknown} for scorer {name!r}; valid options: {sorted(allowed)}"
        )
        raise EvalgateConfigError(source, _KEY, reason)


# -- exact, normalized, contains ---------------------------------------------------------------


def _make_exact(options: Mapping[str, object], source: str) -> EvalgateScorer:
    def exact(output: str, target: str) -> float:
        return float(output.strip() == target.strip())

    return exact


def _make_normalized(options: Mapping[str, object], source: str) -> EvalgateScorer:
    def normalized(output: str, target: str) -> float:
        return float(evalgate_normalize(output) == evalgate_normalize(target))

    return normalized


def _make_contains(options: Mapping[str, object], source: str) -> EvalgateScorer:
    def contains(output: str, target: str) -> float:
        return float(_contains(evalgate_normalize(output), evalgate_normalize(target), source))

    return contains


def _contains(haystack: str, needle: str, source: str) -> bool:
    # Whole words only: a plain substring test would score target "no" inside "not now" and
    # target "12" inside "$120" as correct, which is exactly the false pass a gate must avoid.
    if not needle:
        raise EvalgateConfigError(
            source, "target", "contains scorer: empty target matches anything"
        )
    pattern = r"(?<!\w)" + re.escape(needle) + r"(?!\w)"
    return re.search(pattern, haystack) is not None


# -- regex -------------------------------------------------------------------------------------


def _make_regex(options: Mapping[str, object], source: str) -> EvalgateScorer:
    search = options.get("search", False)
    if not isinstance(search, bool):
        raise EvalgateConfigError(
            source, _KEY, f"regex option search must be a bool, not {search!r}"
        )

    def regex(output: str, target: str) -> float:
        compiled = _compile(target, source)
        found = compiled.search(output.strip()) if search else compiled.fullmatch(output.strip())
        return float(found is not None)

    return regex


def _compile(pattern: str, source: str) -> re.Pattern[str]:
    try:
        return _compile_cached(pattern)
    except re.error as exc:
        reason = f"regex scorer: target pattern {pattern!r} does not compile: {exc}"
        raise EvalgateConfigError(source, "target", reason) from exc


@lru_cache(maxsize=4096)
def _compile_cached(pattern: str) -> re.Pattern[str]:
    # One pattern per case, used once per repetition and candidate: worth caching.
    return re.compile(pattern)


# -- numeric -----------------------------------------------------------------------------------


def _make_numeric(options: Mapping[str, object], source: str) -> EvalgateScorer:
    absolute = _tolerance(options, "tolerance", source)
    relative = _tolerance(options, "rel_tolerance", source)

    def numeric(output: str, target: str) -> float:
        expected = evalgate_parse_number(target)
        if expected is None:
            reason = f"numeric scorer: target {target!r} holds no number"
            raise EvalgateConfigError(source, "target", reason)
        actual = evalgate_parse_number(output)
        return float(actual is not None and _close(actual, expected, absolute, relative))

    return numeric


def _tolerance(options: Mapping[str, object], key: str, source: str) -> Decimal:
    value = options.get(key, 0)
    try:
        # str() first: Decimal(0.01) would carry the binary float's 0.01000000000000000020816...
        parsed = Decimal(str(value)) if not isinstance(value, bool) else Decimal("NaN")
    except InvalidOperation:
        parsed = Decimal("NaN")
    if not parsed.is_finite() or parsed < 0:
        raise EvalgateConfigError(source, _KEY, f"numeric option {key} must be >= 0, not {value!r}")
    return parsed


def _close(actual: Decimal, expected: Decimal, absolute: Decimal, relative: Decimal) -> bool:
    if actual == expected:
        return True
    # Enough precision that the subtraction is exact: the default 28 digits would round it.
    digits = max(len(actual.as_tuple().digits), len(expected.as_tuple().digits))
    spread = abs(int(actual.as_tuple().exponent) - int(expected.as_tuple().exponent))
    with localcontext(prec=digits + spread + 2):
        gap = abs(actual - expected)
        return gap <= absolute or gap <= relative * max(abs(actual), abs(expected))


# -- hook-registered and python: scorers -------------------------------------------------------


def _import_scorer(name: str, source: str) -> EvalgateScorer:
    module_name, _, attr = name.removeprefix(_PYTHON_PREFIX).partition(":")
    if not module_name or not attr:
        raise EvalgateConfigError(source, _KEY, f"{name!r} is not of the form python:pkg.mod:fn")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure is the user's config to fix
        reason = f"cannot import module {module_name!r} for {name!r}: {type(exc).__name__}: {exc}"
        raise EvalgateConfigError(source, _KEY, reason) from exc
    function = getattr(module, attr, None)
    if not callable(function):
        reason = f"{name!r}: module {module_name!r} has no callable {attr!r}"
        raise EvalgateConfigError(source, _KEY, reason)
    scorer: EvalgateScorer = function
    return scorer


def _checked(name: str, function: Callable[[str, str], object], source: str) -> EvalgateScorer:
    """Wrap a user scorer so that a result outside the contract fails loudly, never silently."""

    def scorer(output: str, target: str) -> float:
        return _as_score(name, function(output, target), source)

    return scorer


def _as_score(name: str, value: object, source: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real) and 0.0 <= float(value) <= 1.0:
        return float(value)  # NaN fails the comparison, so it is refused too
    shown = repr(value)[:80]
    reason = f"scorer {name!r} returned {shown} ({type(value).__name__}); want a bool or [0, 1]"
    raise EvalgateConfigError(source, _KEY, reason)


_BUILDERS: dict[str, Callable[[Mapping[str, Any], str], EvalgateScorer]] = {
    "exact": _make_exact,
    "normalized": _make_normalized,
    "contains": _make_contains,
    "regex": _make_regex,
    "numeric": _make_numeric,
}
