"""judge/parse.py: robust verdict parsing; every bad answer is a judge_unparseable value."""

from __future__ import annotations

import json

import pytest

from pytest_evalgate.judge import parse, spec

SCALE = spec.EvalgateJudgeScale(1, 5, 4)
Unparseable = parse.EvalgateJudgeUnparseable


def _pointwise(text: str | None) -> parse.EvalgatePointwiseVerdict:
    verdict = parse.evalgate_parse_pointwise(text, SCALE)
    assert isinstance(verdict, parse.EvalgatePointwiseVerdict), verdict
    return verdict


def _unparseable(verdict: object) -> str:
    assert isinstance(verdict, Unparseable), verdict
    assert verdict.category == "judge_unparseable"
    return verdict.reason


# --------------------------------------------------------------------------- finding the object


@pytest.mark.parametrize(
    "text",
    [
        '{"score": 4, "reason": "complete"}',
        '  \n{"score": 4, "reason": "complete"}\n\n',
        '```json\n{"score": 4, "reason": "complete"}\n```',
        '```\n{"score": 4, "reason": "complete"}\n```',
        'Here is my verdict:\n```json\n{"score": 4, "reason": "complete"}\n```\nThanks!',
        'I weighed it carefully. {"score": 4, "reason": "complete"} That is final.',
        'So {"score": 4, "reason": "complete"}, again ```{"score": 4, "reason": "complete"}```',
        '{"score": "4", "reason": "complete"}',
        '{"score": " 4.0 ", "reason": "complete"}',
        '{"reason": "complete", "score": 4.0, "notes": {"style": "terse"}}',
        'a stray { brace first, then {"score": 4, "reason": "complete"}',
    ],
)
def test_a_verdict_is_found_wherever_the_judge_put_it(text: str) -> None:
    verdict = _pointwise(text)
    assert (verdict.score, verdict.value, verdict.passed, verdict.reason) == (
        4.0,
        0.75,
        True,
        "complete",
    )


@pytest.mark.parametrize(
    ("score", "value", "passed"),
    [(1, 0.0, False), (5, 1.0, True), (3.99, 0.7475, False), (4, 0.75, True), (3.5, 0.625, False)],
)
def test_scores_map_to_zero_one_and_pass_at_the_scales_pass(
    score: float, value: float, passed: bool
) -> None:
    verdict = _pointwise(json.dumps({"score": score, "reason": "r"}))
    assert verdict.score == score
    assert verdict.value == pytest.approx(value)
    assert verdict.passed is passed


def test_another_scale_changes_the_value_and_the_pass() -> None:
    scale = spec.EvalgateJudgeScale(0, 10, 7.5)
    verdict = parse.evalgate_parse_pointwise('{"score": 7}', scale)
    assert isinstance(verdict, parse.EvalgatePointwiseVerdict)
    assert (verdict.value, verdict.passed) == (0.7, False)
    assert _unparseable(parse.evalgate_parse_pointwise('{"score": 11}', scale))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (None, "empty"),
        ("", "empty"),
        ("   \n\t", "empty"),
        ("The answer deserves a four.", "no JSON object"),
        ("score: 4", "no JSON object"),
        ("{'score': 4}", "no JSON object"),
        ('{"score": 4, "reason": "cut', "no JSON object"),
        ('{"score": NaN}', "no JSON object"),
        ('{"score": Infinity}', "no JSON object"),
        ('{"reason": "good"}', "no 'score'"),
        # issue 37: a score nested in other JSON is not a top-level verdict
        ('{"verdict": {"score": 4, "reason": "complete"}}', "no 'score'"),
        ('[{"score": 4, "reason": "complete"}]', "no JSON object"),
        ('{"data": [{"id": 1, "score": 5}], "note": "unrelated"}', "no 'score'"),
        ('{"Score": 4}', "no 'score'"),
        ('{"score": null}', "not a finite number"),
        ('{"score": true}', "not a finite number"),
        ('{"score": [4]}', "not a finite number"),
        ('{"score": "four"}', "not a finite number"),
        ('{"score": 1e400}', "not a finite number"),
        ('{"score": 0}', "outside the scale [1, 5]"),
        ('{"score": 5.01}', "outside the scale [1, 5]"),
        ('{"score": -3}', "outside the scale [1, 5]"),
        ('First {"score": 2} but on reflection {"score": 4}', "conflicting 'score'"),
    ],
)
def test_bad_pointwise_answers_are_unparseable_with_a_short_reason(
    text: str | None, why: str
) -> None:
    reason = _unparseable(parse.evalgate_parse_pointwise(text, SCALE))
    assert why in reason
    assert len(reason) < 80


@pytest.mark.parametrize(
    ("text", "winner"),
    [
        ('{"winner": "A", "reason": "r"}', "A"),
        ('{"winner": "b", "reason": "r"}', "B"),
        ('{"winner": " Tie ", "reason": "r"}', "tie"),
        ('{"winner": "TIE", "reason": "r"}', "tie"),
        ('```json\n{"winner": "B", "reason": "r"}\n```', "B"),
        ('After comparing: {"winner": "A", "reason": "r"}.', "A"),
    ],
)
def test_pairwise_winners(text: str, winner: str) -> None:
    verdict = parse.evalgate_parse_pairwise(text)
    assert verdict == parse.EvalgatePairwiseVerdict(winner, "r")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"winner": "C"}', "not A, B or tie"),
        ('{"winner": "A or B"}', "not A, B or tie"),
        ('{"winner": "Answer A"}', "not A, B or tie"),
        ('{"winner": ""}', "not A, B or tie"),
        ('{"winner": 1}', "not A, B or tie"),
        ('{"winner": null}', "not A, B or tie"),
        ('{"score": 4}', "no 'winner'"),
        ('{"winner": "A"} no wait {"winner": "B"}', "conflicting 'winner'"),
        ("A is better.", "no JSON object"),
    ],
)
def test_bad_pairwise_answers_are_unparseable(text: str, why: str) -> None:
    assert why in _unparseable(parse.evalgate_parse_pairwise(text))


def test_a_repeated_identical_verdict_is_one_verdict() -> None:
    text = '{"winner": "A", "reason": "r"}\n```json\n{"winner": "A", "reason": "r"}\n```'
    assert parse.evalgate_parse_pairwise(text) == parse.EvalgatePairwiseVerdict("A", "r")


# --------------------------------------------------------------------------- reasons


def test_reasons_are_optional_coerced_and_cut() -> None:
    assert _pointwise('{"score": 3}').reason == ""
    assert _pointwise('{"score": 3, "reason": null}').reason == ""
    assert _pointwise('{"score": 3, "reason": ["short", 2]}').reason == '["short",2]'
    long = _pointwise(json.dumps({"score": 3, "reason": "x" * 5000})).reason
    assert long == "x" * parse.EVALGATE_REASON_MAX


SECRET = "CROWN-JEWEL-7781"


@pytest.mark.parametrize(
    "text",
    [
        f"{SECRET} is what the user wrote; I cannot grade it.",
        f'{{"score": 9, "reason": "{SECRET}"}}',
        f'{{"reason": "{SECRET}"}}',
        f'{{"score": "{SECRET}"}}',
        f'{{"score": 2, "reason": "{SECRET}"}} {{"score": 3}}',
    ],
)
def test_an_unparseable_reason_never_quotes_the_judge(text: str) -> None:
    # The judge's text may quote the case (eval sets are crown jewels); the error goes to
    # JUnit and the terminal, so it describes the problem only.
    assert SECRET not in _unparseable(parse.evalgate_parse_pointwise(text, SCALE))


# --------------------------------------------------------------------------- hostile sizes


def test_hostile_answers_cost_bounded_work_and_are_unparseable() -> None:
    assert _unparseable(parse.evalgate_parse_pointwise("{" * 200_000, SCALE))
    nested = '{"a":' * 5000 + "1" + "}" * 5000
    assert _unparseable(parse.evalgate_parse_pointwise(nested, SCALE))
    many = '{"x": 1} ' * 10_000 + '{"score": 4}'  # the verdict lies past the decode limit
    assert "no 'score'" in _unparseable(parse.evalgate_parse_pointwise(many, SCALE))


def test_only_the_head_of_a_huge_answer_is_searched() -> None:
    head = '{"score": 2, "reason": "r"} ' + " " * 100_000
    assert _pointwise(head).score == 2.0
    tail = " " * 100_000 + '{"score": 2, "reason": "r"}'
    assert "no JSON object" in _unparseable(parse.evalgate_parse_pointwise(tail, SCALE))


# --------------------------------------------------------------------------- record shapes


def test_verdicts_as_builtins_for_a_judgment_record() -> None:
    point = parse.evalgate_verdict_json(_pointwise('{"score": 4, "reason": "ok"}'))
    assert point == {
        "verdict": {"score": 4.0, "value": 0.75, "passed": True, "reason": "ok"},
        "error": None,
    }
    pair = parse.evalgate_verdict_json(parse.EvalgatePairwiseVerdict("tie", "same"))
    assert pair == {"verdict": {"winner": "tie", "reason": "same"}, "error": None}
    bad = parse.evalgate_verdict_json(Unparseable("no JSON object in the judge's answer"))
    assert bad == {
        "verdict": None,
        "error": {
            "category": "judge_unparseable",
            "status": None,
            "message": "no JSON object in the judge's answer",
        },
    }
    for value in (point, pair, bad):
        assert json.loads(json.dumps(value)) == value
