"""The simulator's code style (``simulated/code_style.py``): kinds at their configured rates,
right code that passes the hidden tests in a real sandbox, wrong code that does not, the
misbehaving kinds, the echo knob, and the seam that selects the style."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from sandboxkit import prepared

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.sandbox import EvalgateExecution, evalgate_extract_code, evalgate_sandbox_run
from pytest_evalgate.simulated import evalgate_parse_simulated_url
from pytest_evalgate.simulated.code_style import (
    EVALGATE_SIM_CODE_KINDS,
    evalgate_sim_code,
    evalgate_sim_code_kind,
    evalgate_sim_last_message,
    evalgate_sim_test_table,
)
from pytest_evalgate.simulated.knobs import EvalgateSimConfig
from pytest_evalgate.simulated.styles import evalgate_sim_answerer, evalgate_sim_ask

TESTS = (
    "assert square(3) == 9\nassert square(-2) == 4\n"
    "assert join_words(['a', 'b'], '-') == 'a-b'\nassert rotate([1, 2, 3]) == [2, 3, 1]\n"
)


def _salts(count: int) -> list[tuple[object, ...]]:
    return [(0, "m", f"digest-{i}") for i in range(count)]


def test_kinds_follow_the_configured_rates() -> None:
    config = EvalgateSimConfig(
        accuracy=0.5, code=True, code_loop=0.1, code_memory=0.1, code_fork=0.05, code_escape=0.05
    )
    counts = Counter(evalgate_sim_code_kind(config, None, salt) for salt in _salts(4000))
    assert set(counts) == set(EVALGATE_SIM_CODE_KINDS)
    expected = {"loop": 0.1, "memory": 0.1, "fork": 0.05, "escape": 0.05, "right": 0.35,
                "wrong": 0.35}  # fmt: skip
    for kind, rate in expected.items():
        spread = 4 * (rate * (1 - rate) / 4000) ** 0.5  # four binomial standard deviations
        assert abs(counts[kind] / 4000 - rate) < spread, (kind, counts[kind])


def test_kinds_are_deterministic_and_follow_the_category_accuracy() -> None:
    config = EvalgateSimConfig(accuracy=0.0, accuracy_by_category=(("easy", 1.0),), code=True)
    salts = _salts(200)
    assert [evalgate_sim_code_kind(config, "easy", s) for s in salts] == ["right"] * 200
    assert [evalgate_sim_code_kind(config, "hard", s) for s in salts] == ["wrong"] * 200
    again = EvalgateSimConfig(accuracy=0.5, code=True)
    first = [evalgate_sim_code_kind(again, None, s) for s in salts]
    assert first == [evalgate_sim_code_kind(again, None, s) for s in salts]


def test_the_table_holds_every_expected_value_of_the_tests() -> None:
    table = evalgate_sim_test_table(TESTS)
    assert table == {
        "square": {"(3,)": "9", "(-2,)": "4"},
        "join_words": {"(['a', 'b'], '-')": "'a-b'"},
        "rotate": {"([1, 2, 3],)": "[2, 3, 1]"},
    }


@pytest.mark.parametrize(
    "tests",
    ["assert f(1) > 0\n", "x = 1\nassert f(1) == 1\n", "assert f(y) == 1\n",
     "assert f(1, k=2) == 1\n", "assert obj.f(1) == 1\n", "assert f(1) == 1 == 1\n", "(\n"],
)  # fmt: skip
def test_tests_of_another_form_give_no_table(tests: str) -> None:
    assert evalgate_sim_test_table(tests) == {}


def _run(code: str, tests: str) -> EvalgateExecution:
    return asyncio.run(evalgate_sandbox_run(code, tests, prepared("bwrap")))


@pytest.mark.slow
def test_right_code_passes_and_wrong_code_fails_in_a_real_sandbox() -> None:
    right = _run(evalgate_sim_code("right", TESTS), TESTS)
    assert (right.outcome, right.message) == ("passed", "")
    wrong = _run(evalgate_sim_code("wrong", TESTS), TESTS)
    assert wrong.outcome == "tests_failed"
    assert wrong.message.startswith("tests line 1: assert square(3) == 9")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "outcome", "fragment"),
    [
        ("loop", "timeout", "timeout"),
        ("memory", "memory", "MemoryError"),
        ("fork", "crashed", "BlockingIOError"),
        ("escape", "crashed", "escape attempt"),
    ],
)
def test_each_misbehaving_kind_has_its_outcome(kind: str, outcome: str, fragment: str) -> None:
    spec = prepared("bwrap").replace(timeout_s=1.5, processes=32)
    code = evalgate_sim_code(kind, TESTS)
    execution = asyncio.run(evalgate_sandbox_run(code, TESTS, spec))
    assert execution.outcome == outcome and fragment in execution.message, execution


@pytest.mark.slow
def test_the_escape_kind_sees_nothing_of_the_harness() -> None:
    execution = _run(evalgate_sim_code("escape", TESTS), TESTS)
    assert "('env', [])" in execution.message
    assert "('loopback', 'OSError')" in execution.message  # network unreachable


def test_unknown_tests_get_wrong_code_even_when_right() -> None:
    assert "evalgate-simulated-wrong" in evalgate_sim_code("right", "assert f(1) > 0\n")
    assert "evalgate-simulated-wrong" in evalgate_sim_code("right", "")


def test_the_answer_is_one_fenced_block_through_the_seam() -> None:
    config = evalgate_parse_simulated_url("simulated://?code=1&accuracy=1")
    prompt = [{"role": "user", "content": "Write square(x)."}]
    ask = evalgate_sim_ask(config, "m", prompt, 0.0, None)
    key = {ask.digest: ("assert square(3) == 9\n", "math")}
    text = evalgate_sim_answerer(config, key)(ask)
    assert text.startswith("Here is the solution.\n\n```python\n")
    assert evalgate_extract_code(text) == evalgate_sim_code("right", "assert square(3) == 9\n")


def test_without_the_code_knob_the_answer_key_style_answers() -> None:
    config = evalgate_parse_simulated_url("simulated://?accuracy=1")
    ask = evalgate_sim_ask(config, "m", "prompt", 0.0, None)
    assert evalgate_sim_answerer(config, {ask.digest: ("42", "c")})(ask) == "42"


def test_echo_answers_with_the_prompt_verbatim() -> None:
    config = evalgate_parse_simulated_url("simulated://?code=1&code_echo=1")
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "```\nX=1\n```"}]
    ask = evalgate_sim_ask(config, "m", prompt, 0.0, None)
    assert evalgate_sim_answerer(config, {})(ask) == "```\nX=1\n```"
    assert evalgate_sim_last_message("plain prompt") == "plain prompt"


def test_code_rates_beyond_one_are_refused() -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_parse_simulated_url("simulated://?code=1&code_loop=0.6&code_fork=0.5")
    assert info.value.key == "code_loop" and "must be <= 1" in info.value.reason
    with pytest.raises(EvalgateConfigError) as single:
        evalgate_parse_simulated_url("simulated://?code_memory=1.5")
    assert single.value.key == "code_memory"
